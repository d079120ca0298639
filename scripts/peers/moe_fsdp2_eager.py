#!/usr/bin/env python3
"""The eager FSDP2 peer of shardbench's MoE bench recipe (docs/moe.md, "The eager FSDP2 peer").

shardbench's `moe_bench_3b` model written as a PyTorch user would write it: nn.Modules in bf16
through FSDP2's fully_shard (one unit per transformer block, plus the root), experts as stacked
weights run by torch._grouped_mm, AdamW, F.cross_entropy on fp32 logits. It times the training
steps with CUDA events and writes one JSON report.

  python scripts/peers/moe_fsdp2_eager.py --steps 15 --out peer.json
  torchrun --nproc_per_node 2 scripts/peers/moe_fsdp2_eager.py --global_batch_size 4 --out p.json
  python scripts/peers/moe_fsdp2_eager.py --device cpu --tiny --steps 3 --warmup 1 --out p.json

Exit status: 0; 2 for a refused flag; 3 when a step runs out of device memory; 4 for a loss that
is not finite (the report is written in the last two cases, with its status).
"""
import os

# moe_bench_3b's perf recipe sets these (workloads/moe/moe_recipes.cpp); before torch loads CUDA.
RECIPE_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "32",
              "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
for _k, _v in RECIPE_ENV.items():
    os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shlex  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402

SCHEMA = "shardbench.peer.moe_fsdp2_eager/1"


@dataclass
class Dims:
    """MoeDims of workloads/moe/moe_models.cpp, GQA and all-MoE layers only."""
    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    seq_length: int
    num_experts: int
    moe_ffn_hidden: int
    router_topk: int
    rope_base: float = 1e6
    norm_eps: float = 1e-6
    init_std: float = 0.02
    aux_loss_coeff: float = 1e-3  # qwen3_moe_router: aux_loss (switch), coefficient 1e-3


# moe_bench_3b_dims: qwen3_30b_a3b_dims cut to 8 layers of 64 experts (width 768, top-8).
BENCH = Dims(num_layers=8, hidden=2048, heads=32, kv_heads=4, head_dim=128, vocab=151936,
             seq_length=4096, num_experts=64, moe_ffn_hidden=768, router_topk=8)
# The same architecture at CPU-test size.
TINY = Dims(num_layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, vocab=512,
            seq_length=32, num_experts=8, moe_ffn_hidden=32, router_topk=2)

# shardbench's defaults for the recipe (harness/config/config.hpp, OptimizerConfig and rng).
LR, MIN_LR, BETAS, EPS, WEIGHT_DECAY, CLIP_GRAD = 3e-4, 3e-5, (0.9, 0.95), 1e-8, 0.1, 1.0
LR_WARMUP_ITERS = 2000  # apply_pretrain_common (harness/config/recipes.cpp)
SEED = 1234
BALANCE_SEED = 42  # the forced-balancing generator's seed, plus the rank


class Refused(Exception):
    pass


def refuse(flag, value, accepted):
    raise Refused(f"{flag}={value}: accepted {accepted}")


# ---- Model ----------------------------------------------------------------------------------


def rope_tables(d, device):
    half = d.head_dim // 2
    inv_freq = d.rope_base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / d.head_dim)
    freqs = torch.outer(torch.arange(d.seq_length, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().float().to(device), emb.sin().float().to(device)


def apply_rope(x, cos, sin):
    """x [B, S, heads, D]; RoPE on non-interleaved halves."""
    s, dim = x.size(1), x.size(-1)
    cos = cos[:s].to(x.dtype).view(1, s, 1, dim)
    sin = sin[:s].to(x.dtype).view(1, s, 1, dim)
    rotated = torch.cat([-x[..., dim // 2:], x[..., :dim // 2]], -1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d
        q_dim, kv_dim = d.heads * d.head_dim, d.kv_heads * d.head_dim
        self.input_norm = nn.RMSNorm(d.hidden, eps=d.norm_eps)
        self.qkv = nn.Linear(d.hidden, q_dim + 2 * kv_dim, bias=False)  # [q; k; v]
        self.q_norm = nn.RMSNorm(d.head_dim, eps=d.norm_eps)
        self.k_norm = nn.RMSNorm(d.head_dim, eps=d.norm_eps)
        self.proj = nn.Linear(q_dim, d.hidden, bias=False)

    def forward(self, x, cos, sin):
        d = self.d
        b, s, _ = x.shape
        q_dim, kv_dim = d.heads * d.head_dim, d.kv_heads * d.head_dim
        q, k, v = self.qkv(self.input_norm(x)).split([q_dim, kv_dim, kv_dim], -1)
        q = self.q_norm(q.view(b, s, d.heads, d.head_dim))  # per head, before RoPE
        k = self.k_norm(k.view(b, s, d.kv_heads, d.head_dim))
        q = apply_rope(q, cos, sin).transpose(1, 2)
        k = apply_rope(k, cos, sin).transpose(1, 2)
        v = v.view(b, s, d.kv_heads, d.head_dim).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=d.kv_heads != d.heads)
        return self.proj(o.transpose(1, 2).reshape(b, s, q_dim))


class MoE(nn.Module):
    """Router (fp32, top-k of the logits then softmax over k, switch aux loss, forced balancing)
    and the routed experts (SwiGLU, probs applied before fc2)."""

    def __init__(self, d, experts_path):
        super().__init__()
        self.d = d
        self.experts_path = experts_path
        e, h, f = d.num_experts, d.hidden, d.moe_ffn_hidden
        self.pre_mlp_norm = nn.RMSNorm(h, eps=d.norm_eps)
        self.router = nn.Parameter(torch.empty(e, h))
        self.w1 = nn.Parameter(torch.empty(e, 2 * f, h))  # gate and up, fused
        self.w2 = nn.Parameter(torch.empty(e, h, f))
        self.balance_gen = None

    def route(self, h):
        d = self.d
        logits = F.linear(h.float(), self.router.float())
        # Forced load balancing: random logits forward, the real logits' gradient backward.
        random = torch.randn(logits.shape, generator=self.balance_gen, device=logits.device,
                             dtype=logits.dtype)
        logits = logits + (random - logits).detach()
        top_logits, idx = logits.topk(d.router_topk, dim=1)
        probs = top_logits.softmax(-1)
        # switch_load_balancing_loss_func: coeff * E / (k T^2) * sum_i P_i c_i.
        t = logits.size(0)
        scores = logits.softmax(-1)
        counts = torch.zeros_like(scores).scatter_(1, idx, 1.0).sum(0).detach()
        aux = (scores.sum(0) * counts).sum() * (d.num_experts * d.aux_loss_coeff
                                                / (d.router_topk * t * t))
        return probs, idx, aux

    def experts(self, x, probs, counts):
        f = self.d.moe_ffn_hidden
        if self.experts_path == "grouped_mm":
            offs = counts.cumsum(0).to(torch.int32)
            g = torch._grouped_mm(x, self.w1.transpose(-2, -1), offs=offs)
            act = F.silu(g[:, :f]) * g[:, f:]
            act = (act.float() * probs.unsqueeze(-1)).to(x.dtype)
            return torch._grouped_mm(act, self.w2.transpose(-2, -1), offs=offs)
        outs = []
        sizes = counts.tolist()
        for e, (xe, pe) in enumerate(zip(x.split(sizes), probs.split(sizes))):
            g = xe @ self.w1[e].t()
            act = F.silu(g[:, :f]) * g[:, f:]
            act = (act.float() * pe.unsqueeze(-1)).to(x.dtype)
            outs.append(act @ self.w2[e].t())
        return torch.cat(outs)

    def forward(self, x):
        b, s, hdim = x.shape
        h = self.pre_mlp_norm(x).reshape(-1, hdim)
        if self.balance_gen is None:
            self.balance_gen = torch.Generator(device=h.device)
            self.balance_gen.manual_seed(BALANCE_SEED + (dist.get_rank() if dist.is_initialized()
                                                         else 0))
        probs, idx, aux = self.route(h)
        k = self.d.router_topk
        flat = idx.reshape(-1)
        order = flat.argsort(stable=True)  # expert-major rows, token order inside an expert
        token_of_row = order // k
        # Rows per expert without a host sync (bincount would read the maximum back).
        counts = torch.histc(flat.float(), bins=self.d.num_experts, min=0,
                             max=self.d.num_experts).long()
        y = self.experts(h.index_select(0, token_of_row), probs.reshape(-1)[order], counts)
        out = torch.zeros_like(h).index_add_(0, token_of_row, y)
        return out.view(b, s, hdim), aux


class Block(nn.Module):
    def __init__(self, d, experts_path):
        super().__init__()
        self.attn = Attention(d)
        self.moe = MoE(d, experts_path)

    def forward(self, x, cos, sin):
        x = x + self.attn(x, cos, sin)
        out, aux = self.moe(x)
        return x + out, aux


class MoeModel(nn.Module):
    def __init__(self, d, experts_path):
        super().__init__()
        self.d = d
        self.embedding = nn.Embedding(d.vocab, d.hidden)
        self.layers = nn.ModuleList(Block(d, experts_path) for _ in range(d.num_layers))
        self.final_norm = nn.RMSNorm(d.hidden, eps=d.norm_eps)
        self.output = nn.Linear(d.hidden, d.vocab, bias=False)  # untied
        self.rope_cos = self.rope_sin = None

    @torch.no_grad()
    def init_weights(self, device):
        """normal(0, init_std); proj and expert fc2 normal(0, init_std / sqrt(2 L)); norms 1
        (workloads/moe/moe_specs.cpp)."""
        d = self.d
        scaled = d.init_std / math.sqrt(2.0 * d.num_layers)
        for name, p in self.named_parameters():
            if "norm" in name:
                nn.init.ones_(p)
            elif name.endswith("proj.weight") or name.endswith("w2"):
                nn.init.normal_(p, 0.0, scaled)
            else:
                nn.init.normal_(p, 0.0, d.init_std)
        self.rope_cos, self.rope_sin = rope_tables(d, device)

    def forward(self, tokens, labels):
        x = self.embedding(tokens)
        aux_total = 0.0
        for layer in self.layers:
            x, aux = layer(x, self.rope_cos, self.rope_sin)
            aux_total = aux_total + aux
        logits = self.output(self.final_norm(x))
        loss = F.cross_entropy(logits.float().view(-1, self.d.vocab), labels.reshape(-1))
        return loss, aux_total


# ---- Setup ----------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device_kind):
    backend = "nccl" if device_kind == "cuda" else "gloo"
    if "WORLD_SIZE" in os.environ:  # torchrun
        dist.init_process_group(backend)
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}",
                                rank=0, world_size=1)
        local_rank = 0
    if device_kind == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def grouped_mm_usable(d, device, dtype):
    """Forward and backward of torch._grouped_mm at the model's widths on this device and dtype."""
    try:
        e, h, f = 2, d.hidden, d.moe_ffn_hidden
        x = torch.randn(16, h, device=device, dtype=dtype)
        w = torch.randn(e, 2 * f, h, device=device, dtype=dtype, requires_grad=True)
        offs = torch.tensor([8, 16], device=device, dtype=torch.int32)
        out = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
        out.backward(torch.randn_like(out))  # a dense gradient, as training gives it
        return True, ""
    except (RuntimeError, NotImplementedError, AttributeError) as err:
        return False, str(err).splitlines()[0]


def make_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if "norm" in name else decay).append(p)  # norms: no weight decay
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
              {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=LR, betas=BETAS, eps=EPS)
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs), "fused"
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.AdamW(groups, foreach=True, **kwargs), "foreach"


def lr_at(step):
    """shardbench's LrSchedule: linear warmup over LR_WARMUP_ITERS (0 at the first step)."""
    return LR * min(step, LR_WARMUP_ITERS) / LR_WARMUP_ITERS


def global_batch(iteration, gbs, seq, vocab):
    """harness/engine/mock_data.cpp mock_global_batch: the same tokens as shardbench's runs."""
    gen = torch.Generator().manual_seed(SEED * 7919 + iteration + 17)
    return torch.randint(vocab, (gbs, seq + 1), generator=gen, dtype=torch.long)


# ---- Report ---------------------------------------------------------------------------------


def write_json(path, obj):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".peer_", suffix=".json", dir=folder)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (NCCL, bf16) or cpu (gloo, fp32)")
    p.add_argument("--tiny", action="store_true", help="the CPU-test shape instead of moe_bench_3b")
    p.add_argument("--steps", type=int, default=15, help="steps in all, warmup included")
    p.add_argument("--warmup", type=int, default=1,
                   help="first steps left out of the statistics (1: perf-launch's warmup rule)")
    p.add_argument("--micro_batch_size", type=int, default=2)
    p.add_argument("--global_batch_size", type=int, default=2)
    p.add_argument("--out", required=True, help="the JSON report (written atomically)")
    a = p.parse_args(argv)
    if a.device not in ("cuda", "cpu"):
        refuse("--device", a.device, "cuda or cpu")
    if a.device == "cpu" and not a.tiny:
        refuse("--device", a.device, "cpu with --tiny only (the bench shape runs on cuda)")
    if a.device == "cuda" and not torch.cuda.is_available():
        refuse("--device", a.device, "cuda where torch sees a GPU, or cpu with --tiny")
    if a.steps < 1:
        refuse("--steps", a.steps, "1 or more")
    if not 0 <= a.warmup < a.steps:
        refuse("--warmup", a.warmup, f"0 to --steps - 1 = {a.steps - 1}")
    if a.micro_batch_size < 1:
        refuse("--micro_batch_size", a.micro_batch_size, "1 or more")
    return a


def main(argv):
    args = parse_args(argv)
    d = TINY if args.tiny else BENCH
    device = init_distributed(args.device)
    rank, world = dist.get_rank(), dist.get_world_size()
    per_step = args.micro_batch_size * world
    if args.global_batch_size < per_step or args.global_batch_size % per_step:
        refuse("--global_batch_size", args.global_batch_size,
               f"a multiple of --micro_batch_size x world size = {per_step}")
    grad_accum = args.global_batch_size // per_step
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    usable, why = grouped_mm_usable(d, device, dtype)
    experts_path = "grouped_mm" if usable else "loop"
    if device.type == "cuda" and not args.tiny and not usable:
        raise Refused(f"--device=cuda: torch._grouped_mm is not usable here ({why}); the bench "
                      "shape runs with it only")

    torch.manual_seed(SEED)
    with torch.device("meta"):
        model = MoeModel(d, experts_path)
    mesh = init_device_mesh(device.type, (world,))
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if dtype == torch.bfloat16 else MixedPrecisionPolicy())
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    model.to_empty(device=device)
    model.init_weights(device)
    n_params = sum(p.numel() for p in model.parameters())
    optimizer, optimizer_impl = make_optimizer(model)

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    losses, aux_losses, grad_norms, step_ms, phase_ms = [], [], [], [], []
    status, error = "ok", None
    for it in range(args.steps):
        batch = global_batch(it, args.global_batch_size, d.seq_length, d.vocab)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it)
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if cuda else None
        t0 = time.perf_counter()
        try:
            if cuda:
                marks[0].record()
            optimizer.zero_grad(set_to_none=True)
            loss_sum = aux_sum = 0.0
            for m in range(grad_accum):
                start = m * per_step + rank * args.micro_batch_size
                rows = batch[start:start + args.micro_batch_size].to(device, non_blocking=True)
                loss, aux = model(rows[:, :-1], rows[:, 1:])
                (loss + aux).div(grad_accum).backward()
                loss_sum = loss_sum + loss.detach()
                aux_sum = aux_sum + aux.detach()
            if cuda:
                marks[1].record()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_GRAD, foreach=True)
            optimizer.step()
            if cuda:
                marks[2].record()
                torch.cuda.synchronize(device)
        except torch.OutOfMemoryError as err:
            status, error = "out_of_memory", str(err).splitlines()[0]
            break
        wall_ms = (time.perf_counter() - t0) * 1e3
        step_ms.append(marks[0].elapsed_time(marks[2]) if cuda else wall_ms)
        if cuda:  # zero_grad, forward and backward; clipping and the optimizer step
            phase_ms.append({"fwd_bwd": marks[0].elapsed_time(marks[1]),
                             "optimizer": marks[1].elapsed_time(marks[2])})
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        # The mean over the data-parallel ranks, as the loss shardbench reports.
        stats = torch.stack([loss_sum / grad_accum, aux_sum / grad_accum]).float()
        dist.all_reduce(stats)
        stats = (stats / world).tolist()
        losses.append(stats[0])
        aux_losses.append(stats[1])
        grad_norms.append(float(norm))
        if rank == 0:
            print(f"step {it + 1}/{args.steps}  loss {stats[0]:.6f}  aux {stats[1]:.6f}  "
                  f"grad_norm {float(norm):.4f}  {step_ms[-1]:.1f} ms", flush=True)
        if not all(math.isfinite(v) for v in stats):
            status, error = "loss_not_finite", f"step {it + 1}: loss {stats[0]}, aux {stats[1]}"
            break

    timed = step_ms[args.warmup:] if status == "ok" else []
    median = statistics.median(timed) if timed else None
    tokens_per_step = args.micro_batch_size * d.seq_length * grad_accum
    report = {
        "schema": SCHEMA,
        "peer": "pytorch_eager_fsdp2_grouped_mm",
        "status": status,
        "error": error,
        "model": {"name": "moe_bench_3b_tiny" if args.tiny else "moe_bench_3b", **asdict(d),
                  "params": n_params, "router": "softmax over top-k logits, fp32, aux_loss",
                  "force_load_balancing": True},
        "experts_path": experts_path,
        "grouped_mm_probe": why or "ok",
        "dtype": str(dtype).replace("torch.", ""),
        "fsdp2": {"units": "each transformer block and the root",
                  "param_dtype": "bfloat16" if dtype == torch.bfloat16 else "float32",
                  "reduce_dtype": "float32", "reshard_after_forward": True},
        "optimizer": {"name": "AdamW", "impl": optimizer_impl, "lr": LR, "lr_warmup_iters":
                      LR_WARMUP_ITERS, "betas": list(BETAS), "eps": EPS,
                      "weight_decay": WEIGHT_DECAY, "no_weight_decay": "norms",
                      "clip_grad": CLIP_GRAD},
        "world_size": world,
        "micro_batch_size": args.micro_batch_size,
        "global_batch_size": args.global_batch_size,
        "grad_accum": grad_accum,
        "seq_length": d.seq_length,
        "steps": args.steps,
        "warmup": args.warmup,
        "timing": "cuda events" if cuda else "host clock",
        "step_ms": step_ms,
        "phase_ms": phase_ms,
        "step_ms_median": median,
        "step_ms_mean": statistics.fmean(timed) if timed else None,
        "tokens_per_step_per_gpu": tokens_per_step,
        "tokens_per_s_per_gpu": tokens_per_step / (median / 1e3) if median else None,
        "loss": losses,
        "aux_loss": aux_losses,
        "grad_norm": grad_norms,
        "peak_memory_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else None,
        "device": device.type,
        "gpu_name": torch.cuda.get_device_name(device) if cuda else None,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "env": {k: os.environ.get(k) for k in RECIPE_ENV},
        "command": shlex.join([sys.executable] + sys.argv),
    }
    if rank == 0:
        write_json(args.out, report)
        print(f"[moe_fsdp2_eager] {status}: median {median} ms, "
              f"{report['tokens_per_s_per_gpu']} tokens/s per GPU -> {args.out}", flush=True)
        if error:
            print(f"[moe_fsdp2_eager] {error}", file=sys.stderr, flush=True)
    dist.barrier()  # every rank leaves together (gloo aborts a rank whose peer has gone)
    dist.destroy_process_group()
    return {"ok": 0, "out_of_memory": 3, "loss_not_finite": 4}[status]


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Refused as err:
        print(f"moe_fsdp2_eager: {err}", file=sys.stderr)
        if dist.is_initialized():
            dist.destroy_process_group()
        sys.exit(2)
