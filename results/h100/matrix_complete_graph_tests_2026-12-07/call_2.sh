#!/usr/bin/env bash
# Call 2: the whole-step graph cases without the optimizer graph, not rerun since the count
# check (2 ranks: all but no_shard; 4 ranks: no_shard and plain DDP here, the other four were not run).
export PATH=/opt/torch/.venv/bin:$PATH; mkdir -p $OUT/g
timeout ${LIMIT:-570} ctest --test-dir build-gpu -L gpu -j 3 --timeout 500 --output-on-failure -R "${CASES:-SharedGpuGraphs.*ws2_optim( |$)|SharedGpuGraphs.*ws2_optim_grads( |$)|SharedGpuGraphs.*ws2_optim_grads_params( |$)|SharedGpuGraphs.*ws2_bf16_double_buffer( |$)|SharedGpuGraphs.*ws2_plain_ddp_fp32( |$)|SharedGpuGraphs.*ws4_no_shard( |$)|SharedGpuGraphs.*ws4_plain_ddp_fp32( |$)}" > $OUT/g/${LOG:-graphs_nonopt_a}.log 2>&1
echo rc=$?; grep -E "Test +#|tests passed|Total Test" $OUT/g/${LOG:-graphs_nonopt_a}.log
