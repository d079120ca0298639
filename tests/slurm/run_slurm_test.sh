#!/usr/bin/env bash
# End to end against a real Slurm: start a one-node loopback cluster (scripts/slurm_cluster),
# submit a 2-rank CPU run through `perf-launch --executor slurm`, wait for the job, check its
# report, and stop the daemons whatever happened (cluster_fixture.sh).
#
#   tests/slurm/run_slurm_test.sh PATH/TO/perf-launch
#
# Needs the Debian packages slurm-wlm and munge (scripts/setup installs them) and python3.
# SHARDBENCH_SLURM_TEST_KEEP=1 keeps the work folder (cluster logs, job folder) for inspection.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 PATH/TO/perf-launch" >&2; exit 2; }
PERF_LAUNCH="$(realpath "$1")"
source "$(dirname "${BASH_SOURCE[0]}")/cluster_fixture.sh"

start_s=$SECONDS
start_cluster

# Submitted from a folder of its own: the job's working directory is the submit directory.
mkdir -p "$WORK/submit"
cd "$WORK/submit"
set +e
timeout "$JOB_TIMEOUT_S" "$PERF_LAUNCH" -m llama -mr llama3_tiny_cpu -ng 2 -g cpu \
  --executor slurm -a shardbench-ci -t 00:05:00 --detach false -l "$WORK/jobs" \
  -E SHARDBENCH_TEST_MARKER=slurm-e2e 2>&1 | tee "$WORK/perf-launch.out"
rc=${PIPESTATUS[0]}
set -e
JOB_ID="$(sed -n 's/^perf-launch: submitted Slurm job \([0-9]*\).*/\1/p' "$WORK/perf-launch.out")"
[ "$rc" -ne 124 ] || fail "the job did not finish within $JOB_TIMEOUT_S s"
[ "$rc" -eq 0 ] || fail "perf-launch --executor slurm --detach false exited $rc"
[ -n "$JOB_ID" ] || fail "perf-launch printed no job id"

shopt -s nullglob
job_dirs=("$WORK"/jobs/pretrain_llama3_tiny_cpu_bf16_gpus2_cpu_*)
[ ${#job_dirs[@]} -eq 1 ] || fail "expected one job folder under $WORK/jobs, found ${#job_dirs[@]}"
job_dir="${job_dirs[0]}"
[ -f "$job_dir/sbatch.sh" ] || fail "no sbatch.sh in $job_dir"
[ -f "$job_dir/log_$JOB_ID.out" ] || fail "no log_$JOB_ID.out in $job_dir"
reports=("$job_dir"/*.json)
[ ${#reports[@]} -eq 1 ] || fail "expected one report in $job_dir, found ${#reports[@]}"

python3 - "${reports[0]}" "$JOB_ID" <<'PY'
import json, math, sys

path, job_id = sys.argv[1], sys.argv[2]
report = json.load(open(path))
errors = []
def check(ok, what):
    if not ok:
        errors.append(what)

env = report["environment"]
variables = env["environment_variables"]
check(env["world_size"] == 2, f"environment.world_size is {env['world_size']}, expected 2")
check(variables.get("SLURM_JOB_ID") == job_id,
      f"SLURM_JOB_ID is {variables.get('SLURM_JOB_ID')!r}, expected {job_id!r}")
check(variables.get("SHARDBENCH_SLURM_NODELIST") == "localhost",
      f"SHARDBENCH_SLURM_NODELIST is {variables.get('SHARDBENCH_SLURM_NODELIST')!r}")
check(variables.get("SHARDBENCH_SLURM_NODE_GPUS") == "localhost=cpu",
      f"SHARDBENCH_SLURM_NODE_GPUS is {variables.get('SHARDBENCH_SLURM_NODE_GPUS')!r}")
check(variables.get("SHARDBENCH_TEST_MARKER") == "slurm-e2e", "the -E value did not reach rank 0")
check("SHARDBENCH_LAUNCHER" not in variables, "ranks were started by perf-launch, not by srun")
check(variables.get("MASTER_ADDR") == "localhost",
      f"MASTER_ADDR is {variables.get('MASTER_ADDR')!r}, expected the first node")

run = report["runs"][0]
check(run["status"] == "ok", f"runs[0].status is {run['status']!r}")
check(run["identity"]["world_size"] == 2, "runs[0].identity.world_size is not 2")
per_rank = run["per_rank_step_ms"]
check(len(per_rank) == 2, f"per_rank_step_ms has {len(per_rank)} ranks, expected 2")
steps = run["identity"]["train_iters"]
for rank, times in enumerate(per_rank):
    check(len(times) == steps and all(t > 0 for t in times),
          f"rank {rank} step times {times} (expected {steps} positive values)")
losses = [s["loss"] for s in run["steps"]]
check(len(losses) == steps and all(math.isfinite(l) for l in losses), f"losses {losses}")

if errors:
    print("[slurm_test] FAIL: report " + path, file=sys.stderr)
    for e in errors:
        print("  " + e, file=sys.stderr)
    sys.exit(1)
print(f"[slurm_test] report OK: world size 2, {steps} steps on both ranks, "
      f"final loss {losses[-1]:.4f}, job {job_id}", file=sys.stderr)
PY
say "PASS in $((SECONDS - start_s)) s"
