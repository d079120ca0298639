#!/usr/bin/env bash
# Times README's two commands on a fresh clone with empty caches, then .ci/run on another fresh
# clone with the caches the first two left (as CI finds them on the developer's machine).
set -uo pipefail
SRC=$(cd "${1:-.}" && pwd)   # the repository to clone (default: the current folder)
OUT=${2:-/tmp/timing}
rm -rf "$OUT"; mkdir -p "$OUT"
export SHARDBENCH_CACHE="$OUT/cache"        # no venv, no ccache
export PIP_NO_CACHE_DIR=1
export CCACHE_DIR="$OUT/cache/ccache"
unset CCACHE_BASEDIR
# A fresh machine has none of the packages scripts/setup and scripts/test install, nor their .debs.
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq ccache libgloo-dev libcli11-dev nlohmann-json3-dev \
  libgtest-dev libgmock-dev libbenchmark-dev slurm-wlm munge chromium > "$OUT/purge.log" 2>&1
DEBIAN_FRONTEND=noninteractive apt-get autoremove -y -qq >> "$OUT/purge.log" 2>&1
apt-get clean
git clone -q "$SRC" "$OUT/clone1"
cd "$OUT/clone1"
echo "revision $(git rev-parse --short HEAD)" | tee "$OUT/times.txt"
s=$(date +%s.%N)
( scripts/setup && build/perf-launch -m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true ) > "$OUT/first.log" 2>&1
rc1=$?; e=$(date +%s.%N)
echo "first command: rc=$rc1 wall=$(echo "$e - $s" | bc) s" | tee -a "$OUT/times.txt"
s=$(date +%s.%N)
scripts/test > "$OUT/second.log" 2>&1
rc2=$?; e=$(date +%s.%N)
echo "second command: rc=$rc2 wall=$(echo "$e - $s" | bc) s" | tee -a "$OUT/times.txt"
grep -E 'tests passed|tests failed' "$OUT/second.log" | tail -1 | tee -a "$OUT/times.txt"
git clone -q "$SRC" "$OUT/clone2"
cd "$OUT/clone2"
s=$(date +%s.%N)
CI=true bash .ci/run > "$OUT/ci.log" 2>&1
rc3=$?; e=$(date +%s.%N)
echo "ci: rc=$rc3 wall=$(echo "$e - $s" | bc) s" | tee -a "$OUT/times.txt"
grep -E 'tests passed|tests failed' "$OUT/ci.log" | tail -1 | tee -a "$OUT/times.txt"
