#!/usr/bin/env python3
"""Per-stage compute times on the CPU: interleaved pipeline = 2, v = 2 over 8 layers split
1,5,1,1 by parallel.stage_layers. Every step record's stage_timing has p*v positive forward and
backward times and micro_batches = m, in virtual-stage order (the 5-layer virtual stage 1, on rank 1,
is the slowest); pipeline_predict reads the file and prints the per-stage table, the imbalance and
both predictions; on a metrics file without stage_timing it fails with one "error:" line.
Usage: pipeline_predict_test.py TRAIN_GPT PIPELINE_PREDICT MPIEXEC CONFIG"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

STEPS, WARMUP = 8, 2
P, V, M = 2, 2, 4  # global batch 16 = micro-batch 4 x M
SETS = ["train.device=cpu", f"train.steps={STEPS}", "model.n_layers=8", "model.d_model=128", "model.seq_len=64",
        "train.micro_batch=4", "train.global_batch=16", f"parallel.pipeline={P}", "parallel.schedule=interleaved",
        f"parallel.virtual_stages={V}", "parallel.stage_layers=1,5,1,1"]

failed = False


def check(ok, what):
    global failed
    failed |= not ok
    print(("ok   " if ok else "FAIL ") + what)


def main():
    train_gpt, predict, mpiexec, config = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(P), "-x", "OMP_NUM_THREADS=1", train_gpt,
               config, "--set", "log.metrics_file=" + metrics] + [a for s in SETS for a in ("--set", s)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            sys.exit(f"FAIL: {' '.join(cmd)}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        steps = [r for r in map(json.loads, open(metrics)) if "step" in r and r.get("split") != "val"]
        timings = [r.get("stage_timing", {}) for r in steps]
        check(len(steps) == STEPS and all(len(t.get("forward_ms", [])) == P * V and len(t.get("backward_ms", [])) == P * V
                                          for t in timings),
              f"every step record has stage_timing with {P * V} forward_ms and backward_ms")
        check(all(t.get("micro_batches") == M for t in timings), f"stage_timing.micro_batches = m = {M}")
        check(all(x > 0 for t in timings for x in t.get("forward_ms", []) + t.get("backward_ms", [])),
              "every time is positive")
        if failed:
            sys.exit(1)
        med = [statistics.median(t["forward_ms"][s] + t["backward_ms"][s] for t in timings[WARMUP:]) for s in range(P * V)]
        check(max(range(P * V), key=lambda s: med[s]) == 1,
              f"virtual stage 1 (5 layers, rank 1 chunk 0) is the slowest: median fwd+bwd ms {med}")

        out = subprocess.run([predict, metrics, "--warmup", str(WARMUP)], capture_output=True, text=True, timeout=60)
        print(out.stdout)
        check(out.returncode == 0 and not out.stderr, f"pipeline_predict exits 0 (stderr: {out.stderr.strip()!r})")
        rows = [l for l in out.stdout.splitlines() if l.startswith("| ") and l.split("|")[1].strip().isdigit()]
        check([int(l.split("|")[1]) for l in rows] == list(range(P * V)), "one table row per virtual stage, in order")
        check("imbalance: virtual stage 1," in out.stdout, "the imbalance names virtual stage 1")
        for label in ("bubble formula", "simulator, measured stage times", "measured"):
            check(any(l.startswith("| " + label) for l in out.stdout.splitlines()), f"a '{label}' row")

        # A resumed run of the same layout appends a start record: each process's warm-up is left
        # out; one of another layout cannot be mixed in: one error line.
        lines = open(metrics).read().splitlines()
        start = json.loads(lines[0])
        resumed = os.path.join(tmp, "resumed.jsonl")
        with open(resumed, "w") as f:
            f.write("\n".join(lines + lines) + "\n")
        out = subprocess.run([predict, resumed, "--warmup", str(WARMUP)], capture_output=True, text=True, timeout=60)
        check(out.returncode == 0 and f"{2 * (STEPS - WARMUP)} steps" in out.stdout,
              f"a resumed run's file: the warm-up left out of each process ({2 * (STEPS - WARMUP)} steps)")
        torn = os.path.join(tmp, "torn.jsonl")
        with open(torn, "w") as f:
            f.write("\n".join(lines) + "\n" + lines[-1][: len(lines[-1]) // 2])  # killed while writing
        out = subprocess.run([predict, torn, "--warmup", str(WARMUP)], capture_output=True, text=True, timeout=60)
        check(out.returncode == 0 and "incomplete last line" in out.stderr and f"{STEPS - WARMUP} steps" in out.stdout,
              "a torn last line (a killed run) is left out, with a note")
        start["layout"]["pipeline"] = 1
        mixed = os.path.join(tmp, "mixed.jsonl")
        with open(mixed, "w") as f:
            f.write("\n".join(lines + [json.dumps(start)] + lines[1:]) + "\n")
        out = subprocess.run([predict, mixed], capture_output=True, text=True, timeout=60)
        err = out.stderr.strip().splitlines()
        check(out.returncode == 1 and len(err) == 1 and "the file holds runs of several layouts" in err[0],
              f"a file holding runs of two layouts: exit 1 and one error line ({err})")

        bare = os.path.join(tmp, "bare.jsonl")
        with open(bare, "w") as f:
            for line in open(metrics):
                r = json.loads(line)
                r.pop("stage_timing", None)
                f.write(json.dumps(r) + "\n")
        out = subprocess.run([predict, bare], capture_output=True, text=True, timeout=60)
        err = out.stderr.strip().splitlines()
        check(out.returncode == 1 and len(err) == 1 and err[0].startswith("error:") and "stage_timing" in err[0],
              f"without stage_timing: exit 1 and one error line ({err})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
