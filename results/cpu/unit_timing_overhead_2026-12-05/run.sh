#!/usr/bin/env bash
# Overhead of shardbench.unit_timing on CPU: 1-rank llama3_tiny_cpu, Megatron FSDP
# optim_grads_params and its DDP+distopt baseline, 30 steps, unit timing off and on alternately,
# 10 pairs. From the repository root: results/cpu/unit_timing_overhead_2026-12-05/run.sh
set -euo pipefail
OUT=results/cpu/unit_timing_overhead_2026-12-05
for i in $(seq 1 10); do
  for t in false true; do
    build/perf-launch -m llama -mr llama3_tiny_cpu -ng 1 -g cpu -ms 30 --use_megatron_fsdp true \
      shardbench.unit_timing=$t shardbench.report_path="$OUT/run${i}_timing_$t.json" > /dev/null 2>&1
  done
done
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
out = sys.argv[1]
med, low = {}, {}
for i in range(1, 11):
    for t in ("false", "true"):
        for run in json.load(open(f"{out}/run{i}_timing_{t}.json"))["runs"]:
            steps = [s["elapsed_ms"] for s in run["steps"][1:]]
            med.setdefault((run["label"], t), []).append(statistics.median(steps))
            low.setdefault((run["label"], t), []).append(min(steps))
print("run | unit_timing | median step ms per repetition | mean of medians")
for (label, t), v in sorted(med.items()):
    print(f"{label} | {t} | {' '.join(f'{x:.2f}' for x in v)} | {statistics.mean(v):.2f}")
for label in sorted({k[0] for k in med}):
    off, on = med[(label, "false")], med[(label, "true")]
    pairs = [b / a - 1 for a, b in zip(off, on)]
    spread = (max(off) - min(off)) / statistics.mean(off)
    print(f"{label}: on/off - 1 per pair {' '.join(f'{p:+.1%}' for p in pairs)}; "
          f"mean {statistics.mean(pairs):+.1%}; spread of the off medians {spread:.1%}")
    # The fastest step of each run: the least disturbed by other load on the machine.
    off_min, on_min = low[(label, "false")], low[(label, "true")]
    print(f"{label}: fastest step, median over runs: off {statistics.median(off_min):.2f} ms, "
          f"on {statistics.median(on_min):.2f} ms "
          f"({statistics.median(on_min) / statistics.median(off_min) - 1:+.1%})")
PY
