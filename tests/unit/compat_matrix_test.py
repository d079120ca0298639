#!/usr/bin/env python3
"""scripts/compat_matrix, in two parts.

With tests/fake_perf_launch.py (no worker starts; about 4 s), the commands the GPU grids generate,
checked on a machine without a GPU:

- --device cuda at world size 1: every command runs the grid's base_cuda (-g from --gpu, the
  small llama3_bench_1p5b shape, -ng 1) and none has its ranks share the GPU; rows that need more
  ranks (TP 2, MoE EP 2) are listed as not run with the reason; step-time changes are timings
  (no note); the pages name the device, the GPU that ran and the world size;
- --device cuda --world 2: every command carries shardbench.ranks_per_gpu equal to its -ng (2,
  or 4 for a row that needs 4), the MoE row runs its GPU model, every cell is marked "ranks share
  one GPU, not a timing";
- --device cpu: a row the grid skips on CPU (fused kernels off) is listed with its reason, and
  no command names a GPU;
- --render of both GPU JSONs makes one page with a section each;
- --time-budget: a cell that would start after it is not run, and the JSON and page list it;
- --resume completes that grid: the earlier cell kept as it was, only the cells left out run; an
  earlier run with another step count, world size or row set is refused naming the field; its
  code fingerprint ignores results, docs, tests, benchmarks and markdown and follows every
  other tracked file;
- scripts/gpu_compat_matrix runs both GPU grids into RESULTS, five files, one page;
- bad input (--gpu on CPU, a grid without base_cuda, a bad on_device) exits 2 naming it.

With a real perf-launch, on a 3-row x 2-column grid (and one cell alone), 2 steps on 2 gloo ranks
(about 15 s):

- its JSON validates against results/compat_matrix.schema.json;
- a refused cell (NCCL user buffers on gloo) carries perf-launch's own refusal line;
- a cell broken on purpose (SHARDBENCH_FAULT=kill:1:2, rank 1 dies at step 2) is "fails" with
  the launcher's first error line, and the cells without the fault train;
- the markdown and HTML pages hold the marks and the footnote text;
- a cell past --cell-timeout is "fails" with "timed out";
- --compare exits 1 naming a cell that trained at the base and fails at the head, 0 with none;
- a bad flag exits 2 naming the flag, its value and what is accepted.

  tests/unit/compat_matrix_test.py [PERF_LAUNCH]    # without PERF_LAUNCH: the first part only
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
FAKE = os.path.join(ROOT, "tests", "fake_perf_launch.py")
REAL_GRID = os.path.join(ROOT, "scripts", "compat_matrix.grid.json")
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


def logged_argvs(path):
    with open(path) as f:
        return [json.loads(line)["argv"] for line in f if line.strip()]


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def ranks_per_gpu(argv):
    vals = [a.split("=", 1)[1] for a in argv if a.startswith("shardbench.ranks_per_gpu=")]
    return vals[0] if vals else None


def fake_run(tmp, name, args, env=None):
    """scripts/compat_matrix with the fake perf-launch; returns (result, matrix or None, argvs)."""
    out = os.path.join(tmp, name)
    log = os.path.join(tmp, name + ".argv")
    full_env = dict(os.environ, FAKE_PERF_LAUNCH_LOG=log, FAKE_PERF_LAUNCH_DEVICE="NVIDIA H200",
                    FAKE_PERF_LAUNCH_REFUSE="--nccl_ub", **(env or {}))
    r = run(["--perf-launch", FAKE, "--out", out] + args, timeout=120, env=full_env)
    matrix = None
    if os.path.exists(os.path.join(out, "compat_matrix.json")):
        with open(os.path.join(out, "compat_matrix.json")) as f:
            matrix = json.load(f)
    return r, matrix, logged_argvs(log) if os.path.exists(log) else []


FAKE_ROWS = "baseline,nccl_ub,tp_sp,moe_ep2,fused_kernels_off,checkpoint"


def fake_checks(tmp, schema):
    """The commands of the GPU grids, with the fake perf-launch."""
    # World size 1 on the one GPU.
    r, m, argvs = fake_run(tmp, "cuda1", ["--device", "cuda", "--gpu", "h200", "--rows", FAKE_ROWS,
                                          "--columns", "ddp,fsdp_optim_grads_params", "--pairs", "2"])
    check(r.returncode == 0 and m is not None, "cuda world 1: the grid run exits 0 (exit %d: %s)"
          % (r.returncode, r.stderr[-1500:]))
    if m is None:
        return
    errors = validate(m, schema, schema)
    check(not errors, "cuda world 1: the JSON validates against the schema: %s" % errors[:5])
    check(m["device"] == "cuda" and m["world"] == 1 and m["gpu"] == "h200"
          and m["device_names"] == ["NVIDIA H200"] and m["timing_note"] is None,
          "cuda world 1: device cuda, world 1, -g h200, the device that ran, no timing note: %r"
          % {k: m.get(k) for k in ("device", "world", "gpu", "device_names", "timing_note")})
    check(len(argvs) > 0 and all(flag(a, "-g") == "h200" and flag(a, "-mr") == "llama3_bench_1p5b"
                                 and "model.hidden_size=256" in a and flag(a, "-ng") == "1"
                                 and ranks_per_gpu(a) is None for a in argvs),
          "cuda world 1: every command is -g h200, the small llama3_bench_1p5b, -ng 1, and no "
          "shardbench.ranks_per_gpu (%d commands)" % len(argvs))
    skipped = {s["id"]: s["reason"] for s in m.get("skipped_rows", [])}
    check(set(skipped) == {"tp_sp", "moe_ep2"} and "needs 4 ranks" in skipped.get("tp_sp", "")
          and "needs 2 ranks" in skipped.get("moe_ep2", ""),
          "cuda world 1: the rows that need more ranks are not run, with the reason: %r" % skipped)
    cells = {(tuple(c["rows"]), c["column"]): c for c in m["cells"]}
    check(all(c["timing_note"] is None and c["world"] == 1 for c in m["cells"]),
          "cuda world 1: no cell carries a timing note")
    # Where each invocation's time went: a cell that trained printed its steps' lines; a refused
    # one never got to a step.
    trained = [c for c in m["cells"] if c["status"] == "trains"]
    refused = [c for c in m["cells"] if c["status"] == "refused"]
    check(trained and refused and all(len(c["timeline"]) == len(c["commands"]) for c in trained)
          and all(t["to_first_step_s"] is not None and t["steps_s"] >= 0
                  for c in trained for t in c["timeline"])
          and all(c["timeline"][0]["to_first_step_s"] is None for c in refused)
          and "where an invocation's time went" in r.stderr,
          "cuda world 1: each invocation's timeline (steps seen where the cell trained, none "
          "where refused), and the medians in the log: %r" % [c.get("timeline") for c in m["cells"]][:3])
    ub = cells.get((("nccl_ub",), "ddp"), {})
    check(ub.get("status") == "refused" and "ddp.disable_symmetric_registration=true"
          in " ".join(ub.get("commands", [])),
          "cuda world 1: the NCCL user-buffer row runs its GPU arguments and is refused: %r"
          % ub.get("commands"))
    ck = cells.get((("checkpoint",), "fsdp_optim_grads_params"), {})
    check(ck.get("status") == "trains" and len(ck.get("commands", [])) == 2,
          "cuda world 1: the checkpoint cell ran save then resume and trains")
    check(sum(1 for c in m["cells"] if c["kind"] == "pair") == 2, "cuda world 1: 2 pair cells")
    md = open(os.path.join(tmp, "cuda1", "compat_matrix.md")).read()
    check("on one GPU (`-g h200`, the device that ran: NVIDIA H200) at world size 1" in md
          and "### Rows not run in this grid" in md and "| TP 2 + SP (x DP 2) | needs 4 ranks" in md,
          "cuda world 1: the markdown names the GPU, the device that ran, the world size and "
          "the rows not run")
    check("are measurements on this GPU" in md and "cells at a time" not in md,
          "cuda world 1, one cell at a time: the changes against DDP are called measurements")
    page = open(os.path.join(tmp, "cuda1", "compat_matrix.html")).read()
    check("One GPU, world size 1" in page and "NVIDIA H200" in page,
          "cuda world 1: the HTML names the grid and the device")

    # World size 2: the ranks share the GPU.
    r, m2, argvs = fake_run(tmp, "cuda2", ["--device", "cuda", "--world", "2", "--rows", FAKE_ROWS,
                                           "--columns", "ddp,fsdp_optim_grads_params", "--pairs",
                                           "2", "--jobs", "3"])
    check(r.returncode == 0 and m2 is not None, "cuda world 2: the grid run exits 0 (exit %d: %s)"
          % (r.returncode, r.stderr[-1500:]))
    if m2 is None:
        return
    check(not validate(m2, schema, schema), "cuda world 2: the JSON validates against the schema")
    check(m2["gpu"] == "h100" and m2["world"] == 2 and m2["timing_note"] == "ranks share one GPU, "
          "not a timing" and not m2.get("skipped_rows"),
          "cuda world 2: -g h100 by default, world 2, the shared-GPU note, every row run")
    check(len(argvs) > 0 and all(ranks_per_gpu(a) is not None and ranks_per_gpu(a) == flag(a, "-ng")
                                 and flag(a, "-g") == "h100" for a in argvs),
          "cuda world 2: every command has shardbench.ranks_per_gpu equal to its -ng: %r" % sorted(
              {(flag(a, "-ng"), ranks_per_gpu(a)) for a in argvs}))
    worlds = {tuple(c["rows"]): c["world"] for c in m2["cells"] if c["kind"] == "single"}
    check(worlds.get(("baseline",)) == 2 and worlds.get(("tp_sp",)) == 4
          and worlds.get(("moe_ep2",)) == 2, "cuda world 2: 2 ranks, 4 for TP 2: %r" % worlds)
    # On CUDA, -tp 2 alone would set CUDA_DEVICE_MAX_CONNECTIONS=1 as upstream does, which Megatron
    # FSDP refuses: the GPU row asks for 32, as a user running TP with FSDP does.
    tp = [a for a in argvs if "-tp" in a]
    check(bool(tp) and all("env.CUDA_DEVICE_MAX_CONNECTIONS=32" in a for a in tp),
          "cuda world 2: every TP 2 command sets env.CUDA_DEVICE_MAX_CONNECTIONS=32: %r" % tp[:2])
    moe = [a for a in argvs if "-ep" in a]
    check(bool(moe) and all(flag(a, "-mr") == "moe_bench_3b" and flag(a, "-m") == "moe"
                            and "model.hidden_size=256" in a and "-sl" in a for a in moe),
          "cuda world 2: the MoE row runs its GPU model (moe_bench_3b, small) with the GPU base")
    check(all(c["timing_note"] == "ranks share one GPU, not a timing" for c in m2["cells"]),
          "cuda world 2: every cell is marked 'ranks share one GPU, not a timing'")
    md = open(os.path.join(tmp, "cuda2", "compat_matrix.md")).read()
    check("at world size 2 (rows that need more ranks: 4)" in md and "share one GPU under NCCL" in md
          and "shardbench.ranks_per_gpu=W" in md,
          "cuda world 2: the markdown says the ranks share one GPU, and at which world size")

    # CPU: the row the grid skips there, and no GPU anywhere.
    r, mc, argvs = fake_run(tmp, "cpu", ["--rows", "baseline,fused_kernels_off,moe_ep2",
                                         "--columns", "ddp"])
    check(r.returncode == 0 and mc is not None and mc["device"] == "cpu" and mc["gpu"] is None
          and [s["id"] for s in mc["skipped_rows"]] == ["fused_kernels_off"]
          and "CUDA" in mc["skipped_rows"][0]["reason"],
          "cpu: the fused-kernels row is not run, with the grid's reason: %r"
          % (mc or {}).get("skipped_rows"))
    check(len(argvs) == 2 and all(flag(a, "-g") == "cpu" and ranks_per_gpu(a) is None
                                  for a in argvs)
          and {flag(a, "-mr") for a in argvs} == {"llama3_tiny_cpu", "deepseek_v3_tiny_cpu"},
          "cpu: the two commands run -g cpu with the CPU recipes")

    # Both GPU grids on one page.
    md_path, html_path = os.path.join(tmp, "gpu.md"), os.path.join(tmp, "gpu.html")
    r = run(["--render", os.path.join(tmp, "cuda1", "compat_matrix.json"),
             os.path.join(tmp, "cuda2", "compat_matrix.json"), "--md", md_path, "--html", html_path])
    md = open(md_path).read() if r.returncode == 0 else ""
    check("# Compatibility matrix on GPU (measured)" in md and "## One GPU, world size 1" in md
          and "## 2 ranks sharing one GPU" in md and '<a id="m1n1">' in md
          and '<a id="m2n1">' in md and md.count("## The grid") == 1,
          "--render of both GPU grids: one page, a section each, footnotes apart (exit %d: %s)"
          % (r.returncode, r.stderr[-500:]))
    page = open(html_path).read() if r.returncode == 0 else ""
    check(page.count('data-i="') == len(m["cells"]) + len(m2["cells"])
          and "2 ranks sharing one GPU" in page,
          "--render: the HTML page holds every cell of both grids")

    # --time-budget: cells that would start after it are not run, and the pages say so.
    r, mt, argvs = fake_run(tmp, "budget", ["--device", "cuda", "--rows", "baseline,checkpoint",
                                            "--columns", "ddp,fsdp_optim", "--time-budget", "1"],
                            env={"FAKE_PERF_LAUNCH_SLEEP": "1.5"})
    md = open(os.path.join(tmp, "budget", "compat_matrix.md")).read() if mt else ""
    check(r.returncode == 0 and mt is not None and len(mt["cells"]) == 1
          and mt["not_run"] == ["baseline__fsdp_optim", "checkpoint__ddp", "checkpoint__fsdp_optim"]
          and not validate(mt, schema, schema) and "3 more cell(s) not run: the time budget" in md,
          "--time-budget 1 with 1.5 s cells: the first cell runs, the other 3 are listed as not "
          "run: %r" % (mt or {}).get("not_run"))

    # --resume: the budget-cut grid completed by a second run, which keeps the first run's cell
    # as it was and runs only the three it left out (5 invocations: the checkpoint cells save,
    # then resume).
    budget_json = os.path.join(tmp, "budget", "compat_matrix.json")
    r, mr, argvs = fake_run(tmp, "resumed", ["--device", "cuda", "--rows", "baseline,checkpoint",
                                             "--columns", "ddp,fsdp_optim", "--resume",
                                             budget_json])
    kept = (mt or {}).get("cells", [{}])[0]
    md = open(os.path.join(tmp, "resumed", "compat_matrix.md")).read() if mr else ""
    check(r.returncode == 0 and mr is not None and len(mr["cells"]) == 4 and not mr["not_run"]
          and mr["cells"][0] == kept and mr["resumed_from"]["cells"] == 1
          and mr["resumed_from"]["out_dirs"] == [mt["out_dir"]]
          and {tuple(c["rows"]) + (c["column"],) for c in mr["cells"][1:]}
          == {("baseline", "fsdp_optim"), ("checkpoint", "ddp"), ("checkpoint", "fsdp_optim")}
          and len(argvs) == 5 and not any("/budget/" in " ".join(a) for a in argvs)
          and not validate(mr, schema, schema) and "1 cell(s) come from those runs" in md,
          "--resume: the earlier run's cell is kept as it was, the 3 it left out run now (%d "
          "invocations), the JSON validates and the page says so: %r (exit %d: %s)" % (
              len(argvs), (mr or {}).get("resumed_from"), r.returncode, r.stderr[-600:]))
    for flag_args, field in ((["--steps", "4"], "steps"), (["--world", "2"], "world"),
                             (["--rows", "baseline"], "rows")):
        args = ["--device", "cuda", "--rows", "baseline,checkpoint", "--columns",
                "ddp,fsdp_optim", "--resume", budget_json]
        for i in range(0, len(flag_args), 2):
            if flag_args[i] in args:
                args[args.index(flag_args[i]) + 1] = flag_args[i + 1]
            else:
                args += flag_args[i:i + 2]
        r, _, argvs = fake_run(tmp, "resume_" + field, args)
        check(r.returncode == 2 and ("--resume %s: %s is" % (budget_json, field)) in r.stderr
              and "accepted: a matrix written with the same " + field in r.stderr and not argvs,
              "--resume of a run with another %s exits 2 naming it, running nothing: %r"
              % (field, r.stderr.strip()[-300:]))

    # scripts/gpu_compat_matrix, as on a GPU machine but with the fake perf-launch: both grids,
    # at most 6 files in RESULTS, one page with both sections.
    results = os.path.join(tmp, "gpu_results")
    r = subprocess.run([os.path.join(ROOT, "scripts", "gpu_compat_matrix")], capture_output=True,
                       text=True, timeout=120, env=dict(
                           os.environ, PERF_LAUNCH=FAKE, GPU="h200", RESULTS=results,
                           CELLS_DIR=os.path.join(tmp, "gpu_cells"), ROWS="baseline,tp_sp",
                           COLUMNS="ddp,fsdp2", PAIRS="1", FAKE_PERF_LAUNCH_DEVICE="NVIDIA H200"))
    files = sorted(os.listdir(results)) if os.path.isdir(results) else []
    check(r.returncode == 0 and files == ["cells.tar.gz", "compat_matrix_shared2.json",
                                          "compat_matrix_ws1.json", "compatibility-gpu.html",
                                          "compatibility-gpu.md"],
          "scripts/gpu_compat_matrix writes both grids, the page and the cells' logs: %r (exit %d: "
          "%s)" % (files, r.returncode, r.stderr[-800:]))
    if r.returncode == 0:
        ws1 = json.load(open(os.path.join(results, "compat_matrix_ws1.json")))
        sh = json.load(open(os.path.join(results, "compat_matrix_shared2.json")))
        md = open(os.path.join(results, "compatibility-gpu.md")).read()
        check(ws1["world"] == 1 and ws1["gpu"] == "h200" and ws1["time_budget_s"] == 150
              and [x["id"] for x in ws1["skipped_rows"]] == ["tp_sp"] and sh["world"] == 2
              and sh["time_budget_s"] == 210 and len(sh["cells"]) == 4
              and ws1["jobs"] == 8 and sh["jobs"] == 2
              and "## One GPU, world size 1" in md and "## 2 ranks sharing one GPU" in md
              and "with 8 cells at a time other cells' kernels shared the GPU" in md,
              "scripts/gpu_compat_matrix: world 1 (-g h200, TP skipped; 8 cells at a time, said) "
              "and 2 ranks sharing (2 cells at a time), each with its time budget, on one page")
    r = subprocess.run([os.path.join(ROOT, "scripts", "gpu_compat_matrix")], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, GPU="h100", GRIDS="1 3"))
    check(r.returncode == 2 and "GRIDS='1 3'" in r.stderr and "accepted: 1, shared" in r.stderr,
          "scripts/gpu_compat_matrix GRIDS='1 3' exits 2 naming it: %r" % r.stderr.strip())

    # Bad input.
    r = run(["--gpu", "h200", "--perf-launch", FAKE, "--out", os.path.join(tmp, "bad")])
    check(r.returncode == 2 and "--gpu h200" in r.stderr and "--device cuda" in r.stderr,
          "--gpu without --device cuda exits 2 naming it: %r" % r.stderr.strip())
    grid = os.path.join(tmp, "cpu_only_grid.json")
    with open(grid, "w") as f:
        json.dump(GRID, f)
    r = run(["--device", "cuda", "--grid", grid, "--perf-launch", FAKE, "--out",
             os.path.join(tmp, "bad")])
    check(r.returncode == 2 and "base_cuda" in r.stderr and "--device cuda" in r.stderr,
          "a grid without base_cuda under --device cuda exits 2 naming it: %r" % r.stderr.strip())
    bad = copy.deepcopy(GRID)
    bad["rows"][0]["on_device"] = {"gpu": {"skip": "x"}}
    with open(grid, "w") as f:
        json.dump(bad, f)
    r = run(["--grid", grid, "--perf-launch", FAKE, "--out", os.path.join(tmp, "bad")])
    check(r.returncode == 2 and "on_device key 'gpu'" in r.stderr and "cpu, cuda" in r.stderr,
          "an on_device key that is no device exits 2 naming it: %r" % r.stderr.strip())


def error_line_checks():
    # A ranks-sharing cell's log (an H100 run, results/h100/compat_matrix_2026-12-06): the
    # banner line says "failure handling", the error is the NCCL line after it.
    from importlib.machinery import SourceFileLoader
    cm = SourceFileLoader("compat_matrix", os.path.join(ROOT, "scripts", "compat_matrix")).load_module()
    log = ("perf-launch: functional run: shardbench.ranks_per_gpu=2, 2 ranks on 1 GPU(s), NCCL over "
           "loopback sockets; step times and TFLOP/s below are not performance numbers (losses, "
           "memory per rank and failure handling are real)\n"
           " iteration        1/       3 | lm loss: 1.2E+01 | number of nan iterations:   0 |\n"
           "perf-launch: rank 1: NCCL error in: NCCLUtils.cpp:93, unhandled cuda error\n"
           "Cuda failure 'out of memory'\n")
    got = cm.first_error_line(log)
    check(got == "perf-launch: rank 1: NCCL error in: NCCLUtils.cpp:93, unhandled cuda error",
          "the first error line skips the functional-run banner: %r" % got)


def code_fingerprint_checks():
    # --resume's code_sha256 on a scratch repository: results, docs, tests, benchmarks and
    # markdown, committed or not, leave it as it is; a change to any other tracked file,
    # committed or not, moves it.
    from importlib.machinery import SourceFileLoader
    cm = SourceFileLoader("compat_matrix", os.path.join(ROOT, "scripts", "compat_matrix")).load_module()
    repo = tempfile.mkdtemp(prefix="compat_matrix_fp.")
    try:
        def git(*args):
            subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"]
                           + list(args), check=True, capture_output=True)

        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(repo, path)), exist_ok=True)
            with open(os.path.join(repo, path), "w") as f:
                f.write(text)

        git("init", "-q")
        for path in ("engine.cpp", "scripts/grid.json", "docs/a.md", "results/r/report.json",
                     "README.md", "scripts/notes.md", "tests/unit/a_test.cpp",
                     "benchmarks/b_bench.cpp"):
            write(path, path + "\n")
        git("add", "-A")
        git("commit", "-q", "-m", "a")
        base = cm.code_fingerprint(repo)
        write("docs/a.md", "more prose\n")
        write("results/r/report.json", "{}\n")
        write("README.md", "another front page\n")
        write("scripts/notes.md", "a note beside the code\n")
        write("tests/unit/a_test.cpp", "a looser tolerance\n")
        write("benchmarks/b_bench.cpp", "another size\n")
        prose_dirty = cm.code_fingerprint(repo)
        git("commit", "-q", "-am", "b")
        prose_committed = cm.code_fingerprint(repo)
        write("scripts/grid.json", "changed\n")
        code_dirty = cm.code_fingerprint(repo)
        git("commit", "-q", "-am", "c")
        code_committed = cm.code_fingerprint(repo)
        check(base is not None and base == prose_dirty == prose_committed
              and len({base, code_dirty, code_committed}) == 3,
              "code_sha256: unchanged by results, docs, tests, benchmarks and markdown (committed or "
              "not), moved by a grid change, uncommitted and committed")
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def main():
    if len(sys.argv) not in (1, 2):
        print(__doc__)
        return 2
    with open(SCHEMA) as f:
        schema = json.load(f)
    error_line_checks()
    code_fingerprint_checks()
    tmp = tempfile.mkdtemp(prefix="compat_matrix_test.")
    try:
        fake_checks(tmp, schema)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if len(sys.argv) == 1:
        print("%d check(s) failed" % len(FAILURES) if FAILURES else "all checks passed (fake "
              "perf-launch only)")
        return 1 if FAILURES else 0
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
