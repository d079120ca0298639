#!/usr/bin/env bash
# CPU check of perf-project's HSDP targets (docs/projection.md, "HSDP targets"): the order of the
# collectives the simulator gives a 4-rank, 2-instance Megatron FSDP optim_grads_params step,
# outer no_shard and outer optim, against the engine's NVTX launch ranges of the same runs
# measured with gloo. Run from the repository root after scripts/setup:
#   results/cpu/projection_hsdp_2026-12-05/run.sh
set -euo pipefail
OUT=results/cpu/projection_hsdp_2026-12-05
STEPS=3
run() {  # world size, report file, extra overrides...
  local ng=$1 file=$2; shift 2
  build/perf-launch -m llama -mr llama3_tiny_cpu -ng "$ng" -g cpu -ms "$STEPS" --use_megatron_fsdp true \
    shardbench.unit_timing=true shardbench.compare_with_ddp=false \
    shardbench.report_path="$OUT/$file" "$@" > "$OUT/${file%.json}.log" 2>&1
}
# 1. The 1-rank measurement the projections start from (no HSDP).
run 1 measured_ws1.json
for outer in no_shard optim; do
  # 2. The projection to 4 ranks in 2 instances (weak scaling, as perf-launch scales the recipe).
  build/perf-project "$OUT/measured_ws1.json" -ng 4 -gn 4 --dp_instances 2 \
    --outer_dp_sharding_strategy "$outer" -g cpu --interconnect nvlink4 -o "$OUT/projected_$outer.json"
  # 3. The same layout measured, the engine's NVTX ranges recorded per rank.
  mkdir -p "$OUT/nvtx_$outer"
  NVTX_INJECTION64_PATH="$PWD/build/tests/libshardbench_nvtx_recorder.so" \
  SHARDBENCH_NVTX_RECORD="$PWD/$OUT/nvtx_$outer/rank%r.tsv" run 4 "measured_$outer.json" \
    ddp.num_distributed_optimizer_instances=2 ddp.outer_dp_sharding_strategy="$outer"
done
# 4. The order of collectives of the last step, every rank.
python3 "$OUT/compare.py" "$OUT" > "$OUT/comparison.txt"
cat "$OUT/comparison.txt"
