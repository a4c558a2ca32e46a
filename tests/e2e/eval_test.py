#!/usr/bin/env python3
"""train_gpt --eval, end to end on the CPU: it validates what a run would start from and writes
nothing. A run of 20 steps (validation every 10 on 2 global batches, checkpoints) is evaluated from
its checkpoint.dir: the loss equals the run's own validation of step 20 (1e-6 of the six printed
decimals), on one rank and on data 2, tensor 2 and pipeline 2, and the checkpoint directory and metrics file are
as they were; a checkpoint saved per rank by ZeRO stage 1 at data 2 evaluates alike on one rank and
at stage 3. checkpoint.resume = none, or a checkpoint.dir without checkpoints, evaluates the
initialization (a loss near ln 64 on the 64-token task); a checkpoint.resume that is no checkpoint
and --eval with --export-weights are refused in one line. Usage: eval_test.py TRAIN_GPT MPIEXEC CONFIG"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

BASE = ["train.device=cpu", "train.steps=20", "log.val_every=10", "log.val_batches=2", "train.global_batch=16"]


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failed.append(what)

    def run(ranks, sets, *extra):
        cmd = ([mpiexec, "--allow-run-as-root", "--oversubscribe", "-x", "OMP_NUM_THREADS=1", "-np", str(ranks)]
               if ranks > 1 else []) + [binary, config] + [x for kv in sets for x in ("--set", kv)] + list(extra)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    with tempfile.TemporaryDirectory() as tmp:
        ck, metrics = os.path.join(tmp, "ck"), os.path.join(tmp, "m.jsonl")
        sets = BASE + ["checkpoint.dir=" + ck, "log.metrics_file=" + metrics]
        p = run(1, sets)
        if p.returncode != 0:
            sys.exit(f"FAIL: the training run: {p.stderr[-2000:]}")
        val = [r["loss"] for r in map(json.loads, open(metrics)) if r.get("split") == "val" and r.get("step") == 20][0]
        before = (sorted(os.listdir(ck)), open(metrics).read())

        def evaluated(p):
            m = re.search(r"^eval: (.*) \| val loss ([0-9.]+) \| perplexity ([0-9.]+) \| (\d+) targets of (\d+) samples",
                          p.stdout, re.M)
            return (m.group(1), float(m.group(2)), float(m.group(3)), int(m.group(5))) if m else None

        for ranks, what, extra in [(1, "one rank", []), (2, "data 2", []), (2, "tensor 2", ["parallel.tensor=2"]),
                                   (2, "pipeline 2", ["parallel.pipeline=2"])]:
            p = run(ranks, sets + extra, "--eval")
            got = evaluated(p)
            check(p.returncode == 0 and got is not None and got[0].startswith("step 20 of ") and abs(got[1] - val) < 1e-6
                  and abs(got[2] - math.exp(got[1])) < 1e-3 * got[2] and got[3] == 32,
                  f"--eval, {what}: {got} against the run's validation of step 20, {val:.6f} {p.stderr.strip()[-300:]}")
        check((sorted(os.listdir(ck)), open(metrics).read()) == before,
              "--eval wrote nothing: the checkpoints and the metrics file are as they were")
        # A checkpoint saved per rank (ZeRO stage 1 at data 2), evaluated on one rank and at stage 3.
        ck1, metrics1 = os.path.join(tmp, "ck1"), os.path.join(tmp, "m1.jsonl")
        sets1 = BASE + ["checkpoint.dir=" + ck1, "log.metrics_file=" + metrics1]
        p = run(2, sets1 + ["zero.stage=1"])
        if p.returncode != 0:
            sys.exit(f"FAIL: the ZeRO-1 training run: {p.stderr[-2000:]}")
        val1 = [r["loss"] for r in map(json.loads, open(metrics1)) if r.get("split") == "val" and r.get("step") == 20][0]
        for ranks, what, extra in [(1, "one rank", []), (2, "data 2 at ZeRO stage 3", ["zero.stage=3"])]:
            got = evaluated(run(ranks, sets1 + extra, "--eval"))
            check(got is not None and abs(got[1] - val1) < 1e-6,
                  f"--eval of a ZeRO-1 checkpoint of data 2, {what}: {got} against its run's {val1:.6f}")
        p = run(1, BASE + ["checkpoint.resume=none"], "--eval")
        got = evaluated(p)
        check(p.returncode == 0 and got is not None and got[0] == "the initialization" and abs(got[1] - math.log(64)) < 0.3,
              f"--eval with checkpoint.resume = none: the initialization, {got}")
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        p = run(1, BASE + ["checkpoint.dir=" + empty], "--eval")
        got = evaluated(p)
        check(p.returncode == 0 and got is not None and got[0] == "the initialization" and os.listdir(empty) == [],
              f"--eval with a checkpoint.dir without checkpoints: the initialization, as a run would start, {got}")
        for what, sets_, extra, want in [
                ("a checkpoint.resume that is no checkpoint", BASE + ["checkpoint.resume=" + empty], [], "checkpoint.resume = "),
                ("--eval with --export-weights", BASE, ["--export-weights", os.path.join(tmp, "w")],
                 "--eval validates the model once and exits without training")]:
            p = run(1, sets_, "--eval", *extra)
            err = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
            check(p.returncode != 0 and len(err) == 1 and want in err[0], f"refused: {what}: {err}")
    if failed:
        sys.exit("FAIL")
    print("PASS")


if __name__ == "__main__":
    main()
