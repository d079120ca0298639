#!/usr/bin/env python3
"""scripts/compat_matrix on a 3-row x 2-column grid (and one cell alone), 2 steps on 2 gloo ranks (about 15 s):

- its JSON validates against results/compat_matrix.schema.json;
- a refused cell (NCCL user buffers on gloo) carries perf-launch's own refusal line;
- a cell broken on purpose (SHARDBENCH_FAULT=kill:1:2, rank 1 dies at step 2) is "fails" with
  the launcher's first error line, and the cells without the fault train;
- the markdown and HTML pages hold the marks and the footnote text;
- a cell past --cell-timeout is "fails" with "timed out";
- --compare exits 1 naming a cell that trained at the base and fails at the head, 0 with none;
- a bad flag exits 2 naming the flag, its value and what is accepted.

  tests/unit/compat_matrix_test.py PERF_LAUNCH
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "compat_matrix")
SCHEMA = os.path.join(ROOT, "results", "compat_matrix.schema.json")
FAILURES = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILURES.append(what)


# A small JSON Schema (2020-12) checker, the keywords results/*.schema.json use: type, required,
# properties, items, additionalProperties, anyOf, enum, const, minimum, minItems, maxItems and
# local $ref. The C++ reports have harness/report/schema_check.cpp; this is its Python twin.
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def type_ok(value, name):
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[name])


def validate(value, schema, root, path="", errors=None):
    errors = [] if errors is None else errors
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return validate(value, target, root, path, errors)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(type_ok(value, n) for n in names):
            errors.append("%s: %r is not %s" % (path or "/", value, names))
            return errors
    if "const" in schema and value != schema["const"]:
        errors.append("%s: %r is not %r" % (path or "/", value, schema["const"]))
    if "enum" in schema and value not in schema["enum"]:
        errors.append("%s: %r not in %r" % (path or "/", value, schema["enum"]))
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        errors.append("%s: %r < %r" % (path or "/", value, schema["minimum"]))
    if "anyOf" in schema and all(validate(value, s, root, path) for s in schema["anyOf"]):
        errors.append("%s: matches no anyOf branch" % (path or "/"))
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append("%s: missing %r" % (path or "/", key))
        props = schema.get("properties", {})
        for key, item in value.items():
            if key in props:
                validate(item, props[key], root, path + "/" + key, errors)
            elif schema.get("additionalProperties") is False:
                errors.append("%s: unexpected %r" % (path or "/", key))
            elif isinstance(schema.get("additionalProperties"), dict):
                validate(item, schema["additionalProperties"], root, path + "/" + key, errors)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            errors.append("%s: %d items, outside [%s, %s]" % (
                path or "/", len(value), schema.get("minItems"), schema.get("maxItems")))
        if "items" in schema:
            for i, item in enumerate(value):
                validate(item, schema["items"], root, "%s/%d" % (path, i), errors)
    return errors


GRID = {
    "base": {"model": ["-m", "llama", "-mr", "llama3_tiny_cpu"], "args": ["-g", "cpu"]},
    "columns": [
        {"id": "ddp", "title": "DDP", "baseline": False,
         "args": ["ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false"]},
        {"id": "fsdp_optim_grads_params", "title": "Megatron FSDP optim_grads_params",
         "args": ["--use_megatron_fsdp", "true",
                  "ddp.data_parallel_sharding_strategy=optim_grads_params"]},
    ],
    "rows": [
        {"id": "baseline", "title": "baseline", "args": []},
        {"id": "nccl_ub", "title": "NCCL user buffers", "args": ["--nccl_ub", "true"]},
        {"id": "rank_dies", "title": "rank 1 dies at step 2 (drill)", "args": [],
         "env": {"SHARDBENCH_FAULT": "kill:1:2"}},
        # Run alone below, past --cell-timeout: rank 1 stops at step 1, and perf-launch's own
        # hang detection waits longer than the cell may take.
        {"id": "rank_hangs", "title": "rank 1 hangs at step 1 (drill)",
         "args": ["shardbench.hang_timeout_s=600"], "env": {"SHARDBENCH_FAULT": "hang:1:1"}},
    ],
}


def run(args, **kw):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True, **kw)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    perf_launch = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="compat_matrix_test.")
    try:
        grid = os.path.join(tmp, "grid.json")
        with open(grid, "w") as f:
            json.dump(GRID, f)
        out = os.path.join(tmp, "out")
        r = run(["--grid", grid, "--perf-launch", perf_launch, "--steps", "2", "--out", out,
                 "--rows", "baseline,nccl_ub,rank_dies", "--cell-timeout", "60"], timeout=300)
        check(r.returncode == 0, "the grid run exits 0 (exit %d: %s)" % (r.returncode, r.stderr[-2000:]))
        with open(os.path.join(out, "compat_matrix.json")) as f:
            matrix = json.load(f)
        with open(SCHEMA) as f:
            schema = json.load(f)
        errors = validate(matrix, schema, schema)
        check(not errors, "the JSON validates against the schema: %s" % errors[:5])
        broken = copy.deepcopy(matrix)
        broken["cells"][0]["status"] = "works"
        del broken["counts"]
        check(len(validate(broken, schema, schema)) == 2, "the checker sees a bad status and a missing field")
        cells = {(c["rows"][0], c["column"]): c for c in matrix["cells"]}
        check(len(cells) == 6, "6 cells")
        for col in ("ddp", "fsdp_optim_grads_params"):
            check(cells[("baseline", col)]["status"] == "trains", "baseline x %s trains" % col)
        fsdp = cells[("baseline", "fsdp_optim_grads_params")]
        check((fsdp["parity"] or {}).get("verdict") == "ok", "the FSDP cell read parity ok from its report")
        check(fsdp["timing_note"] == "CPU, not a timing", "CPU timings are marked")
        check(cells[("baseline", "ddp")]["parity"] is None, "the DDP column has no parity")
        for col in ("ddp", "fsdp_optim_grads_params"):
            cell = cells[("nccl_ub", col)]
            log = open(os.path.join(out, "cells", cell["id"], "log_0.txt")).read()
            line = [l for l in log.splitlines() if l.startswith("perf-launch: error: ")]
            check(cell["status"] == "refused" and cell["exit_code"] == 2, "nccl_ub x %s is refused" % col)
            check(bool(line) and cell["reason"] == line[0][len("perf-launch: error: "):]
                  and "ddp.nccl_ub" in cell["reason"],
                  "nccl_ub x %s carries perf-launch's refusal line: %r" % (col, cell["reason"]))
            cell = cells[("rank_dies", col)]
            check(cell["status"] == "fails" and cell["exit_code"] not in (0, 2, None),
                  "the faulted cell x %s fails (exit %s)" % (col, cell["exit_code"]))
            # Which line comes first is a race between rank 0's collective error and the
            # launcher's report of rank 1's death: the reason is the first, whichever it is.
            log = open(os.path.join(out, "cells", cell["id"], "log_0.txt")).read()
            errors = [l.strip() for l in log.splitlines()
                      if l.startswith("perf-launch: rank") and ("failed" in l or "killed" in l)]
            check("rank 1 (pid" in log and "killed by signal 9" in log,
                  "the faulted cell x %s: the launcher saw rank 1 die" % col)
            check(bool(errors) and cell["reason"] == "exit %d: %s" % (cell["exit_code"], errors[0]),
                  "the faulted cell x %s carries the first error line: %r" % (col, cell["reason"]))
        md = open(os.path.join(out, "compat_matrix.md")).read()
        check("✗" in md and "! [" in md and "✓" in md and "rank 1 dies" in md
              and "NCCL user buffers are CUDA memory" in md, "the markdown has the marks and footnotes")
        page = open(os.path.join(out, "compat_matrix.html")).read()
        check(page.count('data-i="') == 6 and "<script>" in page and "sort" in page,
              "the HTML page has 6 clickable cells and its script")
        # --compare: the head's baseline x ddp fails where the base trained.
        head = copy.deepcopy(matrix)
        for c in head["cells"]:
            if c["id"] == "baseline__ddp":
                c["status"], c["reason"] = "fails", "exit 1: injected for the test"
        base_path, head_path = os.path.join(tmp, "base.json"), os.path.join(tmp, "head.json")
        json.dump(matrix, open(base_path, "w"))
        json.dump(head, open(head_path, "w"))
        r = run(["--compare", base_path, head_path])
        check(r.returncode == 1 and "regression: baseline x ddp" in r.stdout,
              "--compare exits 1 naming the regressed cell (exit %d: %s)" % (r.returncode, r.stdout))
        r = run(["--compare", base_path, base_path])
        check(r.returncode == 0 and "0 regression(s)" in r.stdout, "--compare exits 0 with none")
        # A cell past --cell-timeout: "fails" with "timed out", its perf-launch stopped.
        out2 = os.path.join(tmp, "out_timeout")
        r = run(["--grid", grid, "--perf-launch", perf_launch, "--steps", "2", "--out", out2,
                 "--rows", "rank_hangs", "--columns", "ddp", "--cell-timeout", "3"], timeout=120)
        cell = json.load(open(os.path.join(out2, "compat_matrix.json")))["cells"][0]
        check(r.returncode == 0 and cell["status"] == "fails" and cell["reason"] == "timed out"
              and cell["exit_code"] is None and cell["seconds"] < 30,
              "a cell past --cell-timeout fails, timed out: %r" % cell["reason"])
        check(subprocess.run(["pgrep", "-f", out2], capture_output=True).returncode == 1,
              "no process of the timed-out cell is left")
        r = run(["--world", "3"])
        check(r.returncode == 2 and "--world" in r.stderr and "3" in r.stderr and "2, 4" in r.stderr,
              "--world 3 exits 2 naming the flag, value and choices: %r" % r.stderr.strip())
        r = run(["--rows", "nosuchrow", "--grid", grid, "--perf-launch", perf_launch, "--out", out])
        check(r.returncode == 2 and "nosuchrow" in r.stderr and "baseline" in r.stderr,
              "an unknown row exits 2 naming it and the accepted ids: %r" % r.stderr.strip())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d check(s) failed" % len(FAILURES) if FAILURES else "all checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
