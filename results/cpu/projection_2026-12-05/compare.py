#!/usr/bin/env python3
"""Projected vs measured step time and order of collectives (run.sh writes the inputs).

Measured step time: the median over a run's steps after the first (rank-0 barrier-aligned
elapsed_ms). Order of collectives: the engine's NVTX launch ranges of the run's last step on each
rank (the recorder's per-rank files), against the projection's list for one step; the projection's
grad_norm_all_reduce has no NVTX range in the engine and is left out of the comparison.
"""
import json
import os
import re
import statistics
import sys

OUT = sys.argv[1]
LAUNCH = re.compile(r"^(all_gather|reduce_scatter|all_reduce|reduce|param_all_gather)/")


def nvtx_orders(path):
    """{label: [collective names of the last training step]} from one rank's recorder file."""
    label, step, per = None, None, {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if parts[0] != "push" or len(parts) < 6:
                continue
            msg = parts[5]
            if msg.startswith("benchmark/"):
                label = msg[len("benchmark/"):]
            elif msg.startswith("training_step_"):
                step = int(msg[len("training_step_"):])
                per.setdefault(label, {})[step] = []
            elif LAUNCH.match(msg) and label is not None and step is not None:
                per[label][step].append(msg)
    return {lab: steps[max(steps)] for lab, steps in per.items() if steps}


def main():
    rows = []
    worst = 0.0
    for n in (2, 4):
        proj = json.load(open(f"{OUT}/projected_ws{n}.json"))
        replay = {r["label"]: r for r in json.load(open(f"{OUT}/replayed_ws{n}.json"))["runs"]}
        omp1 = {r["label"]: r for r in json.load(open(f"{OUT}/projected_omp1_ws{n}.json"))["runs"]}
        meas = json.load(open(f"{OUT}/measured_ws{n}.json"))
        measured = {r["label"]: r for r in meas["runs"]}
        nvtx_dir = f"{OUT}/nvtx_ws{n}"
        orders = [nvtx_orders(os.path.join(nvtx_dir, f)) for f in sorted(os.listdir(nvtx_dir))]
        for p in proj["runs"]:
            m = measured[p["label"]]
            steps = m["steps"][1:]
            step_ms = statistics.median(s["elapsed_ms"] for s in steps)
            exposed = statistics.median(s["phases_ms"]["exposed_comm"] for s in steps)
            err = p["step_ms"] / step_ms - 1
            worst = max(worst, abs(err))
            sim = [c["name"] for c in p["collectives"] if c["name"] != "grad_norm_all_reduce"]
            same = all(o.get(p["label"]) == sim for o in orders)
            rp = replay[p["label"]]
            rows.append((n, p["label"], p["step_ms"], step_ms, err, p["exposed_comm_ms"], exposed,
                         same, len(sim), p["compute_ms"], rp["compute_ms"], rp["step_ms"],
                         rp["step_ms"] / step_ms - 1, omp1[p["label"]]["step_ms"],
                         omp1[p["label"]]["step_ms"] / step_ms - 1))
            if not same:
                for r, o in enumerate(orders):
                    if o.get(p["label"]) != sim:
                        print(f"# ws{n} {p['label']} rank {r}: engine {o.get(p['label'])}")
                        print(f"# ws{n} {p['label']} projected {sim}")
    print("ranks | run | projected step ms | measured step ms (median) | error | "
          "projected exposed comm ms | measured exposed comm ms (rank 0) | collective order "
          "identical on every rank (count) | compute ms: from 1 rank | compute ms: as run at N "
          "| replayed step ms | replayed error | projected from 1 rank, 1 thread, step ms | error")
    for n, label, ps, ms, err, pe, me, same, count, c1, cn, rs, rerr, o1, oerr in rows:
        print(f"{n} | {label} | {ps:.2f} | {ms:.2f} | {err:+.1%} | {pe:.2f} | {me:.2f} | "
              f"{'yes' if same else 'NO'} ({count}) | {c1:.2f} | {cn:.2f} | {rs:.2f} | {rerr:+.1%}"
              f" | {o1:.2f} | {oerr:+.1%}")
    print(f"largest step-time error (projected from 1 rank): {worst:.1%}")
    print(f"largest step-time error (replayed with the N-rank compute): "
          f"{max(abs(r[12]) for r in rows):.1%}")
    print(f"largest step-time error (projected from 1 rank with 1 thread): "
          f"{max(abs(r[14]) for r in rows):.1%}")


main()
