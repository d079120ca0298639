#!/usr/bin/env python3
"""Order of collectives: the projection's list for one step against the engine's NVTX launch
ranges of the measured run's last step on each rank (run.sh writes the inputs). The grad-norm
all-reduces and outer no_shard's cross-instance all-reduces have no NVTX range in the engine and
are left out of the comparison."""
import json
import os
import re
import sys

OUT = sys.argv[1]
LAUNCH = re.compile(
    r"^(all_gather|reduce_scatter|all_reduce|reduce|param_all_gather|outer_reduce_scatter|"
    r"outer_all_gather)/")


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
    print("| outer | run | measured parallel_layout | collectives compared | same order, every rank |")
    print("|---|---|---|---|---|")
    for outer in ("no_shard", "optim"):
        proj = json.load(open(f"{OUT}/projected_{outer}.json"))["runs"]
        meas = json.load(open(f"{OUT}/measured_{outer}.json"))["runs"]
        nvtx_dir = f"{OUT}/nvtx_{outer}"
        orders = [nvtx_orders(os.path.join(nvtx_dir, f)) for f in sorted(os.listdir(nvtx_dir))]
        for p in proj:
            m = next(r for r in meas if r["label"] == p["label"])
            layout = m.get("parallel_layout", {})
            sim = [c["name"] for c in p["collectives"]
                   if not c["name"].startswith("grad_norm") and
                   not c["name"].startswith("outer_all_reduce/")]
            same = all(o.get(p["label"]) == sim for o in orders)
            print(f"| {outer} | {p['label']} | dp {layout.get('dp')}, dp_instances "
                  f"{layout.get('dp_instances')}, outer {layout.get('outer_dp_sharding_strategy')} "
                  f"| {len(sim)} | {'yes' if same else 'no'} ({len(orders)} ranks) |")
            if not same:
                print(f"simulator: {sim}")
                for i, o in enumerate(orders):
                    print(f"rank {i}: {o.get(p['label'])}")


if __name__ == "__main__":
    main()
