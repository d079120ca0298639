#!/usr/bin/env bash
# The machine preflight under Slurm (docs/preflight.md, "Slurm and torchrun"), end to end against
# a one-node loopback cluster (cluster_fixture.sh). A 2-rank CPU run whose estimated resident
# memory no host has available is submitted through `perf-launch --executor slurm --detach false`.
# The submitting perf-launch checks the config only and submits it; inside the job the node's
# first rank (srun task 0, SLURM_LOCALID 0) refuses it before training: that task exits 2 with the
# preflight's one line naming the dry run's estimate and the node's MemAvailable, srun
# (--kill-on-bad-exit) ends the other task, no training step runs, no report is written, and
# perf-launch exits non-zero.
#
#   tests/slurm/run_slurm_preflight_test.sh PATH/TO/perf-launch
#
# SHARDBENCH_SLURM_TEST_KEEP=1 keeps the work folder (cluster logs, job folder) for inspection.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 PATH/TO/perf-launch" >&2; exit 2; }
PERF_LAUNCH="$(realpath "$1")"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_fixture.sh"
CHECK="$ROOT/tests/launch/check_preflight_refusal.py"

# The tiny CPU recipe at 64 layers of hidden size 65536 (FFN 262144): about 36 TiB of model state
# per rank. Nothing here allocates it: the refusal comes first.
RUN=(-m llama -mr llama3_tiny_cpu -g cpu -ng 2 -ms 3
     model.num_layers=64 model.hidden_size=65536 model.ffn_hidden_size=262144)
SLURM_ARGS=(--executor slurm -a shardbench-ci -t 00:05:00 -l "$WORK/jobs")

# The estimate the refusal must name, from the same binary and arguments. The dry run also shows
# that the submitting side accepts the run (it checks the config only).
"$PERF_LAUNCH" "${RUN[@]}" "${SLURM_ARGS[@]}" --dryrun > "$WORK/dryrun.out" 2>&1 \
  || { cat "$WORK/dryrun.out" >&2; fail "perf-launch --dryrun refused the run on the submitting side"; }

start_s=$SECONDS
start_cluster
# Should a perf-launch skip the refusal, its ranks would allocate the model: under this
# address-space limit (8 GiB a process; the tiny recipe trains within 4) that fails at once
# instead of waking the out-of-memory killer. sbatch passes the limit on to the job
# (slurm.conf PropagateResourceLimits, default ALL).
ulimit -v $((8 << 20))

mkdir -p "$WORK/submit"
cd "$WORK/submit"
set +e
timeout "$JOB_TIMEOUT_S" "$PERF_LAUNCH" "${RUN[@]}" "${SLURM_ARGS[@]}" --detach false \
  > "$WORK/perf-launch.out" 2>&1
rc=$?
set -e
cat "$WORK/perf-launch.out" >&2
JOB_ID="$(sed -n 's/^perf-launch: submitted Slurm job \([0-9]*\).*/\1/p' "$WORK/perf-launch.out")"
[ "$rc" -ne 124 ] || fail "the job did not finish within $JOB_TIMEOUT_S s"
[ -n "$JOB_ID" ] || fail "perf-launch submitted no job (exit $rc): the submitting side refused the run"
[ "$rc" -ne 0 ] || fail "perf-launch --executor slurm --detach false exited 0 for a run the node cannot hold"
grep -qx "perf-launch: Slurm job $JOB_ID FAILED, exit code $rc" "$WORK/perf-launch.out" \
  || fail "perf-launch exited $rc without the line 'perf-launch: Slurm job $JOB_ID FAILED, exit code $rc'"

shopt -s nullglob
job_dirs=("$WORK"/jobs/pretrain_llama3_tiny_cpu_bf16_gpus2_cpu_*)
[ ${#job_dirs[@]} -eq 1 ] || fail "expected one job folder under $WORK/jobs, found ${#job_dirs[@]}"
log="${job_dirs[0]}/log_$JOB_ID.out"
[ -f "$log" ] || fail "no log_$JOB_ID.out in ${job_dirs[0]}"
reports=("${job_dirs[0]}"/*.json)
[ ${#reports[@]} -eq 0 ] || fail "a report was written: ${reports[*]}"
python3 "$CHECK" "$WORK/dryrun.out" "$log" 2
# Slurm's line for the first task: the refusal's exit code 2 came from task 0. The job's exit code
# is srun's highest over the tasks, so 143 when srun's SIGTERM ended task 1 (128 + 15).
grep -qx "srun: error: localhost: task 0: Exited with exit code 2" "$log" \
  || fail "the job log has no 'srun: error: localhost: task 0: Exited with exit code 2' line"
say "PASS in $((SECONDS - start_s)) s: job $JOB_ID refused on its first rank, perf-launch exited $rc"
