#!/usr/bin/env python3
"""The eager FSDP2 peer's CPU smoke test (ctest: peer_moe_fsdp2_eager).

  tests/peers/moe_fsdp2_eager_test.py [PYTHON]   # PYTHON: the interpreter with torch (default: this one)

Runs scripts/peers/moe_fsdp2_eager.py at its --tiny shape on CPU (gloo, fp32): one rank with two
micro-batches per step, then two ranks under torch.distributed.run. Each report must hold every
field with finite losses near ln(vocab) and one time per step; a refused flag must exit 2 naming
the flag. Seconds.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER = os.path.join(ROOT, "scripts", "peers", "moe_fsdp2_eager.py")
FIELDS = ["schema", "status", "model", "experts_path", "dtype", "fsdp2", "optimizer", "world_size",
          "micro_batch_size", "global_batch_size", "grad_accum", "seq_length", "steps", "warmup",
          "step_ms", "step_ms_median", "step_ms_mean", "tokens_per_s_per_gpu", "loss", "aux_loss",
          "grad_norm", "peak_memory_allocated_bytes", "peak_memory_reserved_bytes", "gpu_name",
          "torch_version", "env", "command"]


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def check_report(path, world, grad_accum, steps):
    with open(path) as f:
        r = json.load(f)
    missing = [k for k in FIELDS if k not in r]
    assert not missing, f"report lacks {missing}"
    assert r["status"] == "ok", r["status"]
    assert r["world_size"] == world and r["grad_accum"] == grad_accum, (r["world_size"],
                                                                         r["grad_accum"])
    assert r["experts_path"] in ("grouped_mm", "loop"), r["experts_path"]
    assert r["optimizer"]["impl"] in ("fused", "foreach"), r["optimizer"]
    assert len(r["step_ms"]) == steps and len(r["loss"]) == steps, (r["step_ms"], r["loss"])
    assert r["step_ms_median"] > 0 and r["tokens_per_s_per_gpu"] > 0
    ln_vocab = math.log(r["model"]["vocab"])
    for loss in r["loss"]:
        assert math.isfinite(loss) and abs(loss - ln_vocab) < 0.5, (loss, ln_vocab)
    assert all(math.isfinite(a) and a > 0 for a in r["aux_loss"]), r["aux_loss"]
    assert "--tiny" in r["command"], r["command"]


def main():
    py = sys.argv[1] if len(sys.argv) > 1 else sys.executable
    tiny = ["--device", "cpu", "--tiny", "--steps", "3", "--warmup", "1"]
    with tempfile.TemporaryDirectory() as tmp:
        one = os.path.join(tmp, "one.json")
        rc, out = run([py, PEER, *tiny, "--micro_batch_size", "1", "--global_batch_size", "2",
                       "--out", one])
        assert rc == 0, f"one rank exited {rc}:\n{out}"
        check_report(one, world=1, grad_accum=2, steps=3)

        two = os.path.join(tmp, "two.json")
        rc, out = run([py, "-m", "torch.distributed.run", "--nproc_per_node", "2", PEER, *tiny,
                       "--global_batch_size", "4", "--out", two])
        assert rc == 0, f"two ranks exited {rc}:\n{out}"
        check_report(two, world=2, grad_accum=1, steps=3)

        rc, out = run([py, PEER, "--device", "cpu", "--tiny", "--steps", "2", "--warmup", "2",
                       "--out", os.path.join(tmp, "refused.json")])
        assert rc == 2 and "--warmup=2: accepted" in out, f"exit {rc}:\n{out}"
        assert not os.path.exists(os.path.join(tmp, "refused.json"))
    print("peer_moe_fsdp2_eager: ok")


if __name__ == "__main__":
    main()
