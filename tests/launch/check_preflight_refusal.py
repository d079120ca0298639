#!/usr/bin/env python3
"""Checks the log of a CPU run that the node's first rank refused for host memory.

    check_preflight_refusal.py DRYRUN_OUTPUT LOG RANKS

DRYRUN_OUTPUT is what `perf-launch ... --dryrun` printed for the same arguments; its preflight
lines give the estimate that the refusal must name. LOG is the run's combined output (the Slurm
job log, or torchrun's output). RANKS is the run's rank count (-ng), all of them on one node.

The log must hold exactly one "perf-launch: error: " line, and that line must be the memory
refusal of harness/launch/machine_preflight.cpp naming the same per-rank and total estimates as
the dry run, and a MemAvailable below the total; no training step may have run (no step line).
Used by tests/slurm/run_slurm_preflight_test.sh and tests/launch/run_torchrun_preflight_test.sh.
"""
import re
import sys

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
MEMORY = r"[0-9]+(?:\.[0-9]+)? (?:B|KiB|MiB|GiB|TiB)"


def bytes_of(text):
    number, unit = text.split(" ")
    return float(number) * UNITS[unit]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    dryrun = open(sys.argv[1], encoding="utf-8", errors="replace").read()
    log = open(sys.argv[2], encoding="utf-8", errors="replace").read()
    ranks = int(sys.argv[3])
    errors = []

    # The dry run's estimate, from the same binary and arguments.
    peak = re.search(r"^  estimated peak per rank: " + MEMORY + r" \((.*)\)$", dryrun, re.M)
    cpu = re.search(r"^  CPU ranks: (\d+) of about (" + MEMORY + r") resident each, with the "
                    r"launcher (" + MEMORY + r") of this host's", dryrun, re.M)
    if not peak or not cpu:
        sys.exit("FAIL: the dry run printed no CPU preflight estimate:\n" + dryrun)
    parts, per_rank, total = peak.group(1), cpu.group(2), cpu.group(3)

    lines = [l for l in log.splitlines() if l.startswith("perf-launch: error: ")]
    if len(lines) != 1:
        errors.append(f"{len(lines)} 'perf-launch: error: ' lines, expected exactly one: {lines}")
    expected = re.compile(
        re.escape(f"perf-launch: error: -g cpu -ng {ranks}: {ranks} CPU ranks of about {per_rank} "
                  f"each ({parts}; process and batch ")
        + "(" + MEMORY + ")"
        + re.escape(f") and the launcher need {total}, this host has ")
        + "(" + MEMORY + ")"
        + re.escape(" available (MemAvailable); accepted: a smaller model, or a host with more "
                    "memory, or --skip_capacity_checks")
        + "$")
    matched = [m for m in map(expected.match, lines) if m]
    if not matched:
        errors.append("no refusal naming the dry run's estimate: expected a line like\n    "
                      + expected.pattern + "\n  got " + repr(lines))
    else:
        available = matched[0].group(2)
        if not bytes_of(available) < bytes_of(total):
            errors.append(f"the refusal names MemAvailable {available}, not below the {total} "
                          "the ranks need")

    steps = [l for l in log.splitlines() if "| consumed samples:" in l]
    if steps:
        errors.append(f"{len(steps)} training step line(s) ran, expected none: {steps[0]}")
    if "perf-launch: report written" in log:
        errors.append("a report was written")

    if errors:
        print("FAIL: " + sys.argv[2], file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        sys.exit(1)
    print(f"refusal OK: {lines[0]}", file=sys.stderr)


if __name__ == "__main__":
    main()
