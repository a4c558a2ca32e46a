#!/usr/bin/env python3
"""TensorBoard event files from train_gpt, read back with the tensorboard package's
EventAccumulator: the scalar tags exist, train/loss has one event per step 1..30, val/loss one per
validation, and every value equals the JSON metrics file's value to float32 precision.
Exits 77 (skipped) when the tensorboard Python package is not installed.
Usage: tensorboard_test.py TRAIN_GPT CONFIG_TOML"""
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("SKIP: the tensorboard Python package is not installed (pip install tensorboard)")
    sys.exit(77)

STEPS = 30
VAL_EVERY = 10
# JSON metrics key -> TensorBoard tag, for the per-step records.
TRAIN_TAGS = {
    "loss": "train/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "loss_scale": "train/loss_scale",
    "tokens_per_s": "train/tokens_per_s",
    "step_ms": "train/step_ms",
    "peak_mem_bytes": "train/peak_mem_bytes",
    "mfu": "train/mfu",
}
REQUIRED = ["train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "train/step_ms",
            "train/peak_mem_bytes", "val/loss"]


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def f32(x):
    """x rounded to float32, as TensorBoard's simple_value stores it; None (JSON null) is NaN."""
    if x is None:
        return math.nan
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def train(binary, config, tmp, name, *sets):
    metrics = os.path.join(tmp, name + ".jsonl")
    tb_dir = os.path.join(tmp, name + "_tb")
    cmd = [binary, config, "--set", "train.device=cpu", "--set", "log.metrics_file=" + metrics,
           "--set", "log.tensorboard_dir=" + tb_dir]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    with open(metrics) as f:
        records = [json.loads(line) for line in f]
    files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
    check(len(files) == 1, f"{name}: one event file in log.tensorboard_dir ({[os.path.basename(p) for p in files]})")
    check(os.path.basename(files[0]).endswith(".trellis"), f"{name}: the event file name ends in .trellis")
    acc = EventAccumulator(tb_dir, size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return records, acc


def compare(name, records, acc):
    """Every value of the metrics file's step and validation records is in the event file."""
    tags = set(acc.Tags()["scalars"])
    train_recs = [r for r in records if "step" in r and r.get("split") != "val"]
    val_recs = [r for r in records if r.get("split") == "val"]
    for key, tag in TRAIN_TAGS.items():
        want = [(r["step"], f32(r[key])) for r in train_recs if key in r]
        if not want:
            check(tag not in tags, f"{name}: no {tag} events, as the metrics file has no {key}")
            continue
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        check(len(got) == len(want) and all(g[0] == w[0] and same(g[1], w[1]) for g, w in zip(got, want)),
              f"{name}: {tag} equals the metrics file's {key} at all {len(want)} steps (float32)")
    want = [(r["step"], f32(r["loss"])) for r in val_recs]
    got = [(e.step, e.value) for e in acc.Scalars("val/loss")] if "val/loss" in tags else []
    check(len(want) > 0 and got == want, f"{name}: val/loss equals the metrics file's validation losses {want}")
    times = [e.wall_time for e in acc.Scalars("train/loss")]
    check(all(a <= b for a, b in zip(times, times[1:])), f"{name}: wall times do not go backwards")


def main():
    binary, config = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        records, acc = train(binary, config, tmp, "fp32", f"train.steps={STEPS}", f"log.val_every={VAL_EVERY}")
        tags = set(acc.Tags()["scalars"])
        missing = [t for t in REQUIRED if t not in tags]
        check(not missing, f"the event file has the tags {REQUIRED} (missing: {missing}; found: {sorted(tags)})")
        steps = [e.step for e in acc.Scalars("train/loss")]
        check(steps == list(range(1, STEPS + 1)), f"{STEPS} train/loss events at steps 1..{STEPS}")
        check([e.step for e in acc.Scalars("val/loss")] == list(range(VAL_EVERY, STEPS + 1, VAL_EVERY)),
              f"val/loss events at steps {list(range(VAL_EVERY, STEPS + 1, VAL_EVERY))}")
        compare("fp32", records, acc)

        # fp16 adds the loss scale.
        records, acc = train(binary, config, tmp, "fp16", "train.steps=5", "log.val_every=5", "train.precision=fp16")
        check("train/loss_scale" in acc.Tags()["scalars"], "fp16: the event file has train/loss_scale")
        compare("fp16", records, acc)
    print("PASS")


if __name__ == "__main__":
    main()
