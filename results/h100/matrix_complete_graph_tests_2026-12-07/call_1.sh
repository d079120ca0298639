#!/usr/bin/env bash
# The committed JSONs resume only at their code fingerprint (compat_matrix --resume).
# Call 1: build, then finish both matrix grids from the committed JSONs.
set -u
export PATH=/opt/torch/.venv/bin:$PATH
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
TORCH_PREFIX=$(python3 -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DTORCH_CUDA_ARCH_LIST=9.0 \
  -DSHARDBENCH_DEPS_DIR=$PWD/.deps > $OUT/configure.log 2>&1
timeout 200 cmake --build build-gpu -j16 --target perf-launch shardbench_gpu_tests > $OUT/build.log 2>&1
el "build rc=$?"; tail -2 $OUT/build.log
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
GPU=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
R=()
# The committed JSONs are an H100's: resume them only on an H100 (compat_matrix refuses another device).
[ $GPU = h100 ] && R=(RESUME=results/h100/graphs_tests_matrix_2026-12-07/matrix)
timeout ${MATRIX_LIMIT:-440} env SKIP_BUILD=1 GPU=$GPU GRIDS="1 shared" "${R[@]}" TIME_BUDGET_1=${TB1:-60} JOBS_SHARED=2 \
  TIME_BUDGET_SHARED=${TBS:-330} RESULTS=$OUT/matrix scripts/gpu_compat_matrix > $OUT/matrix.log 2>&1
el "matrix rc=$?"; grep "gpu_compat_matrix\] .*json:" $OUT/matrix.log
(cd $OUT && tar czf matrix.tgz matrix matrix.log gpu.txt && rm -rf matrix)
el done
