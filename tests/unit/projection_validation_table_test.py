#!/usr/bin/env python3
"""The arithmetic of results/h200/projection_validation_2026-12-06/table.py on a hand-made point
(implementation difference, scaling ratios and their error, absolute errors), and the committed
validation.json against what table.py computes from the committed published.json and
projections.tgz. Python 3 standard library; under a second."""
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "results/h200/projection_validation_2026-12-06"
spec = importlib.util.spec_from_file_location("validation_table", FOLDER / "table.py")
table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(table)

failures = []


def check(name, got, want, tol=1e-12):
    if (want is None) != (got is None) or (want is not None and abs(got - want) > tol):
        failures.append(f"{name}: got {got}, want {want}")


# Published 100 tokens/s/GPU at 8 GPUs and 90 at 64; projected 120 and 114 for every run.
point = {"id": "hand", "gpu": "h100", "measurements": [
    {"num_gpus": 64, "tokens_per_s_per_gpu": 90.0, "mfu_percent": 40.0},
    {"num_gpus": 8, "tokens_per_s_per_gpu": 100.0, "mfu_percent": 50.0}]}
runs = {8: {"tokens_per_s_per_rank": 120.0, "tflops_per_s_per_rank": 544.5},
        64: {"tokens_per_s_per_rank": 114.0, "tflops_per_s_per_rank": 500.0}}
rows = table.point_rows(point, lambda w, v, n: runs[n])
check("rows", len(rows), len(table.WRAPPERS) * len(table.VARIANTS))
r = rows[0]
check("order of GPU counts", r["num_gpus"][0], 8)
check("implementation difference", r["implementation_difference"], 0.2)
check("published ratio", r["published_ratio"], 0.9)
check("projected ratio", r["projected_ratio"], 0.95)
check("scaling-ratio error", r["scaling_ratio_error"], 0.95 / 0.9 - 1)
check("absolute error at 64", r["absolute_error"][1], 114 / 90 - 1)
check("decomposition", (1 + r["implementation_difference"]) * (1 + r["scaling_ratio_error"]) - 1,
      r["absolute_error"][1])
check("published TFLOP/s from MFU", r["published_model_tflops_per_gpu_smallest"], 494.5)
check("TFLOP/s difference", r["tflops_difference_smallest"], 544.5 / 494.5 - 1)
check("primary is FSDP2", 1.0 if r["primary"] else 0.0, 1.0)

# One GPU count: an absolute check, no ratio.
single = {"id": "one", "gpu": "h100", "measurements": [
    {"num_gpus": 8, "tokens_per_s_per_gpu": 100.0, "model_tflops_per_s_per_gpu": 500.0}]}
r1 = table.point_rows(single, lambda w, v, n: runs[n])[0]
check("no ratio", r1["scaling_ratio_error"], None)
check("published TFLOP/s given", r1["published_model_tflops_per_gpu_smallest"], 500.0)
check("worst skips points without a ratio", table.worst([r1]), None)
w = table.worst(rows + [dict(rows[1], scaling_ratio_error=-0.5)])
check("worst by magnitude", w["scaling_ratio_error"], -0.5)

# The committed rows are what table.py computes from the committed inputs.
committed = json.loads((FOLDER / "validation.json").read_text())
computed = json.loads(json.dumps(table.load()))
if committed != computed:
    failures.append("validation.json differs from table.py's rows: rerun table.py --json")

for f in failures:
    print("FAIL", f)
print(f"projection_validation_table: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
