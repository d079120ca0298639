#!/usr/bin/env bash
# Fresh machine. On an H200: the CUDA-graph runs (eager, step+optimizer graphed, per layer; DDP and
# Megatron FSDP; bench recipe and 32x1024) first, then as many of the four 4-rank whole-step graph
# cases as the time left allows. On an H100: the four test cases only.
set -u
export PATH=/opt/torch/.venv/bin:$PATH; mkdir -p $OUT/g
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
GPU=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
TORCH_PREFIX=$(python3 -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DTORCH_CUDA_ARCH_LIST=9.0 \
  -DSHARDBENCH_DEPS_DIR=$PWD/.deps > $OUT/configure.log 2>&1
T=(shardbench_gpu_tests); [ $GPU = h200 ] && [ -z "${TESTS_ONLY:-}" ] && T+=(perf-launch)
timeout 220 cmake --build build-gpu -j16 --target "${T[@]}" > $OUT/build.log 2>&1
el "build rc=$?"; tail -1 $OUT/build.log
CASES=${CASES:-'SharedGpuGraphs.*ws4_optim( |$)|SharedGpuGraphs.*ws4_optim_grads( |$)|SharedGpuGraphs.*ws4_optim_grads_params( |$)|SharedGpuGraphs.*ws4_bf16_double_buffer( |$)'}
J=${J:-4}
if [ $GPU = h200 ] && [ -z "${TESTS_ONLY:-}" ]; then
  G=$OUT/graphs
  timeout 200 env STEPS=30 SKIP_BUILD=1 BUILD_DIR=build-gpu RUNS_FILE=scripts/gpu_runs/cuda_graphs.runs \
    ONLY="ddp-eager ddp-optgraph ddp-layers fsdp-optim_grads_params-eager fsdp-optim_grads_params-optgraph fsdp-optim_grads_params-layers ddp-32x1024-eager ddp-32x1024-optgraph ddp-32x1024-layers fsdp-optim_grads_params-32x1024-eager fsdp-optim_grads_params-32x1024-optgraph fsdp-optim_grads_params-32x1024-layers" \
    RESULTS=$G GPU=h200 scripts/gpu_bench > $OUT/graphs_bench.log 2>&1
  el "gpu_bench rc=$?"; grep -c "report written" $OUT/graphs_bench.log
  timeout 60 python3 scripts/graph_gap $G --json $OUT/graph_gap.json > $OUT/graph_gap.md 2> $OUT/graph_gap.err
  el "graph_gap rc=$?"; head -30 $OUT/graph_gap.md
  find $G -name '*.trace.json' -delete; find $G -name '*.pickle' -delete
  (cd $OUT && tar czf graphs.tgz graphs graphs_bench.log graph_gap.md graph_gap.json graph_gap.err gpu.txt && rm -rf graphs)
  el "graphs packed"
  CASES='SharedGpuGraphs.*ws4_optim( |$)|SharedGpuGraphs.*ws4_bf16_double_buffer( |$)|SharedGpuGraphs.*ws4_optim_grads( |$)|SharedGpuGraphs.*ws4_optim_grads_params( |$)'
  J=2
fi
LEFT=$(( ${WALL:-580} - ($(date +%s) - T0) ))
timeout $LEFT ctest --test-dir build-gpu -L gpu -j $J --timeout 500 --output-on-failure -R "$CASES" > $OUT/g/graphs_nonopt_b.log 2>&1
el "ctest rc=$?"; grep -E "Test +#|tests passed|Total Test" $OUT/g/graphs_nonopt_b.log
