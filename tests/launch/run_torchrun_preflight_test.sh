#!/usr/bin/env bash
# The machine preflight under torchrun (docs/preflight.md, "Slurm and torchrun"), end to end: a
# 2-rank CPU run whose estimated resident memory no host has available, started by torch's own
# torchrun (python -m torch.distributed.run --no-python) on this machine. The node's first rank
# (LOCAL_RANK 0) refuses it before training: it exits 2 with the preflight's one line naming the
# dry run's estimate and MemAvailable, torchrun's agent ends the other rank and exits non-zero,
# no training step runs and no report folder is created.
#
#   tests/launch/run_torchrun_preflight_test.sh PATH/TO/perf-launch PATH/TO/python-with-torch
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 PATH/TO/perf-launch PATH/TO/python-with-torch" >&2; exit 2; }
PERF_LAUNCH="$(realpath "$1")"
PYTHON="$2"
CHECK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/check_preflight_refusal.py"
TIMEOUT_S=90

say() { printf '[torchrun_test] %s\n' "$*" >&2; }
fail() { printf '[torchrun_test] FAIL: %s\n' "$*" >&2; exit 1; }

[ -x "$PERF_LAUNCH" ] || fail "perf-launch not found at $PERF_LAUNCH"
"$PYTHON" -c 'import torch.distributed.run' 2>/dev/null \
  || fail "$PYTHON cannot import torch.distributed.run (torchrun); pass the Python of scripts/setup's venv"

WORK="$(mktemp -d /tmp/shardbench-torchrun-test.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# The tiny CPU recipe at 64 layers of hidden size 65536 (FFN 262144): about 36 TiB of model state
# per rank. Nothing here allocates it: the refusal comes first.
RUN=(-m llama -mr llama3_tiny_cpu -g cpu -ng 2 -ms 3
     model.num_layers=64 model.hidden_size=65536 model.ffn_hidden_size=262144
     "shardbench.report_dir=$WORK/reports")

# The estimate the refusal must name, from the same binary and arguments.
"$PERF_LAUNCH" "${RUN[@]}" --dryrun > "$WORK/dryrun.out" 2>&1 \
  || { cat "$WORK/dryrun.out" >&2; fail "perf-launch --dryrun refused the run"; }

# Should a perf-launch skip the refusal, its ranks would allocate the model: under this
# address-space limit (8 GiB a process; the tiny recipe trains within 4) that fails at once
# instead of waking the out-of-memory killer.
ulimit -v $((8 << 20))
set +e
timeout "$TIMEOUT_S" "$PYTHON" -m torch.distributed.run --standalone --nnodes 1 \
  --nproc-per-node 2 --no-python "$PERF_LAUNCH" "${RUN[@]}" > "$WORK/torchrun.out" 2>&1
rc=$?
set -e
cat "$WORK/torchrun.out" >&2
[ "$rc" -ne 124 ] || fail "torchrun did not finish within $TIMEOUT_S s"
[ "$rc" -ne 0 ] || fail "torchrun exited 0 for a run the node cannot hold"
python3 "$CHECK" "$WORK/dryrun.out" "$WORK/torchrun.out" 2
# torch's elastic agent names the first rank that failed and its exit code (torch:
# torch/distributed/elastic/multiprocessing/api.py): the refusal's 2, from local rank 0.
grep -q "failed (exitcode: 2) local_rank: 0 (pid: " "$WORK/torchrun.out" \
  || fail "torchrun's output does not name local rank 0 failing with exit code 2"
[ ! -e "$WORK/reports" ] || fail "the report folder $WORK/reports was created"
say "PASS: the first rank refused the run, torchrun exited $rc"
