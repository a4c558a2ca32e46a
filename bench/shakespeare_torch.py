"""nanoGPT's character-level tinyshakespeare recipe on the PyTorch reference model (torch_gpt.py),
for a wall-time and quality comparison with Trellis's examples/configs/shakespeare_char.toml.

  python3 bench/shakespeare_torch.py --data .data/shakespeare [--steps 5000] [--device cuda]
      [--compile] [--out result.json]

--data: the llm.c token file written by `prepare_data --tokenizer char --format llmc` (PREFIX.tok)
or its prefix; the vocabulary size comes from PREFIX.vocab.json next to it. Split as Trellis does:
the first 90% of the tokens train, the last 10% validate. Model 6 layers / 6 heads / 384, seq 256,
dropout 0.2, vocabulary padded to a multiple of 128. AdamW lr 1e-3, betas (0.9, 0.99), eps 1e-8,
weight decay 0.1 on the 2-D weights, linear warm-up over 100 steps from 0, then cosine to 1e-4 at
the last step (launcher/lr_schedule.h), grad clip 1.0, batch 64, bf16 autocast on the GPU.

Training batches are random 257-token windows of the train split at random offsets (nanoGPT);
Trellis reads permuted non-overlapping windows: the same distribution for this comparison.
Validation: the mean loss over all non-overlapping 257-token windows of the validation split."""
import argparse
import json
import math
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt import GPT, GPTConfig  # noqa: E402

MAGIC = 20240520
HEADER_BYTES = 256 * 4
SAMPLING_NOTE = ("train batches: random 257-token windows at random offsets of the train split "
                 "(nanoGPT); Trellis samples permuted non-overlapping windows - the same "
                 "distribution for this comparison")


def lr_at(step, total, warmup, lr, min_lr):
    """launcher/lr_schedule.h: 1-based step; linear warm-up from 0, cosine to min_lr at `total`."""
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    if total <= warmup:
        return lr
    progress = min((step - warmup) / (total - warmup), 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def resolve_data(path):
    """Like Trellis: PATH itself if it is an llm.c token file, else PATH.tok, else PATH.bin."""
    def is_token_file(p):
        if not os.path.isfile(p):
            return False
        with open(p, "rb") as f:
            head = f.read(4)
        return len(head) == 4 and int.from_bytes(head, "little", signed=True) == MAGIC
    for p in (path, path + ".tok", path + ".bin"):
        if is_token_file(p):
            return p
    sys.exit(f"error: {path}: no llm.c token file there (looked for {path}, {path}.tok, "
             f"{path}.bin with magic {MAGIC})")


def read_tokens(path):
    """The tokens of an llm.c token file as an int64 CPU tensor (pure torch, no numpy)."""
    with open(path, "rb") as f:
        buf = bytearray(f.read())
    if len(buf) < HEADER_BYTES:
        sys.exit(f"error: {path}: shorter than the 1024-byte header")
    magic, version, count = (int.from_bytes(buf[4 * i:4 * i + 4], "little", signed=True)
                             for i in range(3))
    if magic != MAGIC or version not in (1, 2):
        sys.exit(f"error: {path}: magic {magic} version {version} (expected {MAGIC}, 1 or 2)")
    elem = 2 if version == 1 else 4
    if HEADER_BYTES + count * elem != len(buf):
        sys.exit(f"error: {path}: header says {count} tokens but the file has {len(buf)} bytes")
    if version == 1:  # uint16: read as int16, undo the sign
        t = torch.frombuffer(buf, dtype=torch.int16, count=count, offset=HEADER_BYTES)
        return t.to(torch.int64) & 0xFFFF
    return torch.frombuffer(buf, dtype=torch.int32, count=count, offset=HEADER_BYTES).to(torch.int64)


def vocab_path(data_path):  # data/tokenizer.cpp vocabulary_path
    stem = data_path
    for ext in (".idx", ".bin", ".tok"):
        if stem.endswith(ext) and len(stem) > len(ext):
            stem = stem[:-len(ext)]
            break
    return stem + ".vocab.json"


@torch.no_grad()
def evaluate(model, val_windows, batch, device, amp):
    """Mean token loss over all (N, T+1) validation windows, model.eval(), no dropout."""
    was_training = model.training
    model.eval()
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for i in range(0, val_windows.shape[0], batch):
        w = val_windows[i:i + batch]
        x, y = w[:, :-1], w[:, 1:]
        with amp():
            _, loss = model(x, y)
        total += loss.double() * y.numel()
        count += y.numel()
    model.train(was_training)
    return (total / count).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="PREFIX or PREFIX.tok (llm.c token file)")
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--out", help="write the result as JSON here")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--val-every", type=int, default=500, help="0 = only at the end")
    ap.add_argument("--log-every", type=int, default=250)
    ap.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                    help="auto = bf16 autocast on CUDA, fp32 elsewhere")
    args = ap.parse_args()

    seq_len, n_layers, n_heads, d_model, dropout = 256, 6, 6, 384, 0.2
    lr, min_lr, warmup, betas, eps, wd, clip = 1e-3, 1e-4, 100, (0.9, 0.99), 1e-8, 0.1, 1.0
    val_fraction, timing_skip = 0.1, 10

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch.cuda.is_available() is False")
    precision = args.precision if args.precision != "auto" else (
        "bf16" if device.type == "cuda" else "fp32")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    def amp():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                              enabled=precision == "bf16")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    # ---- data ----
    data_path = resolve_data(args.data)
    tokens = read_tokens(data_path)
    vpath = vocab_path(data_path)
    if os.path.isfile(vpath):
        with open(vpath) as f:
            vocab = json.load(f)
        vocab_size, vocab_kind = int(vocab["vocab_size"]), vocab.get("kind", "?")
    else:
        vocab_size, vocab_kind = int(tokens.max()) + 1, "from data"
        print(f"warning: no {vpath}; vocabulary size {vocab_size} from the largest token id")
    if int(tokens.max()) >= vocab_size or int(tokens.min()) < 0:
        sys.exit(f"error: {data_path}: token ids outside [0, {vocab_size})")
    n = tokens.numel()
    n_train = int(n * (1.0 - val_fraction))  # token_dataset.cpp: int64(count * (1 - val_fraction))
    W = seq_len + 1
    n_val_windows = (n - n_train) // W
    if n_train < W or n_val_windows == 0:
        sys.exit(f"error: {data_path}: {n} tokens are too few for windows of {W}")
    train = tokens[:n_train].to(device)
    val_windows = tokens[n_train:n_train + n_val_windows * W].view(n_val_windows, W).to(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed + 1)
    offsets = torch.arange(W, device=device)

    def get_batch():
        ix = torch.randint(0, n_train - W + 1, (args.batch,), device=device, generator=gen)
        w = train[ix[:, None] + offsets]  # (B, W)
        return w[:, :-1], w[:, 1:]

    # ---- model and optimizer ----
    torch.manual_seed(args.seed)
    cfg = GPTConfig(vocab_size=vocab_size, seq_len=seq_len, n_layers=n_layers, n_heads=n_heads,
                    d_model=d_model, dropout=dropout)
    raw = GPT(cfg).to(device)
    params = [p for p in raw.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]  # Trellis: decay on the 2-D weights only
    no_decay = [p for p in params if p.dim() < 2]
    fused = device.type == "cuda"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps, fused=fused)
    model = torch.compile(raw) if args.compile else raw
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    print(f"shakespeare_torch: torch {torch.__version__}, {device} ({gpu}), {precision}, "
          f"compile {'on' if args.compile else 'off'}, fused AdamW {'on' if fused else 'off'}")
    print(f"data {data_path}: {n} tokens, vocab {vocab_size} ({vocab_kind}, padded "
          f"{cfg.padded_vocab}), train {n_train}, val {n - n_train} = {n_val_windows} windows "
          f"of {W}")
    print(f"model {n_layers}L/{n_heads}H/{d_model}, seq {seq_len}, {raw.num_params():,} params; "
          f"batch {args.batch}, {args.steps} steps")
    print(SAMPLING_NOTE)

    # ---- training ----
    tokens_per_step = args.batch * seq_len
    losses = torch.zeros(args.steps, dtype=torch.float32, device=device)
    val_history, log = [], []
    val_time = 0.0  # seconds spent in validation inside the loop
    t_warm = None  # time when step `timing_skip` finished (synchronized)
    val_time_at_warm = 0.0
    model.train()
    sync()
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        cur_lr = lr_at(step, args.steps, warmup, lr, min_lr)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        x, y = get_batch()
        with amp():
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses[step - 1] = loss.detach()
        if step == timing_skip:
            sync()
            t_warm, val_time_at_warm = time.perf_counter(), val_time
        if args.log_every > 0 and (step % args.log_every == 0 or step == 1):
            l = losses[step - 1].item()
            el = time.perf_counter() - t0
            log.append({"step": step, "loss": l, "lr": cur_lr, "elapsed_s": el})
            print(f"step {step:5d}/{args.steps} | loss {l:.4f} | lr {cur_lr:.2e} | {el:.1f}s",
                  flush=True)
        if (args.val_every > 0 and step % args.val_every == 0) or step == args.steps:
            sync()
            tv = time.perf_counter()
            v = evaluate(raw, val_windows, args.batch, device, amp)  # uncompiled: no recompiles
            val_time += time.perf_counter() - tv
            val_history.append({"step": step, "val_loss": v})
            print(f"step {step:5d}/{args.steps} | val loss {v:.4f}", flush=True)
    sync()
    t_end = time.perf_counter()

    wall = t_end - t0
    train_time = wall - val_time
    k = min(50, args.steps)
    train_loss = losses[-k:].mean().item()
    val_loss = val_history[-1]["val_loss"]
    after = None
    if t_warm is not None and args.steps > timing_skip:
        after_wall = t_end - t_warm
        after_train = after_wall - (val_time - val_time_at_warm)
        after = {"steps": args.steps - timing_skip, "wall_s": after_wall,
                 "train_s": after_train,
                 "tokens_per_s": (args.steps - timing_skip) * tokens_per_step / after_train,
                 "step_ms": 1e3 * after_train / (args.steps - timing_skip)}
    result = {
        "script": "bench/shakespeare_torch.py", "torch": torch.__version__,
        "device": str(device), "device_name": gpu, "precision": precision,
        "compile": args.compile, "fused_adamw": fused,
        "data": data_path, "tokens": n, "train_tokens": n_train, "val_tokens": n - n_train,
        "val_windows": n_val_windows, "vocab_size": vocab_size, "padded_vocab": cfg.padded_vocab,
        "model": {"n_layers": n_layers, "n_heads": n_heads, "d_model": d_model,
                  "seq_len": seq_len, "dropout": dropout, "params": raw.num_params()},
        "optim": {"lr": lr, "min_lr": min_lr, "warmup_steps": warmup, "betas": list(betas),
                  "eps": eps, "weight_decay": wd, "grad_clip": clip},
        "steps": args.steps, "batch": args.batch, "seed": args.seed,
        "tokens_per_step": tokens_per_step, "sampling": SAMPLING_NOTE,
        "train_loss_last50": train_loss, "train_loss_window": k, "val_loss": val_loss,
        "val_history": val_history, "log": log,
        "wall_s": wall,  # the whole loop, first step (and compile) and validation included
        "train_s": train_time,  # the loop without the validation passes
        "val_s": val_time,
        "tokens_per_s": args.steps * tokens_per_step / train_time,
        "after_step_10": after,
        "peak_mem_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
    }
    tps = after["tokens_per_s"] if after else result["tokens_per_s"]
    aft = f"{after['wall_s']:.1f}s after step {timing_skip}" if after else "n/a after step 10"
    print(f"RESULT pytorch shakespeare_char: {args.steps} steps | train loss {train_loss:.4f} "
          f"(mean last {k}) | val loss {val_loss:.4f} | wall {wall:.1f}s total, {aft} "
          f"(val {val_time:.1f}s) | {tps:,.0f} tok/s | "
          f"{'compile' if args.compile else 'eager'} {precision} {device}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
