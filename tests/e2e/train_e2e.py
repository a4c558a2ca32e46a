#!/usr/bin/env python3
"""End-to-end checks of train_gpt on the CPU: the tiny config trains (the loss falls), runs are
bitwise repeatable, activation checkpointing leaves the loss curve bit-identical, the metrics file
has the contract's records, bf16/fp16 runs work, and log.trace_step writes a Chrome trace of the
step that runs the ops the step runs.
Usage: train_e2e.py TRAIN_GPT CONFIG_TOML"""
import json
import math
import os
import subprocess
import sys
import tempfile


def train(binary, config, tmp, name, *sets):
    metrics = os.path.join(tmp, name + ".jsonl")
    cmd = [binary, config, "--set", "log.metrics_file=" + metrics, "--set", "train.device=cpu"]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    with open(metrics) as f:
        records = [json.loads(line) for line in f]
    return proc.stdout, records


def losses(records):
    return [r["loss"] for r in records if "step" in r and r.get("split") != "val"]


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def main():
    binary, config = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        out, a = train(binary, config, tmp, "a")
        start = a[0]
        check(start.get("event") == "start", "first record is the start record")
        check(start["layout"] == {"tensor": 1, "pipeline": 1, "data": 1}, "start record reports the layout")
        check(start["zero_stage"] == 0 and len(start["params_per_rank"]) == 1
              and len(start["model_state_bytes_per_rank"]) == 1, "start record has per-rank sizes")
        la = losses(a)
        steps = [r["step"] for r in a if "step" in r and r.get("split") != "val"]
        check(steps == list(range(1, len(steps) + 1)), "one record per optimizer step")
        check(all(math.isfinite(x) for x in la), "losses are finite")
        check(la[0] > 3.5 and min(la[-10:]) < 1.5, f"loss falls on the learnable task ({la[0]:.3f} -> {la[-1]:.3f})")
        check(any(r.get("split") == "val" for r in a), "validation records are written")
        check("parameters:" in out and "step " in out, "log lines are printed")

        _, b = train(binary, config, tmp, "b")
        check(losses(b) == la, "same config and seed give bitwise-identical losses")

        short = ["train.steps=30", "model.dropout=0.1"]
        _, none = train(binary, config, tmp, "none", *short)
        for mode in ("full", "selective", "elementwise"):
            _, ck = train(binary, config, tmp, mode, *short, "train.checkpointing=" + mode)
            check(losses(ck) == losses(none), f"checkpointing={mode} leaves the losses bit-identical")

        # optimizer.schedule = wsd: warm-up, lr held, then the last decay_steps steps down to min_lr.
        out, w = train(binary, config, tmp, "wsd", "train.steps=20", "optimizer.warmup_steps=4", "optimizer.schedule=wsd",
                       "optimizer.decay_steps=5", "optimizer.lr=1e-3", "optimizer.min_lr=1e-4")
        lrs = {r["step"]: r["lr"] for r in w if "lr" in r}
        check(abs(lrs[2] - 5e-4) < 1e-12 and all(abs(lrs[k] - 1e-3) < 1e-12 for k in range(4, 16)) and
              abs(lrs[18] - (1e-4 + 9e-4 * 2 / 5)) < 1e-12 and abs(lrs[20] - 1e-4) < 1e-12,
              f"optimizer.schedule = wsd: the step records' lr ({[round(lrs[k], 6) for k in sorted(lrs)]})")
        out, _ = train(binary, config, tmp, "decay_unused", "train.steps=2", "optimizer.decay_steps=5")
        check("warning: optimizer.decay_steps applies to optimizer.schedule = \"wsd\" only" in out,
              "optimizer.decay_steps without wsd is warned of")

        _, acc = train(binary, config, tmp, "acc", "train.steps=10", "train.micro_batch=4", "train.global_batch=8")
        base = losses(a)[:10]
        worst = max(abs(x - y) for x, y in zip(losses(acc), base))
        check(worst < 1e-4, f"gradient accumulation (2 x 4) matches one micro-batch of 8 (max diff {worst:.2e})")

        for precision in ("bf16", "fp16"):
            _, r = train(binary, config, tmp, precision, "train.steps=40", "train.precision=" + precision)
            lr = losses(r)
            check(all(math.isfinite(x) for x in lr) and lr[-1] < lr[0] - 0.5,
                  f"{precision} trains ({lr[0]:.3f} -> {lr[-1]:.3f})")
            if precision == "fp16":
                check(all("loss_scale" in x for x in r if "step" in x and x.get("split") != "val"),
                      "fp16 records carry the loss scale")
            # train.grad_dtype = auto keeps one rank's one-micro-batch gradients in 16 bits: the
            # same training to within 16-bit rounding, 2 bytes a parameter less.
            dt = {"bf16": "bf16", "fp16": "f16"}[precision]
            _, r32 = train(binary, config, tmp, precision + "_g32", "train.steps=40", "train.precision=" + precision,
                           "train.grad_dtype=f32")
            check(r[0]["grad_dtype"] == dt and r32[0]["grad_dtype"] == "f32",
                  f"{precision}: gradients in {dt} by default, f32 when asked")
            saved = r32[0]["model_state_bytes_per_rank"][0] - r[0]["model_state_bytes_per_rank"][0]
            check(saved == 2 * r[0]["params_per_rank"][0], f"{precision}: 16-bit gradients save 2 bytes a parameter")
            worst = max(abs(x - y) for x, y in zip(losses(r)[:10], losses(r32)[:10]))
            check(worst < 0.05, f"{precision}: 16-bit gradients train as f32 ones (first 10 losses within {worst:.2e})")
            _, racc = train(binary, config, tmp, precision + "_acc", "train.steps=2", "train.precision=" + precision,
                            "train.micro_batch=4", "train.global_batch=8")
            check(racc[0]["grad_dtype"] == "f32", f"{precision}: accumulating over micro-batches keeps f32 gradients")
        trace = os.path.join(tmp, "trace.json")
        out, _ = train(binary, config, tmp, "trace", "train.steps=3", "log.trace_step=2", "log.trace_file=" + trace)
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
        ops = [e for e in events if e["ph"] == "X"]
        names = {e["name"].split()[0] for e in ops}
        check({"matmul", "attention_forward", "attention_backward", "adamw_step"} <= names
              and all(e["ts"] >= 0 and e["dur"] >= 0 and e["tid"] == 0 for e in ops)
              and sum(e["name"] == "adamw_step" for e in ops) >= 1 and "traced to" in out,
              f"log.trace_step writes the step's ops as a Chrome trace ({len(ops)} ops)")
        check(all(ops[i]["ts"] <= ops[i + 1]["ts"] for i in range(len(ops) - 1)),
              "the traced ops are in the order they ran")

        # Settings the run will not act on are said, not ignored silently.
        out, _ = train(binary, config, tmp, "unused", "train.steps=3", "checkpoint.every=1", "fp16.hysteresis=1",
                       "moe.z_loss_coef=0.001")
        check("checkpoint.every = 1 without checkpoint.dir: no checkpoint is saved" in out
              and "the [fp16] loss-scaling keys apply to train.precision = fp16 only; this run is fp32" in out
              and "optimizer.warmup_steps = 20 is beyond train.steps = 3" in out
              and "the [moe] keys apply with moe.experts > 0 only" in out,
              "checkpoint.every without checkpoint.dir, [fp16] keys in fp32, a warmup past the end and [moe] keys "
              "without experts are warned of")
    print("PASS")


if __name__ == "__main__":
    main()
