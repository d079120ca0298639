#!/usr/bin/env python3
"""The validation table of perf-project against published multi-GPU runs, from one-GPU H100 runs
of the published shapes: the published points of
results/h200/projection_validation_2026-12-06/published.json beside make_projections.sh's
projections (projections.tgz in this folder). Prints the markdown tables README.md and
docs/projection.md quote and, with --json FILE, writes every row as JSON; the comparison with the
earlier stand-in table reads results/h200/projection_validation_2026-12-06/validation.json.
Python 3 standard library only. Run from the repository root:
python3 results/h100/projection_validation_2026-12-07/table.py [--json FILE]

For a point measured at GPU counts N_s < ... < N_l, with published p(N) and projected q(N) tokens/s
per GPU (or model TFLOP/s per GPU where the source gives only those, its "metric"; the ratios are
the same for a fixed model and per-GPU batch):
  implementation difference  q(N_s) / p(N_s) - 1   (the one-GPU run against the published
                                                    per-GPU figure where both start; not the
                                                    projection's business)
  scaling ratio              p(N_l) / p(N_s) and q(N_l) / q(N_s)
  scaling-ratio error        (q(N_l) / q(N_s)) / (p(N_l) / p(N_s)) - 1
  absolute error at N        q(N) / p(N) - 1 = (1 + implementation) x (1 + scaling error) - 1 at N_l
Each point has one measured run, of one wrapper: FSDP2 for PyTorch FSDP's points, Megatron FSDP
for Megatron-Bridge's (the runs file measured no other). The row arithmetic and the full table's
markdown are the earlier check's (results/h200/projection_validation_2026-12-06/table.py,
imported).
"""
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
EARLIER = ROOT / "results/h200/projection_validation_2026-12-06"
STAND_IN = EARLIER / "validation.json"
# The earlier check's table.py: its row arithmetic, constants, full-table markdown, projection
# loading and diagnostic table, reused.
_spec = importlib.util.spec_from_file_location("stand_in_table", EARLIER / "table.py")
stand_in_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stand_in_table)
VARIANTS, VARIANT_TEXT = stand_in_table.VARIANTS, stand_in_table.VARIANT_TEXT
WRAPPERS = stand_in_table.WRAPPERS
pct, figure, markdown = stand_in_table.pct, stand_in_table.figure, stand_in_table.markdown
past_64 = stand_in_table.past_64
# The wrapper each point's run was measured with (make_projections.sh); FSDP2 where not named:
# the earlier table's primary wrapper of each point.
MEASURED_WRAPPER = stand_in_table.PRIMARY
LABEL = {
    "mpt13b_h100": "MPT-13B, llm-foundry, H100",
    "mpt3b_h100": "MPT-3B, llm-foundry, H100",
    "mpt1b_h100": "MPT-1B, llm-foundry, H100",
    "mpt760m_h100": "MPT-760M, llm-foundry, H100",
    "kempner_llama3_8b_h200": "Llama 3 8B shape, KempnerForge, H200 (below 8 GPUs)",
    "bridge_llama3_8b_h100": "Llama 3 8B, Megatron-Bridge, H100, FP8",
    "fsdp_paper_gpt175b_b1_a100": "GPT-175B, FSDP paper, A100, B = 1 (TFLOP/s)",
    "fsdp_paper_gpt175b_b2_a100": "GPT-175B, FSDP paper, A100, B = 2 (TFLOP/s)",
    "fsdp_paper_t5_11b_b8_a100": "T5-11B, FSDP paper, A100, B = 8 (TFLOP/s)",
    "fsdp_paper_t5_11b_b16_a100": "T5-11B, FSDP paper, A100, B = 16 (TFLOP/s)",
    "mpt7b_a100_40gb": "MPT-7B, llm-foundry, A100 40GB",
    "mpt13b_a100_40gb": "MPT-13B, llm-foundry, A100 40GB",
    "mpt3b_a100_40gb": "MPT-3B, llm-foundry, A100 40GB",
    "mpt1b_a100_40gb": "MPT-1B, llm-foundry, A100 40GB",
    "mpt760m_a100_40gb": "MPT-760M, llm-foundry, A100 40GB",
    "mpt350m_a100_40gb": "MPT-350M, llm-foundry, A100 40GB",
    "mpt125m_a100_40gb": "MPT-125M, llm-foundry, A100 40GB",
}


def point_rows(point, projected):
    """Rows of one published point, one per set of scale effects, for the wrapper its run was
    measured with: the earlier table's rows of that wrapper, every wrapper asked for the measured
    run's projections. projected(wrapper, variant, n) -> the projected run's dict."""
    w = MEASURED_WRAPPER.get(point["id"], "fsdp2")
    return [r for r in stand_in_table.point_rows(point, lambda _, v, n: projected(w, v, n))
            if r["wrapper"] == w]


def worst(rows, min_gpus=0, past=0, upto=None, **where):
    """The row of largest |scaling-ratio error| among those matching `where`, whose smallest GPU
    count is at least min_gpus and whose largest is above past (and at most upto, if given)."""
    keep = [r for r in rows if r["scaling_ratio_error"] is not None
            and r["num_gpus"][0] >= min_gpus and r["num_gpus"][-1] > past
            and (upto is None or r["num_gpus"][-1] <= upto)
            and all(r[k] == v for k, v in where.items())]
    return max(keep, key=lambda r: abs(r["scaling_ratio_error"])) if keep else None


def ratio(x):
    return "n/a" if x is None else f"{x:.3f}"


def summary_markdown(rows):
    """One line a point: smallest and largest GPU counts, effects off, and the scaling-ratio error
    under each set of effects (docs/projection.md's table)."""
    out = ["| published point | GPUs | published per GPU | projected (effects off) "
           "| implementation difference | published ratio | projected ratio "
           "| scaling-ratio error, effects off | with `auto` + jitter | with half the network as well |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    by = {(r["point"], r["variant"]): r for r in rows}
    for pid in dict.fromkeys(r["point"] for r in rows):
        b = by[(pid, "base")]
        ends = [0, -1] if len(b["num_gpus"]) > 1 else [0]
        mark = "~" if b["read_from_plot"] else ""
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            LABEL[pid], " / ".join(str(b["num_gpus"][i]) for i in ends),
            " / ".join(mark + figure(b["published_per_gpu"][i], b["metric"]) for i in ends),
            " / ".join(figure(b["projected_per_gpu"][i], b["metric"]) for i in ends),
            pct(b["implementation_difference"]), ratio(b["published_ratio"]),
            ratio(b["projected_ratio"]), pct(b["scaling_ratio_error"]),
            pct(by[(pid, "scale")]["scaling_ratio_error"]),
            pct(by[(pid, "scale_f05")]["scaling_ratio_error"])))
    return "\n".join(out)


def comparison_markdown(rows, stand_in):
    """The scaling-ratio error and the implementation difference of each point, effects off, this
    table's run against the stand-in table's primary wrapper (its validation.json); the change is
    of the unrounded errors, in percentage points."""
    old = {r["point"]: r for r in stand_in if r["primary"] and r["variant"] == "base"}
    out = ["| published point | stand-in | scaling-ratio error, stand-in | measured shape "
           "| change (points) | implementation difference, stand-in | measured shape |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["variant"] != "base":
            continue
        o = old[r["point"]]
        change = "n/a"
        if r["scaling_ratio_error"] is not None:
            d = 100 * (r["scaling_ratio_error"] - o["scaling_ratio_error"])
            change = "0.0" if abs(d) < 0.05 else f"{d:+.1f}"
        out.append(f"| {LABEL[r['point']]} | {WRAPPERS[o['wrapper']]} | {pct(o['scaling_ratio_error'])} "
                   f"| {pct(r['scaling_ratio_error'])} | {change} | {pct(o['implementation_difference'])} "
                   f"| {pct(r['implementation_difference'])} |")
    return "\n".join(out)


def load():
    return stand_in_table.load(HERE, point_rows)


def diagnostic_markdown():
    """q(N) / q(8) of the diag_t5_fsdp2_f<F>_ng<N> projections (the T5-11B shape at batch 8)."""
    return stand_in_table.diagnostic_markdown(HERE)


def main(argv):
    rows = load()
    print("Summary (smallest and largest GPU count):\n")
    print(summary_markdown(rows) + "\n")
    for title, keep in (("up to 64 GPUs", lambda r: not past_64(r)),
                        ("past 64 GPUs", past_64)):
        print(f"Every set of scale effects, points {title}:\n")
        print(markdown([r for r in rows if keep(r)]) + "\n")
    print("Shape-independent view at the smallest GPU count (model TFLOP/s per GPU, effects off):\n")
    print(stand_in_table.shape_independent_markdown(rows))
    print("\nAgainst the stand-in table (effects off):\n")
    print(comparison_markdown(rows, json.loads(STAND_IN.read_text())))
    for label, where in (("effects off", {"variant": "base"}),
                         ("any effects", {}),
                         ("from 8 GPUs, effects off", {"min_gpus": 8, "variant": "base"}),
                         ("from 8 GPUs, any effects", {"min_gpus": 8}),
                         ("from 8 up to 64 GPUs, effects off", {"min_gpus": 8, "upto": 64, "variant": "base"}),
                         ("from 8 up to 64 GPUs, any effects", {"min_gpus": 8, "upto": 64}),
                         ("past 64 GPUs, effects off", {"past": 64, "variant": "base"}),
                         ("past 64 GPUs, any effects", {"past": 64})):
        w = worst(rows, **where)
        print(f"\nworst scaling-ratio error ({label}): {pct(w['scaling_ratio_error'])} "
              f"({w['point']}, {WRAPPERS[w['wrapper']]}, {VARIANT_TEXT[w['variant']]})")
    print("\nDiagnostic: the T5-11B shape at batch 8 (FSDP2, 48 layers, A100, nvlink3 + ib_hdr) with "
          "the network at F x its bandwidth; projected TFLOP/s per GPU over the 8-GPU figure:\n")
    print(diagnostic_markdown())
    if "--json" in argv:
        Path(argv[argv.index("--json") + 1]).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
