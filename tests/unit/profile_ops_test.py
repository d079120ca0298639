#!/usr/bin/env python3
"""scripts/profile_ops --phases on a hand-made trace: forward kernels go to the user scope open at
their launch; backward kernels to the scope of the last forward op recorded with their autograd
node's sequence number (an earlier op with the same number in another scope does not count); a
backward node with no forward op, and a kernel outside every scope, go to "(outside)"; shares
are of the phases' total. An empty prefix is refused. Python 3 standard library; under a
second."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "profile_ops"
failures = []
FWD, BWD = 1, 2  # host threads
events = []


def op(name, ts, dur, tid, seq=None, cat="cpu_op"):
    args = {} if seq is None else {"Sequence number": seq}
    events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1,
                   "tid": tid, "args": args})


def kernel(corr, launch_ts, tid, dur_us):
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": launch_ts,
                   "dur": 1, "pid": 1, "tid": tid, "args": {"correlation": corr}})
    events.append({"ph": "X", "cat": "kernel", "name": f"k{corr}", "ts": 1000 + corr, "dur": dur_us,
                   "pid": 0, "tid": 7, "args": {"correlation": corr}})


op("moe/router", 0, 100, FWD, cat="user_annotation")
op("aten::mm", 10, 10, FWD, seq=5)
kernel(1, 12, FWD, 50)
# Recorded with number 7 before the op that made node 7: not the node's op.
op("aten::add", 90, 5, FWD, seq=7)
op("moe/experts", 100, 100, FWD, cat="user_annotation")
op("aten::_grouped_mm", 110, 20, FWD, seq=7)
kernel(2, 115, FWD, 200)
op("aten::nll_loss", 210, 10, FWD, seq=8)
kernel(3, 215, FWD, 30)
op("autograd::engine::evaluate_function: MmBackward0", 300, 50, BWD, seq=5)
kernel(4, 310, BWD, 80)
op("autograd::engine::evaluate_function: GroupedMmBackward0", 400, 50, BWD, seq=7)
op("aten::_grouped_mm", 405, 20, BWD)
kernel(5, 410, BWD, 300)
op("autograd::engine::evaluate_function: NoForwardBackward0", 500, 10, BWD, seq=99)
kernel(6, 505, BWD, 10)

with tempfile.TemporaryDirectory() as d:
    trace, out = Path(d) / "t.trace.json", Path(d) / "ops.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    r = subprocess.run([sys.executable, str(SCRIPT), str(trace), "--steps", "1", "--phases",
                        "moe/", "--json", str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"exit {r.returncode}: {r.stderr}")
    else:
        doc = json.loads(out.read_text())
        got = {p["phase"]: p for p in doc["phases"]}
        want = {"moe/router": (0.050, 0.080), "moe/experts": (0.200, 0.300),
                "(outside)": (0.030, 0.010)}
        for name, (f, b) in want.items():
            p = got.get(name)
            if p is None:
                failures.append(f"no phase {name}: {sorted(got)}")
                continue
            if abs(p["forward_ms"] - f) > 1e-9 or abs(p["backward_ms"] - b) > 1e-9:
                failures.append(f"{name}: forward {p['forward_ms']}, backward {p['backward_ms']}; "
                                f"want {f}, {b}")
        share = got.get("moe/router", {}).get("share")
        if share is None or abs(share - 0.130 / 0.630) > 1e-9:
            failures.append(f"router share {share}, want {0.130 / 0.630}")
        if got.get("(outside)", {}).get("share") is not None:
            failures.append("(outside) has a share")
    r = subprocess.run([sys.executable, str(SCRIPT), str(trace), "--phases", ""],
                       capture_output=True, text=True)
    if r.returncode == 0 or "--phases" not in r.stderr:
        failures.append(f"an empty prefix: exit {r.returncode}, {r.stderr!r}")

for f in failures:
    print("FAIL", f)
print(f"profile_ops: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
