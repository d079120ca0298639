#!/usr/bin/env python3
"""The validation table of perf-project against published multi-GPU runs: published.json's points
beside make_projections.sh's projections (projections.tgz). Prints the markdown tables README.md
and docs/projection.md quote and, with --json FILE, writes every row as JSON. Python 3 standard
library only. Run from the repository root:
python3 results/h200/projection_validation_2026-12-06/table.py [--json FILE]

For a point measured at GPU counts N_s < ... < N_l, with published p(N) and projected q(N) tokens/s
per GPU (or model TFLOP/s per GPU where the source gives only those, its "metric"; the ratios are
the same for a fixed model and per-GPU batch):
  implementation difference  q(N_s) / p(N_s) - 1   (the one-GPU run against the published
                                                    per-GPU figure where both start; not the
                                                    projection's business)
  scaling ratio              p(N_l) / p(N_s) and q(N_l) / q(N_s)
  scaling-ratio error        (q(N_l) / q(N_s)) / (p(N_l) / p(N_s)) - 1
  absolute error at N        q(N) / p(N) - 1 = (1 + implementation) x (1 + scaling error) - 1 at N_l
"""
import json
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = ("base", "scale", "scale_f05")
VARIANT_TEXT = {"base": "off", "scale": "auto + jitter", "scale_f05": "auto + jitter + F 0.5"}
WRAPPERS = {"fsdp2": "FSDP2", "mfsdp": "Megatron FSDP"}
# The shardbench wrapper closest to each point's framework (PyTorch FSDP FULL_SHARD -> FSDP2).
PRIMARY = {"bridge_llama3_8b_h100": "mfsdp"}
# dense bf16, docs/projection.md's peak table (harness/measure/device_peaks.cpp)
PEAK_TFLOPS = {"h100": 989.0, "h200": 989.0, "a100": 312.0, "a100_40gb": 312.0}
# Which field of a projected run stands for each published metric.
PROJECTED_FIELD = {"tokens_per_s_per_gpu": "tokens_per_s_per_rank",
                   "tflops_per_s_per_gpu": "tflops_per_s_per_rank"}
UNIT = {"tokens_per_s_per_gpu": "tokens/s/GPU", "tflops_per_s_per_gpu": "TFLOP/s/GPU"}


def point_rows(point, projected):
    """Rows of one published point. projected(wrapper, variant, n) -> the projected run's dict."""
    ms = sorted(point["measurements"], key=lambda m: m["num_gpus"])
    ns, nl = ms[0]["num_gpus"], ms[-1]["num_gpus"]
    metric = point.get("metric", "tokens_per_s_per_gpu")
    pub = {m["num_gpus"]: m[metric] for m in ms}
    rows = []
    for w in WRAPPERS:
        for v in VARIANTS:
            q = {m["num_gpus"]: projected(w, v, m["num_gpus"])[PROJECTED_FIELD[metric]] for m in ms}
            tf_s = projected(w, v, ns)["tflops_per_s_per_rank"]
            m0 = ms[0]
            pub_tf = m0.get("tflops_per_s_per_gpu", m0.get(
                "model_tflops_per_s_per_gpu",
                m0.get("mfu_percent", 0) * PEAK_TFLOPS[point["gpu"]] / 100))
            row = {
                "point": point["id"], "wrapper": w, "variant": v,
                "primary": w == PRIMARY.get(point["id"], "fsdp2"),
                "metric": metric,
                "read_from_plot": any(m.get("read_from_plot", False) for m in ms),
                "num_gpus": [m["num_gpus"] for m in ms],
                "published_per_gpu": [pub[n] for n in pub],
                "projected_per_gpu": [q[n] for n in pub],
                "absolute_error": [q[n] / pub[n] - 1 for n in pub],
                "implementation_difference": q[ns] / pub[ns] - 1,
                "published_model_tflops_per_gpu_smallest": pub_tf,
                "projected_model_tflops_per_gpu_smallest": tf_s,
                "tflops_difference_smallest": tf_s / pub_tf - 1 if pub_tf else None,
                "published_ratio": None, "projected_ratio": None, "scaling_ratio_error": None,
            }
            if nl != ns:
                row["published_ratio"] = pub[nl] / pub[ns]
                row["projected_ratio"] = q[nl] / q[ns]
                row["scaling_ratio_error"] = row["projected_ratio"] / row["published_ratio"] - 1
            rows.append(row)
    return rows


def worst(rows, min_gpus=0, past=0, **where):
    """The row of largest |scaling-ratio error| among those matching `where`, whose smallest GPU
    count is at least min_gpus and whose largest is above past."""
    keep = [r for r in rows if r["scaling_ratio_error"] is not None
            and r["num_gpus"][0] >= min_gpus and r["num_gpus"][-1] > past
            and all(r[k] == v for k, v in where.items())]
    return max(keep, key=lambda r: abs(r["scaling_ratio_error"])) if keep else None


def pct(x):
    return "n/a" if x is None else f"{100 * x:+.1f}%"


def figure(x, metric):
    return f"{x:,.1f}" if metric == "tflops_per_s_per_gpu" else f"{x:,.0f}"


def markdown(rows):
    """~ marks published figures read off a plot (published.json's plot_reading)."""
    out = ["| point | wrapper | effects | GPUs | unit | published per GPU | projected per GPU "
           "| absolute error | implementation difference | published ratio | projected ratio "
           "| scaling-ratio error |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = "~" if r["read_from_plot"] else ""
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["point"], WRAPPERS[r["wrapper"]], VARIANT_TEXT[r["variant"]],
            " / ".join(str(n) for n in r["num_gpus"]), UNIT[r["metric"]],
            " / ".join(mark + figure(x, r["metric"]) for x in r["published_per_gpu"]),
            " / ".join(figure(x, r["metric"]) for x in r["projected_per_gpu"]),
            " / ".join(pct(x) for x in r["absolute_error"]), pct(r["implementation_difference"]),
            "n/a" if r["published_ratio"] is None else f"{r['published_ratio']:.3f}",
            "n/a" if r["projected_ratio"] is None else f"{r['projected_ratio']:.3f}",
            pct(r["scaling_ratio_error"])))
    return "\n".join(out)


def load(folder=HERE, rows_of=None):
    """The rows of every published point (this folder's published.json) from the projections in
    folder/projections.tgz, by rows_of(point, projected) (default: point_rows)."""
    rows_of = rows_of or point_rows
    published = json.loads((HERE / "published.json").read_text())
    tgz = tarfile.open(folder / "projections.tgz")

    def projected_for(pid):
        def projected(w, v, n):
            f = tgz.extractfile(f"projections/{pid}_{w}_{v}_ng{n}.json")
            return json.load(f)["runs"][0]
        return projected
    rows = []
    for p in published["points"]:
        rows += rows_of(p, projected_for(p["id"]))
    return rows


DIAG_F = ("1", "0.25", "0.15", "0.1")
DIAG_N = (8, 16, 128, 256, 512)


def diagnostic_markdown(folder=HERE):
    """q(N) / q(8) of the diag_t5_fsdp2_f<F>_ng<N> projections in folder/projections.tgz: a
    bandwidth shortfall (F < 1) shows from the first inter-node ring (16 GPUs) on; it stays flat
    past that while the communication stays hidden, and grows with N only once it is exposed
    (F = 0.1)."""
    tgz = tarfile.open(folder / "projections.tgz")

    def q(f, n):
        run = json.load(tgz.extractfile(f"projections/diag_t5_fsdp2_f{f}_ng{n}.json"))["runs"][0]
        return run["tflops_per_s_per_rank"]
    out = ["| F | " + " | ".join(f"{n} GPUs" for n in DIAG_N) + " |",
           "|---|" + "---|" * len(DIAG_N)]
    for f in DIAG_F:
        out.append(f"| {f} | " + " | ".join(f"{q(f, n) / q(f, 8):.3f}" for n in DIAG_N) + " |")
    return "\n".join(out)


def shape_independent_markdown(rows):
    """Published against projected model TFLOP/s per GPU at the smallest GPU count, effects off."""
    out = ["| point | published | projected | difference |\n|---|---|---|---|"]
    for r in rows:
        if r["variant"] == "base":
            out.append(f"| {r['point']} | {r['published_model_tflops_per_gpu_smallest']:.0f} | "
                       f"{r['projected_model_tflops_per_gpu_smallest']:.0f} | {pct(r['tflops_difference_smallest'])} |")
    return "\n".join(out)


def past_64(r):
    return r["num_gpus"][-1] > 64


def main(argv):
    rows = load()
    primary = [r for r in rows if r["primary"]]
    for title, keep in (("up to 64 GPUs", lambda r: not past_64(r)),
                        ("past 64 GPUs", past_64)):
        print(f"Primary wrapper, every set of scale effects, points {title}:\n")
        print(markdown([r for r in primary if keep(r)]))
        print(f"\nThe other wrapper, points {title}:\n")
        print(markdown([r for r in rows if not r["primary"] and keep(r)]) + "\n")
    print("\nShape-independent view at the smallest GPU count (model TFLOP/s per GPU, primary wrapper, effects off):\n")
    print(shape_independent_markdown(primary))
    for label, where in (("primary, effects off", {"primary": True, "variant": "base"}),
                         ("primary, any effects", {"primary": True}),
                         ("any wrapper, any effects", {}),
                         ("from 8 GPUs, any wrapper, any effects", {"min_gpus": 8}),
                         ("past 64 GPUs, primary, effects off",
                          {"past": 64, "primary": True, "variant": "base"}),
                         ("past 64 GPUs, any wrapper, any effects", {"past": 64})):
        w = worst(rows, **where)
        print(f"\nworst scaling-ratio error ({label}): {pct(w['scaling_ratio_error'])} "
              f"({w['point']}, {WRAPPERS[w['wrapper']]}, {VARIANT_TEXT[w['variant']]})")
    print("\nDiagnostic: the T5-11B stand-in (FSDP2, 48 layers, A100, nvlink3 + ib_hdr) with the "
          "network at F x its bandwidth; projected TFLOP/s per GPU over the 8-GPU figure:\n")
    print(diagnostic_markdown())
    if "--json" in argv:
        Path(argv[argv.index("--json") + 1]).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
