#!/usr/bin/env bash
# The H200 runs of results/h200/projection_ws1_marks_2026-12-05 projected to the H100 with each
# kernel class scaled by its ratio in another wrapper's run profiled on both GPUs
# (perf-project --calibrate), then compared with the H100 runs of this folder. Held out: each
# wrapper is calibrated with a run of another wrapper, never with its own.
# Run from the repository root after building:
#   results/h100/projection_gpu_types_2026-12-05/project.sh
set -euo pipefail
W=results/h100/projection_gpu_types_2026-12-05
P=results/h200/projection_ws1_marks_2026-12-05
kernels() {  # the kernel summary of a run name in folder $1
  case $2 in
    ddp) echo "$1/llama3_bench_1p5b_ddp_ws1_rank0.kernels.json" ;;
    fsdp-optim_grads_params) echo "$1/llama3_bench_1p5b_megatron_fsdp-optim_grads_params_ws1_rank0.kernels.json" ;;
    fsdp2) echo "$1/llama3_bench_1p5b_torch_fsdp2-reshard_after_forward_ws1_rank0.kernels.json" ;;
  esac
}
# predict RUN REF NAME: RUN's H200 report to the H100, calibrated by REF's summaries on both
# GPUs, written as prediction_RUN-..._calibrated_by_NAME.json and compared with RUN's H100 report.
predict() {
  local out=$W/prediction_$1-unit_timing_h100_ng1_calibrated_by_$3.json
  build/perf-project $P/llama3_bench_1p5b_$1-unit_timing_ws1.json -ng 1 -g h100 \
    --interconnect nvlink4 --kernels "$(kernels $P $1)" \
    --calibrate "$(kernels $P $2)" "$(kernels $W $2)" -o $out > /dev/null
  build/perf-compare $W/llama3_bench_1p5b_$1-unit_timing_ws1.json $out
  echo
}
for pair in ddp:fsdp-optim_grads_params fsdp-optim_grads_params:ddp fsdp2:ddp; do
  predict ${pair%%:*} ${pair##*:} ${pair##*:}
done > $W/comparison_calibrated.txt
# Each wrapper calibrated with its own pair: not a check (the answer is in the input); its
# compute_scaling.class_ratios are the README's class-by-class table, and its error is what
# per-class scaling leaves even with the right ratios.
for run in ddp fsdp-optim_grads_params fsdp2; do
  predict $run $run itself
done > $W/comparison_self_calibrated.txt
# Each H100 run projected back to the H200 by its own kernel summary: not a prediction to check,
# but the file whose compute_scaling.us_per_step holds the H100 run's time per kernel class (the
# README's "Kernel time against phase time").
for run in ddp fsdp-optim_grads_params fsdp2; do
  build/perf-project $W/llama3_bench_1p5b_${run}-unit_timing_ws1.json -ng 1 -g h200 \
    --interconnect nvlink4 --kernels "$(kernels $W $run)" \
    -o $W/classes_${run}-unit_timing_h100.json > /dev/null
done
