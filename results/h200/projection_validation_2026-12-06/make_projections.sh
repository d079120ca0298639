#!/usr/bin/env bash
# Regenerates projections.tgz (the folder projections/, packed): the committed one-GPU H200 reports
# projected with perf-project to every GPU count of the published points in published.json, each
# under three sets of scale-effect flags (docs/projection.md, "Effects at scale"):
#   base      none (the simulator alone, the table's interconnect at full bandwidth)
#   scale     --nccl_algo auto --jitter normal
#   scale_f05 --nccl_algo auto --jitter normal --inter_node_efficiency 0.5
# Point -> report: the MPT-13B points and the Llama 3 8B points take the 4-layer Llama 3 8B runs
# (projection_models_2026-12-05) at 32 layers; the MPT-3B, 1B and 760M points take the 1.5B bench
# model (projection_ws1_marks_2026-12-05) as measured. H100 targets scale the H200 compute by
# kernel class (--kernels, the datasheets' ratios). The global batch keeps the published number of
# micro-batches per GPU (-gb = the report's micro-batch x GPUs x accumulation steps).
# Run from the repository root after building: results/h200/projection_validation_2026-12-06/make_projections.sh
set -euo pipefail
D=results/h200/projection_validation_2026-12-06
M=results/h200/projection_models_2026-12-05
W=results/h200/projection_ws1_marks_2026-12-05
PP=${PERF_PROJECT:-build/perf-project}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir "$T/projections"

# report and kernel summary of wrapper $2 for model $1 (8b or 1p5b)
report() {
  case $1/$2 in
    8b/fsdp2) echo "$M/llama3_8b_8b-4l-fsdp2_ws1.json $M/llama3_8b_torch_fsdp2-reshard_after_forward_ws1_rank0.kernels.json" ;;
    8b/mfsdp) echo "$M/llama3_8b_8b-4l-fsdp-optim_grads_params_ws1.json $M/llama3_8b_megatron_fsdp-optim_grads_params_ws1_rank0.kernels.json" ;;
    1p5b/fsdp2) echo "$W/llama3_bench_1p5b_fsdp2-unit_timing_ws1.json $W/llama3_bench_1p5b_torch_fsdp2-reshard_after_forward_ws1_rank0.kernels.json" ;;
    1p5b/mfsdp) echo "$W/llama3_bench_1p5b_fsdp-optim_grads_params-unit_timing_ws1.json $W/llama3_bench_1p5b_megatron_fsdp-optim_grads_params_ws1_rank0.kernels.json" ;;
  esac
}

# point model gpu gpus_per_node interconnect microbatch accum "N..."
project() {
  local point=$1 model=$2 gpu=$3 gn=$4 ic=$5 mb=$6 ga=$7 ns=$8
  local layers=()
  [ "$model" = 8b ] && layers=(--num_layers 32)
  for w in fsdp2 mfsdp; do
    read -r rep kern <<< "$(report "$model" "$w")"
    local kernels=()
    [ "$gpu" = h100 ] && kernels=(--kernels "$kern")
    for n in $ns; do
      for v in base scale scale_f05; do
        case $v in
          base) fx=() ;;
          scale) fx=(--nccl_algo auto --jitter normal) ;;
          scale_f05) fx=(--nccl_algo auto --jitter normal --inter_node_efficiency 0.5) ;;
        esac
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

tar --sort=name --mtime=2026-12-06 --owner=0 --group=0 --numeric-owner -C "$T" -cf - projections |
  gzip -n > "$D/projections.tgz.tmp"
mv "$D/projections.tgz.tmp" "$D/projections.tgz"
