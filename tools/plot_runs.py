#!/usr/bin/env python3
"""Draws the loss and throughput curves of one or several Trellis runs to one PNG.

Reads the JSON-lines metrics files that train_gpt writes (log.metrics_file): per-step records
{"step", "loss", "tokens_per_s", ...} and validation records {"step", "split": "val", "loss"}.
Left panel: training loss against step (a line per run) with the validation losses as markers of
the same colour; right panel: tokens/s against step.

Usage: plot_runs.py RUN.jsonl [RUN2.jsonl ...] -o curves.png [--labels a,b]
Needs matplotlib (pip install matplotlib); draws without a display (the Agg backend)."""
import argparse
import json
import os
import sys


def fail(msg):
    sys.exit("plot_runs.py: error: " + msg)


def read_run(path):
    """(train, val): lists of (step, loss, tokens_per_s) and (step, loss) from a metrics file."""
    train, val = [], []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror}")
    except UnicodeDecodeError:
        fail(f"{path}: not a text file (expected a metrics file of JSON lines)")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if n == len(lines):  # a run killed mid-write leaves a partial last line
                print(f"plot_runs.py: warning: {path}:{n}: skipping a truncated last line", file=sys.stderr)
                continue
            fail(f"{path}:{n}: not a JSON line: {e.msg}")
        if not isinstance(rec, dict) or "step" not in rec or "loss" not in rec:
            continue  # the start record and anything else without a loss
        loss = rec["loss"] if rec["loss"] is not None else float("nan")  # null: NaN or infinity
        if rec.get("split") == "val":
            val.append((rec["step"], loss))
        elif "split" not in rec:
            train.append((rec["step"], loss, rec.get("tokens_per_s")))
    if not train and not val:
        fail(f"{path}: no step or validation records (is it a Trellis metrics file from log.metrics_file?)")
    return train, val


def main():
    ap = argparse.ArgumentParser(description="Plot loss and tokens/s curves of Trellis runs (metrics JSON lines) to a PNG.")
    ap.add_argument("runs", nargs="+", metavar="RUN.jsonl", help="metrics files written by train_gpt (log.metrics_file)")
    ap.add_argument("-o", "--output", required=True, metavar="PNG", help="the image to write")
    ap.add_argument("--labels", help="comma-separated legend labels, one per run (default: the file names)")
    ap.add_argument("--title", help="a title over both panels")
    args = ap.parse_args()

    if args.labels is not None:
        labels = args.labels.split(",")
        if len(labels) != len(args.runs):
            fail(f"--labels has {len(labels)} label(s) for {len(args.runs)} run(s)")
    else:
        labels = [os.path.splitext(os.path.basename(p))[0] for p in args.runs]
        if len(set(labels)) < len(labels):
            labels = list(args.runs)

    runs = [read_run(p) for p in args.runs]  # read everything before importing matplotlib (slow)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed (pip install matplotlib)")

    fig, (ax_loss, ax_tps) = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ((train, val), label) in enumerate(zip(runs, labels)):
        c = colors[i % len(colors)]
        if train:
            ax_loss.plot([s for s, _, _ in train], [l for _, l, _ in train], color=c, linewidth=1.2,
                         label=f"{label} (train)")
        if val:
            ax_loss.plot([s for s, _ in val], [l for _, l in val], color=c, linestyle="none", marker="o",
                         markersize=6, markeredgecolor="black", markeredgewidth=0.6, label=f"{label} (val)")
        tps = [(s, t) for s, _, t in train if t is not None]
        if tps:
            ax_tps.plot([s for s, _ in tps], [t for _, t in tps], color=c, linewidth=1.2, label=label)

    ax_loss.set_title("loss")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("cross-entropy (nats/token)")
    ax_tps.set_title("throughput")
    ax_tps.set_xlabel("step")
    ax_tps.set_ylabel("tokens/s")
    ax_tps.set_ylim(bottom=0)
    for ax in (ax_loss, ax_tps):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        fail(f"{args.output}: the directory {out_dir} does not exist")
    try:
        fig.savefig(args.output, dpi=110, format="png")
    except OSError as e:
        fail(f"{args.output}: cannot write: {e.strerror or e}")
    print(f"wrote {args.output} ({len(runs)} run(s))")


if __name__ == "__main__":
    main()
