#!/usr/bin/env python3
"""The arithmetic of results/h200/projection_validation_2026-12-06/table.py on a hand-made point
(implementation difference, scaling ratios and their error, absolute errors), and the committed
validation.json of that folder and of results/h100/projection_validation_2026-12-07 against what
each folder's table.py computes from its committed inputs. Python 3 standard library; under a second."""
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
check("published figures in GPU order", rows[0]["published_per_gpu"][1], 90.0)
r = rows[0]
check("metric defaults to tokens/s", 1.0 if r["metric"] == "tokens_per_s_per_gpu" else 0.0, 1.0)
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

# A point the source gives in model TFLOP/s per GPU only (the FSDP paper, read off its plot): the
# projected runs' tflops_per_s_per_rank stand beside it, and the ratios are of TFLOP/s.
tf_point = {"id": "tf", "gpu": "a100", "metric": "tflops_per_s_per_gpu", "measurements": [
    {"num_gpus": 512, "tflops_per_s_per_gpu": 141.0, "read_from_plot": True},
    {"num_gpus": 8, "tflops_per_s_per_gpu": 150.0, "read_from_plot": True}]}
tf_runs = {8: {"tokens_per_s_per_rank": 1.0, "tflops_per_s_per_rank": 180.0},
           512: {"tokens_per_s_per_rank": 2.0, "tflops_per_s_per_rank": 181.8}}
rt = table.point_rows(tf_point, lambda w, v, n: tf_runs[n])[0]
check("TFLOP/s: projected figure", rt["projected_per_gpu"][1], 181.8)
check("TFLOP/s: implementation difference", rt["implementation_difference"], 180 / 150 - 1)
check("TFLOP/s: published ratio", rt["published_ratio"], 141 / 150)
check("TFLOP/s: scaling-ratio error", rt["scaling_ratio_error"], (181.8 / 180) / (141 / 150) - 1)
check("TFLOP/s: published figure at the smallest count", rt["published_model_tflops_per_gpu_smallest"], 150.0)
check("plot reading flagged", 1.0 if rt["read_from_plot"] else 0.0, 1.0)
check("tokens point not flagged", 0.0 if r["read_from_plot"] else 1.0, 1.0)
if "| ~150.0 / ~141.0 | 180.0 / 181.8 |" not in table.markdown([rt]):
    failures.append("markdown: plot readings are not marked with ~ or TFLOP/s not to 0.1")
# worst(): the smallest-count and largest-count filters.
check("worst past 64", table.worst(rows + [rt], past=64)["scaling_ratio_error"],
      rt["scaling_ratio_error"])
check("worst from 16 GPUs finds none", table.worst(rows + [rt], min_gpus=16), None)

# The committed rows are what table.py computes from the committed inputs.
committed = json.loads((FOLDER / "validation.json").read_text())
computed = json.loads(json.dumps(table.load()))
if committed != computed:
    failures.append("validation.json differs from table.py's rows: rerun table.py --json")
# Every published point is projected at every GPU count it has (the tgz holds them all), and the
# bandwidth diagnostic has its rows.
if "| 0.15 |" not in table.diagnostic_markdown():
    failures.append("diagnostic table lacks F = 0.15")

# The table from the one-GPU runs of the published shapes: its committed rows are likewise what
# its table.py computes from the committed inputs.
MEASURED = ROOT / "results/h100/projection_validation_2026-12-07"
spec_m = importlib.util.spec_from_file_location("measured_table", MEASURED / "table.py")
measured = importlib.util.module_from_spec(spec_m)
spec_m.loader.exec_module(measured)
if json.loads((MEASURED / "validation.json").read_text()) != json.loads(json.dumps(measured.load())):
    failures.append(f"{MEASURED.name}/validation.json differs from its table.py's rows")

for f in failures:
    print("FAIL", f)
print(f"projection_validation_table: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
