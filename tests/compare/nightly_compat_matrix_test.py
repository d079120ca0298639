#!/usr/bin/env python3
"""scripts/nightly --compat-matrix with tests/fake_perf_launch.py as both sides' perf-launch (no
worker starts) and a perf-compare that passes, so that only the compatibility gate decides; a
few seconds:

- base and head alike: the nightly exits 0, each side's matrix JSON is stored under
  <folder>/compat_matrix/, and no cell report lies in a results folder (perf-compare reads every
  report under it);
- the head's perf-launch refuses the FSDP double buffer: the nightly exits 1 and names each cell
  that trained at the base and is refused at the head, one line each;
- no base run now: the head is compared with the baseline branch's newest stored matrix, and the
  same regression exits 1;
- a bad --matrix-args exits 2 naming the flag and its value.

  tests/compare/nightly_compat_matrix_test.py
"""
import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NIGHTLY = os.path.join(ROOT, "scripts", "nightly")
FAKE = os.path.join(ROOT, "tests", "fake_perf_launch.py")
FAILURES = []
MATRIX_ARGS = "--rows baseline,double_buffer --columns ddp,fsdp_optim --steps 2"


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILURES.append(what)


def script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def nightly(tmp, args):
    env = dict(os.environ, SHARDBENCH_CACHE=os.path.join(tmp, "cache"))
    for key in ("FAKE_PERF_LAUNCH_REFUSE", "FAKE_PERF_LAUNCH_LOG"):
        env.pop(key, None)
    return subprocess.run([NIGHTLY, "--results", os.path.join(tmp, "results"), "--gpu", "cpu",
                           "--num-gpus", "2", "--recipes", "llama3_tiny_cpu", "--strategies", "ddp",
                           "--steps", "2", "--repeats", "1", "--cpu-scheduling", "default",
                           "--perf-compare", os.path.join(tmp, "perf-compare"), "--compat-matrix",
                           "--matrix-args", MATRIX_ARGS] + args,
                          capture_output=True, text=True, timeout=300, env=env)


def regressions(stderr):
    return sorted(re.findall(r"^\[nightly\] compat_matrix: regression: (\S+ x \S+):", stderr,
                             re.MULTILINE))


def main():
    tmp = tempfile.mkdtemp(prefix="nightly_compat_matrix_test.")
    try:
        script(os.path.join(tmp, "perf-compare"), "#!/bin/sh\nexit 0\n")
        base = script(os.path.join(tmp, "base-perf-launch"),
                      '#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, FAKE))
        head_ok = script(os.path.join(tmp, "head-ok-perf-launch"),
                         '#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, FAKE))
        head_bad = script(os.path.join(tmp, "head-bad-perf-launch"),
                          '#!/bin/sh\nFAKE_PERF_LAUNCH_REFUSE=ddp.fsdp_double_buffer=true '
                          'exec "%s" "%s" "$@"\n' % (sys.executable, FAKE))
        results = os.path.join(tmp, "results")

        # Base and head alike.
        r = nightly(tmp, ["--baseline-perf-launch", base, "--perf-launch", head_ok,
                          "--baseline", "main", "--branch", "same", "--date", "d1"])
        base_json = os.path.join(results, "main", "d1", "compat_matrix", "compat_matrix.json")
        head_json = os.path.join(results, "same", "d1", "compat_matrix", "compat_matrix.json")
        check(r.returncode == 0 and os.path.isfile(base_json) and os.path.isfile(head_json)
              and "0 regression(s) in 4 cells compared" in r.stderr,
              "base and head alike: exit 0, both matrices stored and compared (exit %d: %s)"
              % (r.returncode, r.stderr[-1500:]))
        cell_reports = glob.glob(os.path.join(results, "**", "report_*.json"), recursive=True)
        check(not cell_reports, "no cell report lies under the results folder: %r" % cell_reports[:3])

        # The head refuses the double buffer: both of its cells regress, each named.
        r = nightly(tmp, ["--baseline-perf-launch", base, "--perf-launch", head_bad,
                          "--baseline", "main", "--branch", "bad", "--date", "d2"])
        check(r.returncode == 1 and regressions(r.stderr) == ["double_buffer x ddp",
                                                              "double_buffer x fsdp_optim"]
              and "2 regression(s) in 4 cells compared" in r.stderr,
              "the head refuses the double buffer: exit 1 naming both cells: %r (exit %d: %s)"
              % (regressions(r.stderr), r.returncode, r.stderr[-1500:]))
        check("refused at the head: ddp.fsdp_double_buffer=true: refused by the fake" in r.stderr,
              "each regression line carries the head's refusal")
        check(r.stderr.rstrip().splitlines()[-1] == "[nightly] compatibility regression(s): "
              "double_buffer x ddp; double_buffer x fsdp_optim",
              "the nightly's last line names the regressed cells: %r"
              % r.stderr.rstrip().splitlines()[-1:])

        # No base run now: the baseline branch's newest stored matrix (main/d2) is the base.
        r = nightly(tmp, ["--perf-launch", head_bad, "--baseline", "main", "--branch", "bad",
                          "--date", "d3"])
        check(r.returncode == 1 and regressions(r.stderr) == ["double_buffer x ddp",
                                                              "double_buffer x fsdp_optim"]
              and os.path.join(results, "main", "d2", "compat_matrix", "compat_matrix.json")
              in r.stderr,
              "against the stored baseline matrix: exit 1 naming both cells (exit %d: %s)"
              % (r.returncode, r.stderr[-1500:]))

        # A bad grid argument is bad input.
        env_args = ["--perf-launch", head_ok, "--baseline", "main", "--branch", "x", "--date", "d4",
                    "--matrix-args", "--rows nosuchrow"]
        r = nightly(tmp, env_args)
        check(r.returncode == 2 and "--rows nosuchrow" in r.stderr and "nosuchrow" in r.stderr,
              "--matrix-args '--rows nosuchrow' exits 2 naming it: %r" % r.stderr[-600:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d check(s) failed" % len(FAILURES) if FAILURES else "all checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
