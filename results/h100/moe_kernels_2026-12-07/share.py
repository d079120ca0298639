#!/usr/bin/env python3
"""Device-time split of the MoE block benchmark's profile (call_1/profile/*.ops.json, written by
scripts/profile_ops from BM_MoeBlock's torch-profiler window of two iterations).

Each row of profile_ops (outer op, inner op, shapes, device ms per step) goes to one class:
  experts   the grouped GEMMs forward and backward, the weighted SwiGLU (kernel or ATen ops on
            the [rows, ffn] tensors), and the expert weights' gradient accumulation
  harness   what the benchmark adds around the block: the probe product and sum of its loss
            ([T, hidden] mul, MulBackward0, sum) and its input's gradient accumulation
  router    everything else: the router GEMM and casts, top-k and softmax, the aux loss, the
            routed rows, the dispatch gather and the combine's slot sum, forward and backward
Rows profile_ops could not tie to an op ("(no op)") are split by their kernels' names; the part of
such a row its listed kernels do not cover is counted as router (an upper bound).
The share is router / (experts + router): the MoE layer's own device time, harness left out.

  python3 share.py call_1/profile/moe_block_flat1_fused1_rank0.ops.json
"""
import json
import sys

EXPERT_SHAPES = ("1536x2048", "2048x768", "32768x768", "32768x1536")


def classify(row):
    outer, inner, shapes = row["outer"], row["inner"], row["shapes"]
    kernels = " ".join(row["kernels"])
    if "_grouped_mm" in inner or "GroupedMm" in outer or "weighted_swiglu" in kernels:
        return "experts"
    if any(s in shapes for s in EXPERT_SHAPES):
        return "experts"  # expert weight grads, ATen SwiGLU pieces on the routed rows
    if shapes.startswith("[4096x2048") and (
        inner == "aten::mul" or "MulBackward0" in outer or inner == "aten::sum"
        or "AccumulateGrad" in outer):
        return "harness"
    return "router"


def split(path):
    d = json.load(open(path))
    steps = d["steps"]
    out = {"experts": 0.0, "harness": 0.0, "router": 0.0}
    for row in d["rows"]:
        ms = row["ms_per_step"]
        if row["outer"] == "(no op)":
            listed = 0.0
            for name, us in row["kernels"].items():
                part = us / 1000.0 / steps
                listed += part
                out["experts" if "weighted_swiglu" in name else "router"] += part
            out["router"] += max(0.0, ms - listed)
        else:
            out[classify(row)] += ms
    return d["device_ms_per_step"], out


for path in sys.argv[1:]:
    total, c = split(path)
    layer = c["experts"] + c["router"]
    print(f"{path}: device {total:.3f} ms/step; experts {c['experts']:.3f}, router/permute/"
          f"unpermute {c['router']:.3f}, harness {c['harness']:.3f}; "
          f"share {100 * c['router'] / layer:.1f}% of {layer:.3f} ms")
