#!/usr/bin/env bash
# Call 1: build; the CUDA-graph runs (issue 39's H200 reports) with graph_gap; then one compat
# matrix cell alone at world size 1 and at 2 ranks, timestamped, with NCCL's init timings.
set -u
export PATH=/opt/torch/.venv/bin:$PATH
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
TORCH_PREFIX=$(python3 -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DTORCH_CUDA_ARCH_LIST=9.0 \
  -DSHARDBENCH_DEPS_DIR=$PWD/.deps > $OUT/configure.log 2>&1
timeout 260 cmake --build build-gpu -j16 --target perf-launch shardbench_gpu_tests > $OUT/build.log 2>&1
el "build rc=$?"; tail -2 $OUT/build.log
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $OUT/gpu.txt
GPU=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
G=$OUT/graphs
timeout ${BENCH_LIMIT:-330} env STEPS=30 SKIP_BUILD=1 BUILD_DIR=build-gpu RUNS_FILE=scripts/gpu_runs/cuda_graphs.runs \
  RESULTS=$G GPU=$GPU scripts/gpu_bench > $OUT/graphs_bench.log 2>&1
el "gpu_bench rc=$?"; grep -c "report written" $OUT/graphs_bench.log
timeout 60 python3 scripts/graph_gap $G --json $OUT/graph_gap.json > $OUT/graph_gap.md 2> $OUT/graph_gap.err
el "graph_gap rc=$?"; cat $OUT/graph_gap.md | head -40
find $G -name '*.trace.json' -delete; find $G -name '*.pickle' -delete
(cd $OUT && tar czf graphs.tgz graphs graphs_bench.log graph_gap.md graph_gap.json graph_gap.err gpu.txt)
el "graphs packed"
stamp() { python3 -u -c "
import sys,time
t0=time.time()
for l in sys.stdin: sys.stdout.write('%7.2f %s'%(time.time()-t0,l))"; }
BASE="-m llama -mr llama3_bench_1p5b model.num_layers=2 model.hidden_size=256 model.ffn_hidden_size=704 model.num_attention_heads=4 model.num_query_groups=2 model.kv_channels=64 model.vocab_size=8192 -g $GPU -sl 128 -gb 8 -mb 1 shardbench.hang_timeout_s=120"
P=$OUT/probe; mkdir -p $P
s=$(date +%s.%N); (echo start; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV timeout 60 stdbuf -oL -eL build-gpu/perf-launch $BASE -ng 1 -ms 3 --use_megatron_fsdp true ddp.data_parallel_sharding_strategy=optim_grads_params shardbench.report_path=$P/ws1.json 2>&1; echo "rc=$?") | stamp > $P/ws1.log
el "probe ws1 $(python3 -c "import time;print(round(time.time()-$s,1))") s"
s=$(date +%s.%N); (echo start; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV timeout 90 stdbuf -oL -eL build-gpu/perf-launch $BASE shardbench.ranks_per_gpu=2 -ng 2 -ms 3 --use_megatron_fsdp true ddp.data_parallel_sharding_strategy=optim_grads_params shardbench.report_path=$P/ws2.json 2>&1; echo "rc=$?") | stamp > $P/ws2.log
el "probe ws2 $(python3 -c "import time;print(round(time.time()-$s,1))") s"
grep -i "Init timings\|init COMPLETE" $P/ws2.log | head -20
(cd $OUT && tar czf probe.tgz probe)
el done
