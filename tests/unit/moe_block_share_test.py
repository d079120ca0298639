#!/usr/bin/env python3
"""scripts/moe_block_share on a hand-made profile_ops JSON of two steps: a grouped-GEMM row and
an expert weight's gradient accumulation count as experts, the probe's product as harness, the
router GEMM as router; a row tied to no op is split by its kernels (the weighted SwiGLU kernel to
the experts, the slot sum to the router, the rest of the row to the router); the share is
router / (experts + router). A file that is not a profile_ops JSON exits non-zero with its name.
Python 3 standard library; under a second."""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "moe_block_share"
failures = []


def row(outer, inner, shapes, ms, kernels=None):
    return {"outer": outer, "inner": inner, "shapes": shapes, "ms_per_step": ms,
            "calls_per_step": 1.0, "kernels": kernels or {}}


rows = [
    row("aten::_grouped_mm", "aten::_grouped_mm", "[32768x2048, 64x2048x1536]", 2.0),
    row("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "aten::add_",
        "[1536x2048, 1536x2048]", 0.5),
    row("aten::mul", "aten::mul", "[4096x2048, 4096x2048]", 0.1),
    row("aten::mm", "aten::mm", "[4096x2048, 2048x64]", 0.2),
    # 0.4 ms per step: kernels of 200 us (swiglu) and 300 us (slots) over 2 steps, 0.15 unlisted.
    row("(no op)", "(no op)", "", 0.4,
        {"weighted_swiglu_fwd_kernel": 200.0, "sum_slots_kernel": 300.0}),
]
with tempfile.TemporaryDirectory() as d:
    ops = Path(d) / "block.ops.json"
    ops.write_text(json.dumps({"steps": 2.0, "device_ms_per_step": 3.2, "rows": rows}))
    out = subprocess.run([sys.executable, str(SCRIPT), str(ops)], capture_output=True, text=True)
    # experts 2.0 + 0.5 + 0.1 (the SwiGLU kernel) = 2.6; router 0.2 + 0.15 (slots) + 0.15 (the
    # unlisted rest) = 0.5; harness 0.1 (the probe product); share 0.5 / 3.1.
    want = "device 3.200 ms/step; experts 2.600, router/permute/unpermute 0.500, harness 0.100; " \
           "share 16.1% of 3.100 ms"
    if out.returncode != 0 or want not in out.stdout:
        failures.append("exit %d: %s%s" % (out.returncode, out.stdout, out.stderr))
    bad = Path(d) / "bad.json"
    bad.write_text("{}")
    out = subprocess.run([sys.executable, str(SCRIPT), str(bad)], capture_output=True, text=True)
    if out.returncode == 0 or "bad.json" not in out.stderr:
        failures.append("a file without rows: exit %d, %s" % (out.returncode, out.stderr))

for f in failures:
    print("FAIL:", f)
print("moe_block_share_test: %d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
