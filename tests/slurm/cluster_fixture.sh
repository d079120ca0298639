# shellcheck shell=bash disable=SC2034  # sourced: its variables are the tests'
# Sourced by the tests in this folder (bash, set -euo pipefail): a work folder with a one-node
# loopback Slurm cluster in it (scripts/slurm_cluster), stopped whatever happens.
#
#   PERF_LAUNCH=... ; source tests/slurm/cluster_fixture.sh ; start_cluster
#
# Defines ROOT, WORK, JOB_TIMEOUT_S, say, fail and start_cluster. On exit it cancels the job in
# JOB_ID if the test failed, stops the daemons, prints the cluster logs after a failure and
# removes WORK (SHARDBENCH_SLURM_TEST_KEEP=1 keeps it: cluster logs, job folder).
# Needs the Debian packages slurm-wlm and munge (scripts/setup installs them) and python3.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="$ROOT/scripts/slurm_cluster"
JOB_TIMEOUT_S="${SHARDBENCH_SLURM_TEST_JOB_TIMEOUT_S:-90}"

say() { printf '[slurm_test] %s\n' "$*" >&2; }
fail() { printf '[slurm_test] FAIL: %s\n' "$*" >&2; exit 1; }

[ -x "$PERF_LAUNCH" ] || fail "perf-launch not found at $PERF_LAUNCH"
for tool in munged slurmctld slurmd sbatch python3; do
  command -v "$tool" >/dev/null || fail "$tool not found; install the Debian packages slurm-wlm munge (scripts/setup)"
done

WORK="$(mktemp -d /tmp/shardbench-slurm-test.XXXXXX)"
chmod 755 "$WORK"  # the job runs as this user, but munge checks every folder above its socket
cleanup() {
  local rc=$?
  if [ -n "${JOB_ID:-}" ] && [ "$rc" -ne 0 ]; then scancel "$JOB_ID" 2>/dev/null || true; fi
  "$CLUSTER" stop "$WORK/cluster" || true
  if [ "$rc" -ne 0 ]; then
    for f in "$WORK"/cluster/log/*.log; do
      [ -f "$f" ] && { say "---- $f"; tail -n 30 "$f" >&2; }
    done
  fi
  if [ "${SHARDBENCH_SLURM_TEST_KEEP:-0}" = 1 ]; then say "kept $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts the cluster and exports SLURM_CONF for the clients.
start_cluster() {
  local start_s=$SECONDS
  eval "$("$CLUSTER" start "$WORK/cluster")"
  say "cluster up after $((SECONDS - start_s)) s"
}
