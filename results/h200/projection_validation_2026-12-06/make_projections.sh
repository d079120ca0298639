#!/usr/bin/env bash
# Regenerates projections.tgz (the folder projections/, packed): the committed one-GPU H200 reports
# projected with perf-project to every GPU count of the published points in published.json, each
# under three sets of scale-effect flags (docs/projection.md, "Effects at scale"):
#   base      none (the simulator alone, the table's interconnect at full bandwidth)
#   scale     --nccl_algo auto --jitter normal
#   scale_f05 --nccl_algo auto --jitter normal --inter_node_efficiency 0.5
# Point -> report: the MPT-13B H100 point and the Llama 3 8B points take the 4-layer Llama 3 8B
# runs (projection_models_2026-12-05) at 32 layers; the MPT-3B, 1B and 760M H100 points take the
# 1.5B bench model (projection_ws1_marks_2026-12-05) as measured. The points past 64 GPUs (A100s):
# the FSDP paper's GPT-175B takes the 2-layer Llama 3 70B runs with every layer recomputed
# (projection_70b_recompute_2026-12-05) at GPT-175B's 96 layers, its T5-11B the 8B runs at T5-11B's
# 48 blocks; llm-foundry's A100 40GB MPT-7B and MPT-13B the 8B runs at their 32 and 40 layers, its
# smaller models the 1.5B bench model as measured. Targets other than the H200 scale the H200
# compute by kernel class (--kernels, the datasheets' ratios). The global batch keeps the published
# number of micro-batches per GPU (-gb = the report's micro-batch x GPUs x accumulation steps).
# Run from the repository root after building: results/h200/projection_validation_2026-12-06/make_projections.sh
set -euo pipefail
. results/h200/projection_validation_2026-12-06/pack_projections.sh  # effect_flags, pack_projections
D=results/h200/projection_validation_2026-12-06
M=results/h200/projection_models_2026-12-05
R=results/h200/projection_70b_recompute_2026-12-05
W=results/h200/projection_ws1_marks_2026-12-05
PP=${PERF_PROJECT:-build/perf-project}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir "$T/projections"

# report and kernel summary of wrapper $2 for model $1 (8b, 70b_rl or 1p5b)
report() {
  case $1/$2 in
    70b_rl/fsdp2) echo "$R/llama3_70b_70b-2l-rl2-fsdp2_ws1.json $R/llama3_70b_torch_fsdp2-reshard_after_forward_ws1_rank0.kernels.json" ;;
    70b_rl/mfsdp) echo "$R/llama3_70b_70b-2l-rl2-fsdp-optim_grads_params_ws1.json $R/llama3_70b_megatron_fsdp-optim_grads_params_ws1_rank0.kernels.json" ;;
    8b/fsdp2) echo "$M/llama3_8b_8b-4l-fsdp2_ws1.json $M/llama3_8b_torch_fsdp2-reshard_after_forward_ws1_rank0.kernels.json" ;;
    8b/mfsdp) echo "$M/llama3_8b_8b-4l-fsdp-optim_grads_params_ws1.json $M/llama3_8b_megatron_fsdp-optim_grads_params_ws1_rank0.kernels.json" ;;
    1p5b/fsdp2) echo "$W/llama3_bench_1p5b_fsdp2-unit_timing_ws1.json $W/llama3_bench_1p5b_torch_fsdp2-reshard_after_forward_ws1_rank0.kernels.json" ;;
    1p5b/mfsdp) echo "$W/llama3_bench_1p5b_fsdp-optim_grads_params-unit_timing_ws1.json $W/llama3_bench_1p5b_megatron_fsdp-optim_grads_params_ws1_rank0.kernels.json" ;;
  esac
}

# point model gpu gpus_per_node interconnect microbatch accum "N..." [layers]
# (layers: --num_layers; default 32 for the 8b runs, as measured for the others)
project() {
  local point=$1 model=$2 gpu=$3 gn=$4 ic=$5 mb=$6 ga=$7 ns=$8 nl=${9:-}
  local layers=()
  [ "$model" = 8b ] && [ -z "$nl" ] && nl=32
  [ -n "$nl" ] && layers=(--num_layers "$nl")
  for w in fsdp2 mfsdp; do
    read -r rep kern <<< "$(report "$model" "$w")"
    local kernels=()
    [ "$gpu" != h200 ] && kernels=(--kernels "$kern")
    for n in $ns; do
      for v in base scale scale_f05; do
        effect_flags "$v"
        "$PP" "$rep" -ng "$n" -gn "$gn" -g "$gpu" --interconnect "$ic" -gb $((mb * n * ga)) \
          "${layers[@]}" "${kernels[@]}" "${fx[@]}" \
          -o "$T/projections/${point}_${w}_${v}_ng${n}.json" > /dev/null
      done
    done
  done
}

project mpt13b_h100            8b   h100 8 nvlink4,ib_ndr 1 1  "8 16 32 64"
project mpt3b_h100             1p5b h100 8 nvlink4,ib_ndr 2 3  "32 64"
project mpt1b_h100             1p5b h100 8 nvlink4,ib_ndr 2 1  "16 32 64"
project mpt760m_h100           1p5b h100 8 nvlink4,ib_ndr 2 1  "16 32"
project kempner_llama3_8b_h200 8b   h200 4 nvlink4,ib_ndr 1 2  "1 2 4"
project bridge_llama3_8b_h100  8b   h100 8 nvlink4,ib_ndr 1 16 "8"
# Past 64 GPUs: the FSDP paper (A100 80GB) and llm-foundry's A100 40GB table. One micro-batch per
# GPU, as published (the stand-in's micro-batch is 8192 tokens: see the README).
project fsdp_paper_gpt175b_b1_a100 70b_rl a100 8 nvlink3,ib_hdr 1 1 "128 192 256 384 512" 96
project fsdp_paper_gpt175b_b2_a100 70b_rl a100 8 nvlink3,ib_hdr 1 1 "192 256 384 512" 96
project fsdp_paper_t5_11b_b8_a100  8b     a100 8 nvlink3,ib_hdr 1 1 "8 16 32 64 128 256 512" 48
project fsdp_paper_t5_11b_b16_a100 8b     a100 8 nvlink3,ib_hdr 1 1 "8 16 32 64 128 256 512" 48
project mpt7b_a100_40gb            8b     a100_40gb 8 nvlink3,ib_hdr 1 1 "32 64 128" 32
project mpt13b_a100_40gb           8b     a100_40gb 8 nvlink3,ib_hdr 1 1 "64 128" 40
project mpt3b_a100_40gb            1p5b   a100_40gb 8 nvlink3,ib_hdr 2 1 "32 64 128"
project mpt1b_a100_40gb            1p5b   a100_40gb 8 nvlink3,ib_hdr 2 1 "64 128"
project mpt760m_a100_40gb          1p5b   a100_40gb 8 nvlink3,ib_hdr 2 1 "16 32 64 128"
project mpt350m_a100_40gb          1p5b   a100_40gb 8 nvlink3,ib_hdr 2 1 "16 32 64 128"
project mpt125m_a100_40gb          1p5b   a100_40gb 8 nvlink3,ib_hdr 2 1 "16 32 64 128"

# Diagnostic (not a published point): the T5-11B stand-in under FSDP2 with the network at a
# fraction F of its bandwidth, to show where a bandwidth shortfall would put the loss (table.py's
# last table). diag_t5_fsdp2_f<F>_ng<N>.json.
read -r rep kern <<< "$(report 8b fsdp2)"
for f in 1 0.25 0.15 0.1; do
  for n in 8 16 128 256 512; do
    "$PP" "$rep" -ng "$n" -gn 8 -g a100 --interconnect nvlink3,ib_hdr -gb "$n" --num_layers 48 \
      --kernels "$kern" --inter_node_efficiency "$f" -o "$T/projections/diag_t5_fsdp2_f${f}_ng${n}.json" > /dev/null
  done
done

# Drop each run's per-collective timeline and pack (pack_projections.sh).
pack_projections "$T" "$D/projections.tgz" 2026-12-06
