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
: > $W/comparison_calibrated.txt
for pair in ddp:fsdp-optim_grads_params fsdp-optim_grads_params:ddp fsdp2:ddp; do
  run=${pair%%:*}; ref=${pair##*:}
  out=$W/prediction_${run}-unit_timing_h100_ng1_calibrated_by_${ref}.json
  build/perf-project $P/llama3_bench_1p5b_${run}-unit_timing_ws1.json -ng 1 -g h100 \
    --interconnect nvlink4 --kernels "$(kernels $P $run)" \
    --calibrate "$(kernels $P $ref)" "$(kernels $W $ref)" -o $out > /dev/null
  build/perf-compare $W/llama3_bench_1p5b_${run}-unit_timing_ws1.json $out >> $W/comparison_calibrated.txt
  echo >> $W/comparison_calibrated.txt
done
# Each wrapper calibrated with its own pair: not a check (the answer is in the input); its
# compute_scaling.class_ratios are the README's class-by-class table, and its error is what
# per-class scaling leaves even with the right ratios.
: > $W/comparison_self_calibrated.txt
for run in ddp fsdp-optim_grads_params fsdp2; do
  out=$W/prediction_${run}-unit_timing_h100_ng1_calibrated_by_itself.json
  build/perf-project $P/llama3_bench_1p5b_${run}-unit_timing_ws1.json -ng 1 -g h100 \
    --interconnect nvlink4 --kernels "$(kernels $P $run)" \
    --calibrate "$(kernels $P $run)" "$(kernels $W $run)" -o $out > /dev/null
  build/perf-compare $W/llama3_bench_1p5b_${run}-unit_timing_ws1.json $out >> $W/comparison_self_calibrated.txt
  echo >> $W/comparison_self_calibrated.txt
done
# Each H100 run projected back to the H200 by its own kernel summary: not a prediction to check,
# but the file whose compute_scaling.us_per_step holds the H100 run's time per kernel class (the
# README's "Kernel time against phase time").
for run in ddp fsdp-optim_grads_params fsdp2; do
  build/perf-project $W/llama3_bench_1p5b_${run}-unit_timing_ws1.json -ng 1 -g h200 \
    --interconnect nvlink4 --kernels "$(kernels $W $run)" \
    -o $W/classes_${run}-unit_timing_h100.json > /dev/null
done
