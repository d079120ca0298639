#!/usr/bin/env bash
# CPU validation of the scale projection (docs/projection.md, issue 19): gloo at 2 and 4 ranks on
# llama3_tiny_cpu, projected from a 1-rank CPU measurement plus gloo collectives_bench, against
# runs measured at 2 and 4 ranks. Run from the repository root after scripts/setup:
#   results/cpu/projection_2026-12-05/run.sh
set -euo pipefail
OUT=results/cpu/projection_2026-12-05
STEPS=20
WRAPPERS='shardbench.compare_wrappers=[ddp,torch_fsdp2]'
run() {  # world size, report file, extra overrides...
  local ng=$1 file=$2; shift 2
  build/perf-launch -m llama -mr llama3_tiny_cpu -ng "$ng" -g cpu -ms "$STEPS" --use_megatron_fsdp true \
    shardbench.unit_timing=true "$WRAPPERS" shardbench.report_path="$OUT/$file" "$@" > "$OUT/${file%.json}.log" 2>&1
}
# 1. The measurement the projection starts from: one rank (each wrapper run: Megatron FSDP
#    optim_grads_params, its DDP+distopt baseline, DDP, FSDP2).
run 1 measured_ws1.json
# 2. gloo collectives on this machine at the target sizes (the collective model's fits).
for n in 2 4; do
  build/benchmarks/collectives_bench --world_size "$n" --backend gloo \
    --benchmark_out="$OUT/collectives_gloo_ws$n.json" --benchmark_out_format=json > "$OUT/collectives_gloo_ws$n.log" 2>&1
done
# 3. Projections to 2 and 4 ranks (weak scaling: the per-rank batch of the 1-rank run).
for n in 2 4; do
  build/perf-project "$OUT/measured_ws1.json" -ng "$n" -gn "$n" -g cpu \
    --collectives "$OUT/collectives_gloo_ws$n.json" -o "$OUT/projected_ws$n.json"
done
# 4. The same runs measured at 2 and 4 ranks, with the engine's NVTX ranges recorded per rank
#    (the order of collectives) by the test suite's NVTX recorder.
for n in 2 4; do
  mkdir -p "$OUT/nvtx_ws$n"
  NVTX_INJECTION64_PATH="$PWD/build/tests/libshardbench_nvtx_recorder.so" \
  SHARDBENCH_NVTX_RECORD="$PWD/$OUT/nvtx_ws$n/rank%r.tsv" run "$n" "measured_ws$n.json"
done
# 5. The same projection from each N-rank run's own unit_timing ("replayed"): the simulator and
#    collective model given the compute as it ran at N ranks, which separates their error from
#    the error of carrying 1-rank compute times to N ranks sharing this machine's 2 cores.
for n in 2 4; do
  build/perf-project "$OUT/measured_ws$n.json" -ng "$n" -gn "$n" -g cpu \
    --collectives "$OUT/collectives_gloo_ws$n.json" -o "$OUT/replayed_ws$n.json"
done
# 6. The 1-rank measurement again with one intra-op thread, as each rank of a multi-rank local
#    run gets (perf-launch sets OMP_NUM_THREADS=1 per worker, docs/cpu-scheduling.md), and the
#    projections from it.
run 1 measured_ws1_omp1.json env.OMP_NUM_THREADS=1
for n in 2 4; do
  build/perf-project "$OUT/measured_ws1_omp1.json" -ng "$n" -gn "$n" -g cpu \
    --collectives "$OUT/collectives_gloo_ws$n.json" -o "$OUT/projected_omp1_ws$n.json"
done
# 7. Projected vs measured step time, and the order of collectives of the last step.
python3 "$OUT/compare.py" "$OUT" > "$OUT/comparison.txt"
cat "$OUT/comparison.txt"
