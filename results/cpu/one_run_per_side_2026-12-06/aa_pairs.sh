#!/usr/bin/env bash
# Ten A/A pairs of single runs, as issue 44 describes them: two identical runs of
#   perf-launch -m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true -ms 30
# one after the other, each pair compared with `perf-compare a.json b.json` (two comparisons per
# pair: the FSDP run and its DDP baseline). No calibration of this host is used
# (SHARDBENCH_NOISE_DIR is an empty folder), so perf-launch and perf-compare take the committed
# CPU default noise model.
#   results/cpu/one_run_per_side_2026-12-06/aa_pairs.sh OUT_DIR
set -euo pipefail
out="${1:?usage: aa_pairs.sh OUT_DIR}"
pl="${PERF_LAUNCH:-build/perf-launch}" pc="${PERF_COMPARE:-build/perf-compare}"
mkdir -p "$out/no_calibration"
export SHARDBENCH_NOISE_DIR="$out/no_calibration"
{ echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"; } > "$out/machine.txt"
for i in 01 02 03 04 05 06 07 08 09 10; do
  mkdir -p "$out/pair$i"
  for side in a b; do
    "$pl" -m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true -ms 30 \
      --report "$out/pair$i/$side.json" > "$out/pair$i/$side.log" 2>&1
  done
  rc=0
  "$pc" "$out/pair$i/a.json" "$out/pair$i/b.json" --json "$out/pair$i/compare.json" \
    > "$out/pair$i/compare.txt" 2>&1 || rc=$?
  echo "pair $i: perf-compare exit $rc, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
for i in range(1, 11):
    d = os.path.join(out, "pair%02d" % i)
    doc = json.load(open(os.path.join(d, "compare.json")))
    launch = json.load(open(os.path.join(d, "a.json")))
    order = launch.get("run_order", {}).get("executed")
    for p in doc["pairs"]:
        m = p["metrics"]["step_time_median_ms"]
        f = lambda x: "n/a" if x is None else "%+.1f%%" % (100 * x)
        rows.append("| %02d | %s | %s | [%s, %s] | %s | %s |" % (
            i, p["name"].split()[1], f(m["relative_change"]), f(m["ci_low"]), f(m["ci_high"]),
            p["verdict"], order))
print("| pair | run | change | interval (with run-to-run noise) | verdict | perf-launch run order of a.json |")
print("|---|---|---|---|---|---|")
print("\n".join(rows))
verdicts = [r.split("|")[5].strip() for r in rows]
print("\nverdicts: " + ", ".join("%s %d" % (v, verdicts.count(v)) for v in sorted(set(verdicts))))
PY
