#!/usr/bin/env python3
"""Trellis against the PyTorch reference, on the same GPU in the same call: tokens/s, MFU, step time
and peak memory for GPT-2 sizes on random tokens, as a markdown table.

  python3 bench/bench_gpt.py --models 124m,350m --micro-batch 32 --steps 20 --warmup 5 \\
      --trellis build/train_gpt --out results.md

PyTorch side: bench/torch_gpt.py in bf16 autocast, torch.compile, SDPA (flash), fused AdamW,
gradient clipping at 1.0 (as Trellis's default), one micro-batch per step. Each PyTorch run is a
child process, so it holds no GPU memory while Trellis runs and a crash or OOM stays contained.
Trellis side: `train_gpt <generated toml> --set log.metrics_file=<tmp>`, data.source = "random",
log.every = 1, parsed from the JSON lines.

MFU, both sides, same formula (DESIGN.md §5, REFERENCE.md): tokens/s * (6N + 12*L*C*T) / 989e12,
N = all parameters with the tied embedding counted once, position embeddings included,
vocabulary padding excluded (GPT-2 small: N = 124,439,808). Timings: median over the steps after
warm-up.

Data parallel (--data-parallel N, N > 1, or a list N,N,...): every model / micro-batch is also run
on each N GPUs, after the 1-GPU runs of the same call (--skip-single leaves those out): PyTorch as DistributedDataParallel (NCCL, one process per GPU,
started with `python3 -m torch.distributed.run --standalone --nproc-per-node N`, bucket_cap_mb=25,
gradient_as_bucket_view=True, torch.compile of the DDP module), Trellis as `mpirun -np N
train_gpt ... --set train.global_batch=N*micro_batch` (its start record's layout must say data = N).
Both with NCCL_NVLS_ENABLE=0 (and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 for PyTorch). Tokens/s are for
the global batch of N x micro-batch sequences; step time and peak memory are rank 0's; scaling
efficiency = (tokens/s per GPU at N) / (tokens/s at 1 GPU), same framework, model, micro-batch."""
import argparse
import datetime
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# For the children of data-parallel runs: NVLink SHARP / multicast off (not usable on these machines).
DP_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
PEAK_FLOPS = 989e12  # H100/H200 SXM dense BF16
VOCAB, SEQ = 50257, 1024
PRESETS = {"tiny": (2, 2, 64), "124m": (12, 12, 768), "350m": (24, 16, 1024),
           "1.3b": (24, 16, 2048), "7b": (32, 32, 4096)}  # (n_layers, n_heads, d_model); kept in step with torch_gpt


def num_params(L, C, V=VOCAB, T=SEQ, moe=None, active=False, rope=False, swiglu=False, ffn=0, rmsnorm=False,
               kv_width=0, untied=False, bias=True):
    """N as in torch_gpt.GPT.num_params, without building the model. moe = (experts, top_k,
    layer_freq, width): a block with experts has a router (E x C) and E MLPs of the dense one's kind
    and width (0: 4C; active: top_k of them) instead of the dense one. rope: rotary positions, no
    position table. swiglu: fc 2F x C (gate and up). ffn: the dense MLP's width F (0: 4C). rmsnorm: norms without a bias.
    kv_width: the key-value heads' width (grouped-query attention; 0: C). untied: a head of its own
    (V x C). bias: the linear layers' biases."""
    F = ffn or 4 * C
    fc = (2 if swiglu else 1) * F
    b = 1 if bias else 0
    dense = (fc * C + b * fc) + (F * C + b * C)
    norm = C if rmsnorm else 2 * C
    qkv = C + 2 * (kv_width or C)
    per_layer = (qkv * C + b * qkv) + (C * C + b * C) + dense + 2 * norm  # qkv, proj, the MLP, two norms
    n = (2 if untied else 1) * V * C + (0 if rope else T * C) + L * per_layer + norm
    if moe:
        E, K, freq, Fe = moe
        Fe = Fe or 4 * C
        fce = (2 if swiglu else 1) * Fe
        expert = (fce * C + b * fce) + (Fe * C + b * C)
        n += len(range(0, L, freq)) * (E * C + (K if active else E) * expert - dense)
    return n


def mfu(tokens_per_s, L, C, T=SEQ, moe=None, rope=False, swiglu=False, ffn=0, rmsnorm=False, kv_width=0,
        untied=False, bias=True):
    """Model FLOPs: 6 x the parameters a token uses (top_k experts of a block with experts), less an
    untied embedding table (its lookups are no matmul), as Trellis counts."""
    n = num_params(L, C, moe=moe, active=True, rope=rope, swiglu=swiglu, ffn=ffn, rmsnorm=rmsnorm,
                   kv_width=kv_width, untied=untied, bias=bias) - (VOCAB * C if untied else 0)
    return tokens_per_s * (6 * n + 12 * L * C * T) / PEAK_FLOPS


def arch(args, H, C):
    """The architecture flags of num_params and mfu from the command line."""
    return dict(rope=bool(args.rope), swiglu=args.swiglu, ffn=args.ffn_hidden, rmsnorm=args.rmsnorm,
                kv_width=args.kv_heads * (C // H), untied=args.untied, bias=not args.no_bias)


# ---- PyTorch side (runs in a child process: bench_gpt.py --torch-worker) ---------------------

def torch_worker(args):
    """One process; under torch.distributed.run (WORLD_SIZE > 1) one rank of a DDP run. Rank 0
    prints the BENCH_RESULT line."""
    import torch
    import torch.distributed as dist
    sys.path.insert(0, HERE)
    from torch_gpt import GPT, GPTConfig
    from torch.nn.attention import SDPBackend, sdpa_kernel

    L, H, C = PRESETS[args.torch_worker]
    B, T = args.micro_batch, SEQ
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = args.torch_device == "cuda"
    if cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:  # only for testing the plumbing (gloo for DDP); the numbers mean nothing
        dev = torch.device("cpu")
    if world > 1:
        if cuda:
            dist.init_process_group("nccl", device_id=dev)
        else:
            dist.init_process_group("gloo")
    torch.manual_seed(1337)  # same initial weights on every rank (DDP broadcasts rank 0's anyway)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    moe = args.moe
    extra = dict(moe_experts=moe[0], moe_top_k=moe[1], moe_layer_freq=moe[2], moe_ffn_hidden=moe[3]) if moe else {}
    if args.rope:
        extra["rope_theta"] = args.rope
    if args.swiglu:
        extra["mlp"] = "swiglu"
    if args.ffn_hidden:
        extra["ffn_hidden"] = args.ffn_hidden
    if args.rmsnorm:
        extra["norm"] = "rmsnorm"
    extra.update(n_kv_heads=args.kv_heads, tie_embeddings=not args.untied, bias=not args.no_bias)
    model = GPT(GPTConfig(VOCAB, SEQ, L, H, C, dropout=0.0, **extra)).to(dev)
    assert model.num_params() == num_params(L, C, moe=moe, **arch(args, H, C))
    net = model
    if world > 1 and args.torch_parallel == "fsdp":
        # FSDP2: each block and then the root sharded over the ranks (parameters, gradients and
        # optimizer state: ZeRO-3), bf16 compute, gradients reduced in f32.
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for block in model.h:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    elif world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # broadcast_buffers=False: the buffers (the padding mask, the rotary tables) are constants, so
        # DDP need not send rank 0's at every forward.
        net = DDP(model, device_ids=[local_rank] if cuda else None, bucket_cap_mb=25, broadcast_buffers=False,
                  gradient_as_bucket_view=True)
    # After the wrapping: FSDP replaces the parameters by sharded ones.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    # torch.compile of the DDP module: Dynamo's DDPOptimizer splits the graph at the buckets, so
    # the all-reduces still overlap the backward.
    cmodel = torch.compile(net, mode=args.compile_mode) if args.compile_mode != "none" else net
    # A few fixed random batches, cycled: no host-to-device copies inside the timed steps.
    # Each rank gets different tokens.
    torch.manual_seed(1337 + rank)
    data = torch.randint(0, VOCAB, (4, 2, B, T), device=dev)

    def step(i):
        x, y = data[i % 4]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):  # CPU test: fp32
            _, loss = cmodel(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    backends = {"flash": [SDPBackend.FLASH_ATTENTION], "cudnn": [SDPBackend.CUDNN_ATTENTION],
                "efficient": [SDPBackend.EFFICIENT_ATTENTION],
                "auto": [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                         SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]}[args.sdpa]
    with sdpa_kernel(backends):
        for i in range(args.warmup):  # includes torch.compile's first-call compilation
            step(i)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(args.steps)]
            for i, (start, end) in enumerate(events):
                start.record()
                loss = step(args.warmup + i)
                end.record()
            torch.cuda.synchronize()
            times = [s.elapsed_time(e) for s, e in events]
        else:
            times = []
            for i in range(args.steps):
                t0 = time.perf_counter()
                loss = step(args.warmup + i)
                times.append(1e3 * (time.perf_counter() - t0))
    step_ms = statistics.median(times)
    result = {"step_ms": step_ms, "tokens_per_s": world * B * T / (step_ms / 1e3),
              "peak_mem_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
              "loss": loss.item(), "world": world, "global_batch": world * B,
              "gpu": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__}
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        print("BENCH_RESULT " + json.dumps(result), flush=True)
    return 0


def parse_torch(out, dp):
    tag = "BENCH_RESULT "
    res = next((json.loads(line[line.index(tag) + len(tag):]) for line in out.splitlines()
                if tag in line), None)
    if res and res.get("world", 1) != dp:
        raise ValueError(f"the PyTorch run had {res.get('world')} ranks, not {dp}")
    return res


def run_torch(args, preset, mb, dp=1):
    worker = [os.path.abspath(__file__), "--torch-worker", preset,
              "--micro-batch", str(mb), "--steps", str(args.steps), "--warmup", str(args.warmup),
              "--sdpa", args.sdpa, "--compile-mode", args.compile_mode,
              "--torch-device", args.torch_device, "--torch-parallel", args.torch_parallel]
    if args.moe:
        worker += ["--moe", ",".join(map(str, args.moe))]
    if args.rope:
        worker += ["--rope", str(args.rope)]
    if args.swiglu:
        worker += ["--swiglu"]
    if args.ffn_hidden:
        worker += ["--ffn-hidden", str(args.ffn_hidden)]
    if args.rmsnorm:
        worker += ["--rmsnorm"]
    if args.kv_heads:
        worker += ["--kv-heads", str(args.kv_heads)]
    worker += ["--untied"] if args.untied else []
    worker += ["--no-bias"] if args.no_bias else []
    env = None
    if dp == 1:
        cmd = [sys.executable] + worker
    else:  # one process per GPU; --standalone: a local rendezvous on a free port
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(dp)] + worker
        env = dict(DP_ENV)
    return run_child(cmd, args.timeout, parse=lambda out: parse_torch(out, dp), env=env)


# ---- Trellis side ------------------------------------------------------------------------------

def trellis_toml(preset, mb, steps, precision, checkpointing, moe=None, rope=0.0, swiglu=False, ffn=0,
                 rmsnorm=False, kv_heads=0, untied=False, no_bias=False):
    L, H, C = PRESETS[preset]
    experts = f"""
[moe]
experts = {moe[0]}
top_k = {moe[1]}
layer_freq = {moe[2]}
{f'ffn_hidden_size = {moe[3]}' if moe[3] else ''}
""" if moe else ""
    return f"""# generated by bench/bench_gpt.py
[model]
vocab_size = {VOCAB}
seq_len = {SEQ}
n_layers = {L}
n_heads = {H}
d_model = {C}
dropout = 0.0
{f'position_embedding = "rope"{chr(10)}rope_theta = {rope}' if rope else ''}
{'mlp = "swiglu"' if swiglu else ''}
{f'ffn_hidden_size = {ffn}' if ffn else ''}
{'norm = "rmsnorm"' if rmsnorm else ''}
{f'n_kv_heads = {kv_heads}' if kv_heads else ''}
{'tie_embeddings = false' if untied else ''}
{'bias = false' if no_bias else ''}

[train]
device = "cuda"
precision = "{precision}"
micro_batch = {mb}
steps = {steps}
seed = 1337
checkpointing = "{checkpointing}"

[optimizer]
lr = 6e-4

[data]
source = "random"

[log]
every = 1
""" + experts


def parse_metrics(path, warmup, dp=1):
    """Median over the step records after the first `warmup` ones. With dp > 1, the start record's
    layout must say data = dp (the data-parallel size, the GPUs over tensor x pipeline)."""
    records, start = [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if r.get("event") == "start":
                    start = r
                if "step" in r and "tokens_per_s" in r and "event" not in r:
                    records.append(r)
    data = (start or {}).get("layout", {}).get("data")
    if (dp > 1 or start is not None) and data != dp:
        raise RuntimeError(f"Trellis's start record says layout data = {data}, expected {dp}")
    records.sort(key=lambda r: r["step"])
    timed = records[warmup:]
    if not timed:
        raise RuntimeError(f"{len(records)} step records in {path}, none after the warm-up")
    med = lambda k: statistics.median(r[k] for r in timed if k in r)  # noqa: E731
    return {"step_ms": med("step_ms"), "tokens_per_s": med("tokens_per_s"),
            "mfu_reported": med("mfu") if any("mfu" in r for r in timed) else None,
            "peak_mem_bytes": max(r.get("peak_mem_bytes", 0) for r in timed),
            "loss": timed[-1].get("loss"), "timed_steps": len(timed),
            "global_batch": (start or {}).get("global_batch"),
            "libraries": (start or {}).get("libraries")}


def run_trellis(args, preset, mb, workdir, dp=1):
    tag = f"{preset}_mb{mb}_dp{dp}"
    cfg_path = os.path.join(workdir, f"{tag}.toml")
    metrics = os.path.join(workdir, f"{tag}.metrics.jsonl")
    with open(cfg_path, "w") as f:
        f.write(trellis_toml(preset, mb, args.warmup + args.steps, args.precision,
                             args.checkpointing, args.moe, args.rope, args.swiglu, args.ffn_hidden, args.rmsnorm,
                             args.kv_heads, args.untied, args.no_bias))
    env = dict(args.trellis_env) or None
    if dp == 1:
        prefix = shlex.split(args.trellis_prefix)
    else:
        env = dict(env or {}, **DP_ENV)
        prefix = shlex.split(args.mpirun) + ["-np", str(dp)]
        for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "LD_LIBRARY_PATH",
                    "PATH"):
            if var in env or var in os.environ:
                prefix += ["-x", var]
    cmd = prefix + [args.trellis, cfg_path, "--set", f"log.metrics_file={metrics}"]
    data = dp
    if dp > 1:  # the global batch of dp x micro-batch sequences, over (tensor, pipeline, data)
        tp, pp = args.trellis_layout
        data = dp // (tp * pp)
        cmd += ["--set", f"train.global_batch={dp * mb}", "--set", f"parallel.tensor={tp}",
                "--set", f"parallel.pipeline={pp}"]
    for s in args.trellis_set:
        cmd += ["--set", s]
    return run_child(cmd, args.timeout, parse=lambda out: parse_metrics(metrics, args.warmup, data),
                     env=env)


def torch_library_dirs():
    """The folders of the cuBLAS and cuDNN libraries a PyTorch process loads (its wheels), from its
    own memory map after a matmul and a cuDNN version query; with their cuDNN version."""
    code = ("import re, torch; v = torch.backends.cudnn.version(); a = torch.ones(64, 64, "
            "device='cuda'); (a @ a).sum().item(); maps = open('/proc/self/maps').read(); "
            "print(v); print(*sorted({m.rsplit('/', 1)[0] for m in "
            "re.findall(r'(/\\S+/lib(?:cudnn|cublasLt|cublas)\\.so[.0-9]*)', maps)}), sep='\\n')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) < 2:
        sys.exit("error: --trellis-libs torch: could not read the libraries PyTorch loads: "
                 + (out.stderr.strip().splitlines() or ["no output"])[-1])
    v = int(lines[0])  # cuDNN 9: major*10000 + minor*100 + patch
    return lines[1:], f"{v // 10000}.{v % 10000 // 100}.{v % 100}"


# ---- common ------------------------------------------------------------------------------------

def run_child(cmd, timeout, parse, env=None):
    """Runs cmd with the variables of `env` set over this process's environment; returns (result
    dict, None) or (None, one-line reason)."""
    shown = [f"{k}={v}" for k, v in sorted((env or {}).items())]
    print("$", " ".join(shlex.quote(c) for c in shown + cmd), flush=True)
    try:  # own session: on a timeout the whole tree (torchrun / mpirun and its ranks) goes
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, **env) if env else None, start_new_session=True)
    except OSError as e:
        return None, f"cannot start: {e}"
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_tree(p)
        return None, f"timed out after {timeout} s"
    except BaseException:  # Ctrl-C: the children are in their own session and would not see it
        stop_tree(p)
        raise
    out = stdout + "\n" + stderr
    if p.returncode != 0:
        print("\n".join(out.strip().splitlines()[-25:]), file=sys.stderr)
        low = out.lower()
        oom = "out of memory" in low or "outofmemoryerror" in low
        return None, ("OOM" if oom else f"failed (exit {p.returncode})")
    try:
        res = parse(stdout)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        return None, f"no metrics: {e}"
    return (res, None) if res else (None, "no result line")


def stop_tree(p):
    """SIGTERM to the child's process group (mpirun and torchrun pass it on to their ranks), then
    SIGKILL after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def gpu_name():
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown GPU"


def git_commit():
    try:
        rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return (rev + (" (+ uncommitted changes)" if dirty else "")) if rev else "unknown"
    except OSError:
        return "unknown"


def table(rows, rounds=False):
    """The single-GPU table as it always was; with data-parallel rows, GPU-count columns too; with
    several rounds, the round after the framework."""
    dp_rows = any(r.get("dp", 1) > 1 for r in rows)
    if not dp_rows:
        lines = ["| model | micro-batch | framework | tokens/s | MFU | step ms | peak mem (GiB) | "
                 "Trellis/PyTorch |", "|---|---|---|---|---|---|---|---|"]
    else:
        lines = ["| model | micro-batch per GPU | GPUs | framework | tokens/s | tokens/s per GPU | "
                 "MFU | step ms | peak mem per GPU (GiB) | scaling eff. | Trellis/PyTorch |",
                 "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        dp = r.get("dp", 1)
        ratio = f"{r['ratio']:.3f}x" if r.get("ratio") else ""  # 3 places: goals like 1.15x sit close
        if r["error"]:
            cells = [r["error"]] + [""] * (6 if dp_rows else 4)
        elif not dp_rows:
            cells = [f"{r['tokens_per_s']:,.0f}", f"{100 * r['mfu']:.1f}%", f"{r['step_ms']:.1f}",
                     f"{r['peak_mem_bytes'] / 2**30:.1f}", ratio]
        else:
            eff = f"{100 * r['scaling']:.1f}%" if r.get("scaling") else ""
            cells = [f"{r['tokens_per_s']:,.0f}", f"{r['tokens_per_s'] / dp:,.0f}",
                     f"{100 * r['mfu']:.1f}%", f"{r['step_ms']:.1f}",
                     f"{r['peak_mem_bytes'] / 2**30:.1f}", eff, ratio]
        head = [r["model"], str(r["mb"])] + ([f"{dp} (DP)" if dp > 1 else "1"] if dp_rows else [])
        fw = r["framework"] + (f" (round {r['round']})" if rounds else "")
        lines.append("| " + " | ".join(head + [fw] + cells) + " |")
    return "\n".join(lines)


def round_summary(rows):
    """With several rounds: per model, micro-batch and GPU count, the Trellis/PyTorch ratios of the
    rounds (mean, lowest, highest)."""
    groups = {}
    for r in rows:
        if r.get("ratio"):
            groups.setdefault((r["model"], r["mb"], r.get("dp", 1)), []).append(r["ratio"])
    return "\n".join(f"- {m} micro-batch {mb}, {dp} GPU(s): Trellis/PyTorch over {len(v)} rounds: mean "
                     f"{statistics.mean(v):.3f}x, lowest {min(v):.3f}x, highest {max(v):.3f}x"
                     for (m, mb, dp), v in groups.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="124m,350m", help="comma list of " + ",".join(PRESETS))
    ap.add_argument("--micro-batch", default="32", help="micro-batch, or a comma list")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--trellis", default="build/train_gpt", help="the train_gpt binary")
    ap.add_argument("--trellis-set", action="append", default=[],
                    help="extra section.key=value for Trellis (repeatable)")
    ap.add_argument("--trellis-prefix", default="", help="command before train_gpt (mpirun ...)")
    ap.add_argument("--precision", default="bf16", help="Trellis train.precision")
    ap.add_argument("--checkpointing", default="none", help="Trellis train.checkpointing")
    ap.add_argument("--sdpa", default="flash", choices=["flash", "cudnn", "efficient", "auto"])
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode: default | max-autotune | ... | none (eager)")
    ap.add_argument("--data-parallel", default="1", metavar="N[,N...]",
                    help="also run each model / micro-batch data-parallel on N GPUs (PyTorch DDP "
                         "via torch.distributed.run, Trellis via mpirun), next to the 1-GPU runs; "
                         "a comma list (2,4,8) runs each count in turn")
    ap.add_argument("--torch-parallel", default="ddp", choices=["ddp", "fsdp"],
                    help="PyTorch on N GPUs: DistributedDataParallel or FSDP2 (fully_shard per block)")
    ap.add_argument("--trellis-layout", default="1,1", metavar="T,P",
                    help="Trellis on N GPUs: tensor and pipeline sizes (data = N / (T x P))")
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root --bind-to none",
                    help="launcher for the Trellis data-parallel runs; -np N and -x VAR follow")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run each pair this many times, PyTorch first in odd rounds and Trellis "
                         "first in even ones (the GPU runs at its power cap, so the second run of a "
                         "pair starts warmer)")
    ap.add_argument("--skip-single", action="store_true",
                    help="with --data-parallel N: only the N-GPU runs (a model one GPU cannot hold)")
    ap.add_argument("--trellis-libs", default="system", choices=["system", "torch"],
                    help="cuBLAS/cuDNN for Trellis: the ones it was built against (system), or the "
                         "wheels PyTorch loads (torch: put first on Trellis's LD_LIBRARY_PATH, so "
                         "both frameworks run on the same library versions)")
    ap.add_argument("--moe", metavar="E,K,FREQ[,WIDTH]",
                    help="both frameworks: E experts, top K, in every FREQ-th block from the first, "
                         "each an MLP of the dense one's kind (--swiglu, --no-bias: Mixtral's) of hidden "
                         "width WIDTH (0 or absent: 4 x d_model) (capacity factor 1.25, balancing loss 0.01)")
    ap.add_argument("--rope", type=float, default=0.0, metavar="THETA",
                    help="both frameworks: rotary positions of this base instead of the learned table")
    ap.add_argument("--swiglu", action="store_true",
                    help='both frameworks with the SwiGLU MLP, model.mlp = "swiglu"')
    ap.add_argument("--ffn-hidden", type=int, default=0, metavar="F",
                    help="both frameworks with a dense MLP of width F (model.ffn_hidden_size; 0: 4 x d_model)")
    ap.add_argument("--rmsnorm", action="store_true", help='both frameworks with RMSNorm, model.norm = "rmsnorm"')
    ap.add_argument("--kv-heads", type=int, default=0, metavar="K",
                    help="both frameworks with K key-value heads (grouped-query attention, model.n_kv_heads; 0: all)")
    ap.add_argument("--untied", action="store_true", help="both frameworks with a head of its own (model.tie_embeddings = false)")
    ap.add_argument("--no-bias", action="store_true", help="both frameworks without linear biases (model.bias = false)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-trellis", action="store_true")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    ap.add_argument("--out", help="also write the markdown here")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    # cpu: for testing the PyTorch plumbing (DDP over gloo) on a machine without a GPU
    ap.add_argument("--torch-device", default="cuda", choices=["cuda", "cpu"],
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.moe:
        try:
            args.moe = tuple(int(x) for x in args.moe.split(","))
            args.moe += (0,) * (4 - len(args.moe))
            assert len(args.moe) == 4 and min(args.moe[:3]) >= 1 and args.moe[1] <= args.moe[0] and args.moe[3] >= 0
        except (ValueError, AssertionError):
            ap.error("--moe must be E,K,FREQ[,WIDTH] with 1 <= K <= E, FREQ >= 1 and WIDTH >= 0")
    if args.torch_worker:
        args.micro_batch = int(args.micro_batch)
        return torch_worker(args)

    models = [m for m in args.models.split(",") if m]
    bad = [m for m in models if m not in PRESETS]
    if bad:
        ap.error(f"unknown model {bad}; known: {', '.join(PRESETS)}")
    mbs = [int(b) for b in args.micro_batch.split(",")]
    try:
        counts = sorted({int(n) for n in args.data_parallel.split(",")})
        assert counts[0] >= 1
    except (ValueError, AssertionError):
        ap.error("--data-parallel must be GPU counts >= 1, comma-separated")
    dps = sorted(set([1] + counts))
    if args.skip_single and len(dps) > 1:
        dps = dps[1:]
    try:
        args.trellis_layout = tuple(int(x) for x in args.trellis_layout.split(","))
        assert len(args.trellis_layout) == 2 and min(args.trellis_layout) >= 1
    except (ValueError, AssertionError):
        ap.error("--trellis-layout must be T,P with T, P >= 1")
    if any(n > 1 and n % (args.trellis_layout[0] * args.trellis_layout[1]) for n in dps):
        ap.error(f"--data-parallel {args.data_parallel}: not every count is a multiple of T x P = "
                 f"{args.trellis_layout[0] * args.trellis_layout[1]}")
    if not args.skip_trellis and not os.path.exists(args.trellis):
        ap.error(f"{args.trellis} not found (build it, or --skip-trellis)")

    args.trellis_env, libs_note = {}, ""
    if args.trellis_libs == "torch" and not args.skip_trellis:
        dirs, cudnn = torch_library_dirs()
        path = ":".join(dirs + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p])
        args.trellis_env = {"LD_LIBRARY_PATH": path}
        libs_note = (f"Trellis ran with the folders of the cuBLAS and cuDNN that PyTorch loads (cuDNN "
                     f"{cudnn}) first on LD_LIBRARY_PATH: {', '.join(dirs)}.\n")
        print(libs_note, end="", flush=True)

    rows = []
    with tempfile.TemporaryDirectory(prefix="trellis_bench_") as workdir:
        for preset in models:
            L, H, C = PRESETS[preset]
            for mb in mbs:
                for dp, rnd in ((d, r) for d in dps for r in range(1, args.rounds + 1)):
                    got = {}
                    pair = [("PyTorch", args.skip_torch, lambda: run_torch(args, preset, mb, dp)),
                            ("Trellis", args.skip_trellis,
                             lambda: run_trellis(args, preset, mb, workdir, dp))]
                    for fw, skip, fn in (pair if rnd % 2 else pair[::-1]):
                        if skip:
                            continue
                        res, err = fn()
                        row = {"model": preset, "mb": mb, "dp": dp, "framework": fw,
                               "round": rnd, "error": err}
                        if res:
                            # MFU per GPU: tokens/s are for the global batch of dp GPUs
                            row.update(res, mfu=mfu(res["tokens_per_s"] / dp, L, C, moe=args.moe, **arch(args, H, C)),
                                       tokens_per_s_per_gpu=res["tokens_per_s"] / dp)
                            got[fw] = row
                            rep = res.get("mfu_reported")
                            if rep and abs(rep - row["mfu"]) > 0.02 * row["mfu"]:
                                print(f"warning: Trellis reports MFU {rep:.4f}, this script's "
                                      f"formula gives {row['mfu']:.4f}: the formulas differ",
                                      file=sys.stderr)
                        print(f"{preset} mb={mb} gpus={dp} {fw} round {rnd}: " + (err or
                              f"{row['tokens_per_s']:,.0f} tok/s "
                              f"({row['tokens_per_s_per_gpu']:,.0f} per GPU), "
                              f"MFU {100 * row['mfu']:.1f}%, "
                              f"{row['peak_mem_bytes'] / 2**30:.1f} GiB"), flush=True)
                        rows.append(row)
                    if "PyTorch" in got and "Trellis" in got:
                        t, p = got["Trellis"], got["PyTorch"]
                        t["ratio"] = t["tokens_per_s"] / p["tokens_per_s"]
    # scaling efficiency: tokens/s per GPU at N over tokens/s per GPU of the same framework at the
    # fewest GPUs of the call (1, or with --skip-single the smallest N)
    fewest = dps[0]
    single = {(r["model"], r["mb"], r["framework"], r["round"]): r for r in rows
              if r["dp"] == fewest and not r["error"]}
    for r in rows:
        one = single.get((r["model"], r["mb"], r["framework"], r["round"]))
        if r["dp"] > fewest and not r["error"] and one:
            r["scaling"] = r["tokens_per_s_per_gpu"] / one["tokens_per_s_per_gpu"]
    if any(n > 1 for n in dps):
        print("\ndata-parallel scaling:")
        for r in rows:
            if r["dp"] > 1:
                print(f"  {r['model']} mb={r['mb']} {r['framework']} x{r['dp']}: " + (r["error"] or
                      f"{r['tokens_per_s']:,.0f} tok/s total, {r['tokens_per_s_per_gpu']:,.0f} "
                      f"per GPU, scaling efficiency "
                      + (f"{100 * r['scaling']:.1f}%" if r.get("scaling") else "n/a")
                      + (f", Trellis/PyTorch {r['ratio']:.2f}x" if r.get("ratio") else "")))

    header = (f"Date: {datetime.date.today()}  \nGPU: {gpu_name()}  \nCommit: {git_commit()}  \n"
              f"Command: `python3 {' '.join(shlex.quote(a) for a in sys.argv)}`  \n"
              f"Sequence {SEQ}, vocabulary {VOCAB}, {args.warmup} warm-up + {args.steps} timed "
              f"steps "
              f"(median), Trellis precision {args.precision}, checkpointing {args.checkpointing}; "
              + ("PyTorch not run (--skip-torch)" if args.skip_torch else
                 f"PyTorch bf16 autocast + torch.compile ({args.compile_mode}) + SDPA ({args.sdpa}) + "
                 f"fused AdamW")
              + f". MFU = tokens/s x (6N + 12 L C T) / 989e12, N with the tied embedding "
              f"once and no vocabulary padding. Ratio = Trellis tokens/s / PyTorch tokens/s.\n")
    header += libs_note
    if args.moe:
        header += (f"Both with mixture-of-experts blocks: {args.moe[0]} experts"
                   f"{f' of width {args.moe[3]}' if args.moe[3] else ''} (the dense MLP's kind), top {args.moe[1]}, "
                   f"in every {args.moe[2]}-th block from the first, capacity factor 1.25, balancing loss 0.01 (PyTorch: "
                   f"bench/torch_gpt.py's MoE, its experts a loop of nn.Linear pairs over fixed-capacity "
                   f"slots); MFU counts the top {args.moe[1]} experts' parameters.\n")
    if args.rope:
        header += (f"Both with rotary positions (base {args.rope:g}; PyTorch: bench/torch_gpt.py's rotary(), "
                   f"under torch.compile), no position table.\n")
    if args.swiglu:
        header += ("Both with the SwiGLU MLP (model.mlp = \"swiglu\": fc 8C x C, gate and up, silu(gate) x up, "
                   "proj C x 4C; PyTorch: bench/torch_gpt.py's MLP, F.silu); N counts fc's 8C x C.\n")
    if args.ffn_hidden:
        header += (f"Both with a dense MLP of width {args.ffn_hidden} (model.ffn_hidden_size) instead of 4 x d_model; "
                   f"N counts it.\n")
    if args.rmsnorm:
        header += "Both with RMSNorm (model.norm = \"rmsnorm\"; PyTorch: nn.RMSNorm), no norm biases.\n"
    if args.kv_heads:
        header += (f"Both with {args.kv_heads} key-value heads (grouped-query attention, model.n_kv_heads; PyTorch: "
                   f"k, v repeat_interleave'd before SDPA).\n")
    if args.untied:
        header += "Both with a head of its own (model.tie_embeddings = false); MFU leaves out the embedding table.\n"
    if args.no_bias:
        header += "Both without biases in the linear layers (model.bias = false).\n"
    loaded = sorted({r["libraries"] for r in rows if r.get("libraries")})
    if loaded:  # what Trellis's start record says it loaded
        header += "Trellis loaded: " + "; ".join(loaded) + ".\n"
    if args.trellis_set:  # these override the table's micro-batch column where they set it
        header += ("Trellis also ran with " + ", ".join(f"`{x}`" for x in args.trellis_set)
                   + " (over the table's micro-batch where they set train.micro_batch).\n")
    multi = [n for n in dps if n > 1]
    if multi:
        torch_side = ("FSDP2 (fully_shard per block and the root, bf16 parameters, f32 gradient "
                      "reduction, torch.compile, torchrun)" if args.torch_parallel == "fsdp" else
                      "DistributedDataParallel (NCCL, bucket_cap_mb 25, gradient_as_bucket_view, "
                      "torch.compile of the DDP module, torchrun)")
        tp, pp = args.trellis_layout
        header += (f"\nRows with GPUs = N > 1 (DP; N = {', '.join(map(str, multi))}) are data-parallel: "
                   + ("" if args.skip_torch else f"PyTorch {torch_side}, ")
                   + f"Trellis under `{args.mpirun} -np N` at (tensor, pipeline, "
                   f"data) = ({tp}, {pp}, N / {tp * pp}); NCCL_NVLS_ENABLE=0. Global batch = "
                   f"GPUs x micro-batch sequences; tokens/s are for the global batch, MFU is per "
                   f"GPU, step ms and peak memory are rank 0's. Scaling eff. = tokens/s per GPU / "
                   f"tokens/s per GPU of the same framework on {dps[0]} GPU(s) (the fewest of this "
                   f"call).\n")
    if args.torch_device != "cuda" and not args.skip_torch:
        header += "\nPyTorch ran on the CPU (--torch-device cpu): a plumbing test, not a benchmark.\n"
    if args.rounds > 1:
        header += (f"\n{args.rounds} rounds per model: PyTorch ran first in odd rounds, Trellis in "
                   f"even ones; scaling compares runs of the same round.\n")
    text = header + "\n" + table(rows, args.rounds > 1) + "\n"
    summary = round_summary(rows) if args.rounds > 1 else ""
    if summary:
        text += "\n" + summary + "\n"
    print("\n" + text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(not r["error"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
