#!/usr/bin/env python3
"""scripts/graph_gap on hand-made reports: an eager and a graphed run, each with its profiler
folder, give the table's step time, phase, busy time without NCCL's kernels, host gap, memory,
capture time and pool; with the run's trace beside its summary, the idle time per step window
from the union of the device's activities (overlaps counted once), split into idle inside a
graph replay (its kernels' shared correlation id) and outside; a run with per-layer graphs (scope
attn,mlp) takes its forward and
backward phases; a graphed run with the optimizer captured says so (a 1.3 report, without the
field, does not); a run without a kernel summary has no gap; a folder with no report exits 2.
Python 3 standard library; under a second."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "graph_gap"
failures = []


def report(path, graph, scope=None, optimizer_captured=None):
    phases = {"graph": 80.0, "optimizer": 9.0} if graph and not scope else \
        {"forward": 30.0, "backward": 55.0, "optimizer": 9.0}
    run = {"label": "ddp", "identity": {"recipe": "r", "world_size": 1},
           "summary": {"step_time_ms": {"median": 100.0 if not graph else 92.0},
                       "phase_ms_median": phases,
                       "measured_window": {"begin_index": 2, "end_index": 5}},
           # Steps 1-2 fall before the window; rank 1's times are not rank 0's.
           "per_rank_step_ms": [[500.0, 300.0, 99.0, 98.0, 97.0 if not graph else 91.5],
                                [1.0, 1.0, 1.0, 1.0, 1.0]],
           "memory": {"allocator_peak": {"max_allocated": {"bytes": 2 * 1024 ** 3}}}}
    if graph:
        run["cuda_graph"] = {"capture_ms": 50.0, "graph_pool_bytes": 3 * 2 ** 20}
        if scope:
            run["cuda_graph"]["scope"] = scope
        if optimizer_captured is not None:
            run["cuda_graph"]["optimizer_captured"] = optimizer_captured
    path.write_text(json.dumps({"runs": [run]}))


def kernels(folder, rows):
    folder.mkdir()
    (folder / "r_ddp_ws1_rank0.kernels.json").write_text(json.dumps(
        {"rows": [{"name": n, "calls": 1, "total_us": u * 2, "us_per_step": u} for n, u in rows],
         "steps": 2}))


with tempfile.TemporaryDirectory() as d:
    d = Path(d)
    report(d / "r_ddp-eager_ws1.json", graph=False)
    report(d / "r_ddp-graph_ws1.json", graph=True)
    report(d / "r_ddp-noprof_ws1.json", graph=False)
    report(d / "r_ddp-layers_ws1.json", graph=True, scope="attn,mlp", optimizer_captured=False)
    report(d / "r_ddp-optgraph_ws1.json", graph=True, optimizer_captured=True)
    kernels(d / "profile_ddp-eager", [("gemm", 90000.0), ("ncclDevKernel_AllReduce", 5000.0)])
    kernels(d / "profile_ddp-graph", [("gemm", 91000.0), ("Memcpy HtoD", 500.0)])
    # Step 10 (host scope 990-1290) launches a graph (two kernels, 10 us apart), an eager kernel
    # on another stream that overlaps the first, and a copy 50 us after the replay: 300 us, 200
    # busy, 10 idle inside the replay, 90 outside (10 before, 50 between, 30 after). Step 11
    # (1295-1400): one graph kernel of 90 us, 15 idle outside. A kernel outside both counts for
    # neither.
    X = lambda cat, name, ts, dur, corr=None: dict(
        ph="X", cat=cat, name=name, ts=ts, dur=dur,
        args={} if corr is None else {"correlation": corr})
    trace = [X("user_annotation", "training_step_10", 990, 300),
             X("user_annotation", "training_step_11", 1295, 105),
             X("cuda_runtime", "cudaGraphLaunch", 992, 5, 1),
             X("cuda_runtime", "cudaMemcpyAsync", 993, 5, 2),
             X("cuda_runtime", "cudaLaunchKernel", 994, 5, 4),
             X("cuda_runtime", "cudaGraphLaunch", 1296, 5, 3),
             X("kernel", "gemm", 1000, 100, 1), X("kernel", "gemm", 1110, 90, 1),
             X("kernel", "side", 1020, 40, 4), X("gpu_memcpy", "Memcpy HtoD", 1250, 10, 2),
             X("kernel", "gemm", 1300, 90, 3), X("kernel", "late", 5000, 1)]
    (d / "profile_ddp-graph" / "r_ddp_ws1_rank0.trace.json").write_text(
        json.dumps({"traceEvents": trace}))
    out = subprocess.run([sys.executable, str(SCRIPT), str(d), "--json", str(d / "t.json")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        failures.append("exit %d: %s" % (out.returncode, out.stderr))
    else:
        rows = {r["report"]: r for r in json.loads((d / "t.json").read_text())}
        eager, graph, noprof = (rows["r_ddp-eager_ws1.json"], rows["r_ddp-graph_ws1.json"],
                                rows["r_ddp-noprof_ws1.json"])
        want = [(eager["busy_ms"], 90.0), (eager["host_gap_ms"], 10.0), (eager["phase_ms"], 85.0),
                (graph["busy_ms"], 91.5), (graph["host_gap_ms"], 0.5), (graph["phase_ms"], 80.0),
                (graph["capture_ms"], 50.0), (graph["graph_pool_bytes"], 3 * 2 ** 20),
                (eager["device_step_ms"], 98.0), (eager["device_gap_ms"], 8.0),
                (graph["device_step_ms"], 98.0), (graph["device_gap_ms"], 6.5)]
        for got, exp in want:
            if got is None or abs(got - exp) > 1e-9:
                failures.append("got %r, want %r" % (got, exp))
        idle = graph["idle"] or {}
        for key, exp in (("windows", 2), ("window_ms", 0.2025), ("busy_union_ms", 0.145),
                         ("idle_ms", 0.0575), ("idle_in_graphs_ms", 0.005),
                         ("idle_outside_graphs_ms", 0.0525)):
            if key not in idle or abs(idle[key] - exp) > 1e-9:
                failures.append("trace split %s: got %r, want %r" % (key, idle.get(key), exp))
        if eager["idle"] is not None or eager["trace"] is not None:
            failures.append("a run without a trace has no split: %r" % eager)
        if "| r_ddp-graph_ws1.json | full_iteration | 2 | 0.20 | 0.14 | 0.06 | 0.01 | 0.05 |" \
                not in out.stdout:
            failures.append("trace table row: " + out.stdout)
        if noprof["host_gap_ms"] is not None or noprof["device_gap_ms"] is not None or \
                noprof["graph"]:
            failures.append("a run without a profile: %r" % noprof)
        layers = rows["r_ddp-layers_ws1.json"]
        if layers["phase_ms"] != 85.0 or layers["scope"] != "attn,mlp" or \
                layers["optimizer_graph"] or layers["optimizer_ms"] != 9.0:
            failures.append("per-layer graphs: %r" % layers)
        if "| r_ddp-graph_ws1.json | full_iteration | 92.00 | 80.00 | 9.00 | 91.50 | 0.50 | " \
                "98.00 | 6.50 |" not in out.stdout:
            failures.append("table row: " + out.stdout)
        if "| r_ddp-layers_ws1.json | attn,mlp | 92.00 | 85.00 | 9.00 |" not in out.stdout:
            failures.append("per-layer table row: " + out.stdout)
        optgraph = rows["r_ddp-optgraph_ws1.json"]
        if not optgraph["optimizer_graph"] or graph["optimizer_graph"] or \
                optgraph["optimizer_ms"] != 9.0:
            failures.append("the optimizer graph: %r, %r" % (optgraph, graph))
        if "| r_ddp-optgraph_ws1.json | step+opt | 92.00 |" not in out.stdout:
            failures.append("optimizer graph row: " + out.stdout)
    empty = Path(tempfile.mkdtemp())
    out = subprocess.run([sys.executable, str(SCRIPT), str(empty)], capture_output=True, text=True)
    if out.returncode != 2 or "no reports" not in out.stderr:
        failures.append("empty folder: exit %d, %s" % (out.returncode, out.stderr))
    os.rmdir(empty)

for f in failures:
    print("FAIL:", f)
print("graph_gap_test: %d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
