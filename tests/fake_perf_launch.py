#!/usr/bin/env python3
"""A stand-in for perf-launch in the tests of scripts/compat_matrix and scripts/nightly. It trains
nothing and starts no worker, so a test can check the commands those scripts generate (a GPU
grid on a machine without a GPU, say) and their verdicts, in milliseconds.

  fake_perf_launch.py ARGS...

- Each invocation appends one JSON line, {"argv": [...]}, to $FAKE_PERF_LAUNCH_LOG when set.
- --dryrun: exit 0.
- An argument equal to one of $FAKE_PERF_LAUNCH_REFUSE (comma-separated): prints perf-launch's
  refusal line, "perf-launch: error: ...", and exits 2, as a refused command line does.
- Otherwise: prints two iteration lines as Megatron's log does, writes a minimal report to
  shardbench.report_path=P or --report P (one run per wrapper, status ok, the identity's device,
  world size and ranks per GPU; a comparison with the DDP baseline whose loss parity is ok; a
  loaded checkpoint when --load_dir is given) and exits 0. The device is "cpu" under -g cpu,
  else $FAKE_PERF_LAUNCH_DEVICE (default "NVIDIA H100 80GB HBM3"). $FAKE_PERF_LAUNCH_SLEEP
  seconds, when set, pass before the report is written (a slow cell).

Standard library only.
"""
import json
import os
import sys
import time


def value_after(argv, flag):
    for i, a in enumerate(argv[:-1]):
        if a == flag:
            return argv[i + 1]
    return None


def override(argv, key):
    for a in argv:
        if a.startswith(key + "="):
            return a[len(key) + 1:]
    return None


def main(argv):
    log = os.environ.get("FAKE_PERF_LAUNCH_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"argv": argv}) + "\n")
    if "--dryrun" in argv:
        return 0
    refuse = [r for r in os.environ.get("FAKE_PERF_LAUNCH_REFUSE", "").split(",") if r]
    for a in argv:
        if a in refuse:
            print("perf-launch: error: %s: refused by the fake perf-launch (test); accepted: "
                  "anything else" % a)
            return 2
    world = int(value_after(argv, "-ng") or 1)
    ranks_per_gpu = int(override(argv, "shardbench.ranks_per_gpu") or 1)
    gpu = value_after(argv, "-g") or "cpu"
    device = "cpu" if gpu == "cpu" else os.environ.get("FAKE_PERF_LAUNCH_DEVICE",
                                                       "NVIDIA H100 80GB HBM3")
    steps = int(value_after(argv, "-ms") or 3)
    for step in range(1, 3):
        print(" iteration %8d/%8d | elapsed time per iteration (ms): 1.0 | lm loss: 6.0E+00 |"
              % (step, steps))
    identity = {"device": device, "world_size": world, "ranks_per_gpu": ranks_per_gpu,
                "functional_only": ranks_per_gpu > 1}
    head = {"label": "head", "status": "ok", "identity": dict(identity, wrapper="head")}
    if value_after(argv, "--load_dir"):
        head["checkpoint"] = {"loaded_from": value_after(argv, "--load_dir")}
    ddp = {"label": "ddp+distopt", "status": "ok", "identity": dict(identity, wrapper="ddp")}
    metrics = {"median_step_time_ms": {"baseline": 1.0, "head": 1.1, "relative_change": 0.1},
               "allocator_max_allocated_bytes": {"baseline": 100, "head": 80,
                                                 "relative_change": -0.2}}
    report = {"runs": [head, ddp],
              "comparisons": [{"head_index": 0, "baseline_label": "ddp+distopt",
                               "loss_parity": {"verdict": "ok", "summary": "fake: equal losses"},
                               "metrics": metrics}]}
    time.sleep(float(os.environ.get("FAKE_PERF_LAUNCH_SLEEP", "0")))
    path = override(argv, "shardbench.report_path") or value_after(argv, "--report")
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(report, f)
        os.replace(path + ".tmp", path)
        print("perf-launch: report written to " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
