#!/usr/bin/env python3
"""Checkpoint and resume, end to end on the CPU: 2N steps in one run and N + resume + N give
bitwise-identical losses (dropout on; f32, and bf16 with its split master weights); resume = "auto" skips a corrupt newest checkpoint, and refuses to start afresh when none can be read; the
resumed run logs only the steps after its checkpoint; a checkpoint.dir that cannot be created fails
before training, a save that fails later gives a warning while training goes on (the last step's
ends the run with an error); no run overwrites
another run's newer checkpoints, nor uses a checkpoint.dir another run is using; checkpoint.resume may name a checkpoint.dir; the metrics file of a
resumed run reads as one run, an earlier run's is moved aside, and a file that is not a metrics
file is never replaced; checkpoint.keep_best keeps the best validation state; a resume on a data file
rewritten since the save, or with document masking or its position reset switched on, is warned of. Usage: resume_test.py TRAIN_GPT CONFIG"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def train(binary, config, metrics, *sets):
    cmd = [binary, config, "--set", "train.device=cpu", "--set", "model.dropout=0.1", "--set", "train.steps=30",
           "--set", "log.metrics_file=" + metrics]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    steps = {r["step"]: r["loss"] for r in map(json.loads, open(metrics)) if "step" in r and r.get("split") != "val"}
    return p.stdout, steps


def damage(checkpoint):
    """Flips a byte inside one of the checkpoint's blobs: its checksum no longer matches."""
    blob = os.path.join(checkpoint, "adam_v")
    blob = blob if os.path.exists(blob) else os.path.join(checkpoint, sorted(f for f in os.listdir(checkpoint) if f != "manifest.json")[0])
    with open(blob, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))


def fails(binary, config, *sets):
    """A run that must fail before training: (exit code, its error lines)."""
    cmd = [binary, config, "--set", "train.device=cpu", "--set", "train.steps=30"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, [line for line in p.stderr.splitlines() if line.startswith("error")]


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def main():
    binary, config = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as tmp:
        ck = os.path.join(tmp, "ckpt")
        _, full = train(binary, config, os.path.join(tmp, "full.jsonl"))
        out1, first = train(binary, config, os.path.join(tmp, "a.jsonl"), "checkpoint.dir=" + ck,
                            "checkpoint.every=5", "train.stop_after=15", "checkpoint.keep=2")
        check(sorted(first) == list(range(1, 16)) and "stopping after step 15" in out1, "stop_after stops after step 15")
        check(sorted(os.listdir(ck)) == ["step_00000010", "step_00000015"], "keep = 2 keeps the newest two")
        out2, second = train(binary, config, os.path.join(tmp, "b.jsonl"), "checkpoint.dir=" + ck, "checkpoint.every=5")
        check(sorted(second) == list(range(16, 31)), "the resumed run logs only steps 16..30")
        check(all(first[s] == full[s] for s in first), "steps 1..15 equal the uninterrupted run bitwise")
        check(all(second[s] == full[s] for s in second), "steps 16..30 after resume equal the uninterrupted run bitwise")

        # bf16: the master weights are split (the parameters and 16 low bits each); the checkpoint
        # holds them joined as f32 and the resumed run continues the same curve bitwise.
        bf16, ck16 = "train.precision=bf16", os.path.join(tmp, "ck16")
        _, full16 = train(binary, config, os.path.join(tmp, "full16.jsonl"), bf16)
        train(binary, config, os.path.join(tmp, "a16.jsonl"), bf16, "checkpoint.dir=" + ck16, "checkpoint.every=5",
              "train.stop_after=15")
        _, second16 = train(binary, config, os.path.join(tmp, "b16.jsonl"), bf16, "checkpoint.dir=" + ck16)
        manifest16 = json.load(open(os.path.join(ck16, "step_00000015", "manifest.json")))
        master16 = [b for b in manifest16["blobs"] if b["name"] == "master"]
        check(len(master16) == 1 and master16[0]["dtype"] == "f32", "bf16: the checkpoint holds the f32 master weights")
        check(sorted(second16) == list(range(16, 31)) and all(second16[s] == full16[s] for s in second16),
              "bf16: steps 16..30 after resume equal the uninterrupted run bitwise")

        # Corrupt the newest checkpoint: auto must fall back to the previous valid one.
        damage(os.path.join(ck, "step_00000030"))
        out3, third = train(binary, config, os.path.join(tmp, "c.jsonl"), "checkpoint.dir=" + ck, "train.steps=30",
                            "checkpoint.resume=auto")
        check("skipped invalid" in out3 and min(third) == 26, "resume = auto skips the corrupt newest checkpoint")
        check(all(third[s] == full[s] for s in third), "resuming from step 25 continues the same curve")

        # Another global batch than the checkpoint's: refused in one line, with both counts.
        code, err = fails(binary, config, "checkpoint.resume=" + os.path.join(ck, "step_00000025"),
                          "train.micro_batch=1")
        check(code == 1 and len(err) == 1 and "samples in 25 steps, not 1 a step as this run has" in err[0],
              "resuming with another global batch is refused in one line")

        # A checkpoint directory under a regular file cannot be created: one line before training.
        blocker = os.path.join(tmp, "file")
        open(blocker, "w").close()
        code, err = fails(binary, config, "checkpoint.dir=" + blocker + "/ck")
        check(code == 1 and len(err) == 1 and "checkpoint.dir = " + blocker + "/ck: cannot create it" in err[0],
              "a checkpoint.dir that cannot be created fails before training, in one line")
        # A save that fails during the run (step_00000020 is a file in the way): warn, keep training.
        ck4 = os.path.join(tmp, "ck4")
        os.makedirs(ck4)
        open(os.path.join(ck4, "step_00000020"), "w").close()
        out4, fourth = train(binary, config, os.path.join(tmp, "d.jsonl"), "checkpoint.dir=" + ck4,
                             "train.steps=30", "checkpoint.every=10")
        check("checkpoint of step 20 NOT saved" in out4 and len(fourth) == 30
              and os.path.isdir(os.path.join(ck4, "step_00000030")), "a failing save warns and training goes on")
        # The last step's save fails: the run trains to the end, then exits 1 with one error line.
        ck5 = os.path.join(tmp, "ck5")
        os.makedirs(ck5)
        open(os.path.join(ck5, "step_00000030"), "w").close()
        code, err = fails(binary, config, "checkpoint.dir=" + ck5, "checkpoint.every=10")
        check(code == 1 and len(err) == 1 and "the checkpoint of step 30, this run's last, was not saved" in err[0]
              and os.path.isdir(os.path.join(ck5, "step_00000020")),
              "a failing save of the last step ends the run with exit 1 and one error line")
        # Two runs in one checkpoint.dir: the second is refused while the first holds the directory.
        ck7, m7 = os.path.join(tmp, "ck7"), os.path.join(tmp, "ck7.jsonl")
        first_run = subprocess.Popen([binary, config, "--set", "train.device=cpu", "--set", "train.steps=1000000",
                                      "--set", "checkpoint.dir=" + ck7, "--set", "log.metrics_file=" + m7],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while time.time() < deadline and not (os.path.exists(m7) and '"step"' in open(m7).read()):
                time.sleep(0.2)
            code, err = fails(binary, config, "checkpoint.dir=" + ck7)
        finally:
            first_run.kill()
            first_run.wait()
        check(code == 1 and len(err) == 1 and "another run is using it" in err[0],
              "a second run in a checkpoint.dir another run is using is refused in one line")
        # Every step checkpoint damaged: resume = auto does not start afresh over them.
        ck6 = os.path.join(tmp, "ck6")
        train(binary, config, os.path.join(tmp, "ck6.jsonl"), "checkpoint.dir=" + ck6, "train.steps=10",
              "checkpoint.every=5")
        for d in ("step_00000005", "step_00000010"):
            damage(os.path.join(ck6, d))
        code, err = fails(binary, config, "checkpoint.dir=" + ck6)
        check(code == 1 and len(err) == 1 and "holds step checkpoints but none can be read" in err[0]
              and sorted(os.listdir(ck6)) == ["step_00000005", "step_00000010"],
              "resume = auto refuses to start afresh over step checkpoints none of which can be read")

        # Another run's checkpoints are never overwritten: a fresh run (resume = none) or one
        # resumed from an older step into a checkpoint.dir that holds newer ones fails in one line;
        # resumed from there into another checkpoint.dir it trains. checkpoint.resume may name a
        # checkpoint.dir (its newest valid checkpoint).
        for resume, from_step in (("none", 0), (os.path.join(ck, "step_00000020"), 20)):
            code, err = fails(binary, config, "checkpoint.dir=" + ck, "checkpoint.resume=" + resume)
            check(code == 1 and len(err) == 1 and "holds checkpoints up to step 30" in err[0]
                  and f"from step {from_step}) would overwrite" in err[0],
                  f"checkpoint.resume = {resume} into a directory with newer checkpoints fails in one line")
        out7, seventh = train(binary, config, os.path.join(tmp, "g.jsonl"), "checkpoint.dir=" + os.path.join(tmp, "ck7"),
                              "checkpoint.resume=" + os.path.join(ck, "step_00000020"))
        check(min(seventh) == 21 and all(seventh[s] == full[s] for s in seventh),
              "resumed from another directory's older checkpoint, it continues the same curve")
        _, eighth = train(binary, config, os.path.join(tmp, "h.jsonl"), "checkpoint.dir=" + os.path.join(tmp, "ck8"),
                          "checkpoint.resume=" + ck4, "train.steps=32")
        check(sorted(eighth) == [31, 32], "checkpoint.resume = a checkpoint.dir resumes from its newest checkpoint")

        # Settings a resumed run cannot act on are said, and an earlier trace is kept: a stop or a
        # traced step at or before the checkpoint's.
        trace = os.path.join(tmp, "trace.json")
        ck10 = os.path.join(tmp, "ck10")
        train(binary, config, os.path.join(tmp, "i.jsonl"), "checkpoint.dir=" + ck10, "train.stop_after=5",
              "log.trace_step=3", "log.trace_file=" + trace)
        traced = open(trace).read()
        out11, _ = train(binary, config, os.path.join(tmp, "j.jsonl"), "checkpoint.dir=" + ck10, "train.stop_after=5",
                         "log.trace_step=3", "log.trace_file=" + trace)
        check("train.stop_after = 5 is never reached as a stop (the run trains steps 6 to 30)" in out11
              and "log.trace_step = 3 is not among this run's steps" in out11 and open(trace).read() == traced,
              "a resumed run warns of a stop and a trace step it will not reach, and keeps the earlier trace")

        # The metrics file: nothing in it is lost. A resumed run moves the earlier file to .1 and
        # starts the new one with its records up to the checkpoint, so it reads as one run; a fresh
        # run moves an earlier file aside too; a file that is not a metrics file is never replaced,
        # also by a resumed run.
        m, ck9 = os.path.join(tmp, "m.jsonl"), os.path.join(tmp, "ck9")
        train(binary, config, m, "checkpoint.dir=" + ck9, "checkpoint.every=5", "train.stop_after=12")
        first_run = open(m).read()
        _, resumed = train(binary, config, m, "checkpoint.dir=" + ck9)
        records = [json.loads(line) for line in open(m)]
        steps = [r["step"] for r in records if "step" in r and r.get("split") != "val"]
        check(steps == list(range(1, 31)) and [r.get("event") for r in records].count("start") == 2
              and all(resumed[s] == full[s] for s in resumed) and open(m + ".1").read() == first_run,
              "a resumed run's metrics file holds steps 1..30 once each; the earlier file is kept whole as .1")
        out10, _ = train(binary, config, m, "train.steps=3")
        check("now in " + m + ".2" in out10 and len(open(m + ".2").readlines()) == len(records),
              "a fresh run moves the earlier metrics file to the next free .N")
        precious = os.path.join(tmp, "notes.txt")
        open(precious, "w").write("my notes\n")
        code, err = fails(binary, config, "log.metrics_file=" + precious)
        check(code == 1 and len(err) == 1 and "not a Trellis metrics file" in err[0] and open(precious).read() == "my notes\n",
              "a log.metrics_file that is not a metrics file is refused and left as it was")
        code, err = fails(binary, config, "log.metrics_file=" + precious, "checkpoint.dir=" + ck9)
        check(code == 1 and len(err) == 1 and "not a Trellis metrics file" in err[0] and open(precious).read() == "my notes\n",
              "... also by a resumed run")


        # checkpoint.keep_best: dir/best holds the state of the lowest validation loss; resume = auto
        # still takes the newest step checkpoint.
        ck2, m5 = os.path.join(tmp, "ckbest"), os.path.join(tmp, "e.jsonl")
        train(binary, config, m5, "checkpoint.dir=" + ck2, "checkpoint.keep_best=true", "log.val_every=5",
              "log.val_batches=2", "checkpoint.resume=none")
        vals = {r["step"]: r["loss"] for r in map(json.loads, open(m5)) if r.get("split") == "val"}
        meta = json.load(open(os.path.join(ck2, "best", "manifest.json")))["meta"]
        best_step = min(vals, key=lambda s: vals[s])
        check(meta["step"] == best_step and abs(meta["val_loss"] - vals[best_step]) < 1e-9,
              f"best/ holds step {best_step}, the lowest validation loss {vals[best_step]:.4f}")
        check(sorted(os.listdir(ck2)) == ["best", "step_00000030"], "best/ sits beside the step checkpoints")
        out6, sixth = train(binary, config, os.path.join(tmp, "f.jsonl"), "checkpoint.dir=" + ck2,
                            "checkpoint.keep_best=true", "log.val_every=5", "log.val_batches=2", "train.steps=35")
        check(min(sixth) == 31, "resume = auto picks step_00000030, not best/")

        # Forks: resumed from another directory into one holding an earlier run's (older)
        # checkpoints or its best/, the run would prune or replace them: refused. Naming the
        # checkpoint.dir itself as checkpoint.resume continues it, as auto does, past a damaged newest.
        fork = os.path.join(tmp, "fork")
        train(binary, config, os.path.join(tmp, "k.jsonl"), "checkpoint.dir=" + fork, "train.steps=5")
        code, err = fails(binary, config, "checkpoint.dir=" + fork, "checkpoint.resume=" + os.path.join(ck, "step_00000020"))
        check(code == 1 and len(err) == 1 and "holds checkpoints up to step 5 that this run" in err[0],
              "a fork into a directory with another run's older checkpoints is refused")
        code, err = fails(binary, config, "checkpoint.dir=" + ck2, "checkpoint.resume=none")
        check(code == 1 and len(err) == 1 and " holds checkpoints up to step 35" in err[0], "... and a fresh run into one")
        only_best = os.path.join(tmp, "only_best")
        os.makedirs(only_best)
        os.rename(os.path.join(ck2, "best"), os.path.join(only_best, "best"))
        code, err = fails(binary, config, "checkpoint.dir=" + only_best, "checkpoint.resume=none")
        check(code == 1 and len(err) == 1 and "holds a best/ checkpoint" in err[0], "... and a fresh run into one with best/")
        damage(os.path.join(ck, "step_00000030"))
        _, again = train(binary, config, os.path.join(tmp, "l.jsonl"), "checkpoint.dir=" + ck, "checkpoint.resume=" + ck,
                         "train.steps=32")
        check(sorted(again) == [26, 27, 28, 29, 30, 31, 32],
              "checkpoint.resume = checkpoint.dir continues it past its damaged newest checkpoint, as auto")

        # A data file rewritten in place since the save (same data.path): the resume says so.
        prepare = os.path.join(os.path.dirname(binary), "prepare_data")
        text, prefix, ck3 = os.path.join(tmp, "text.txt"), os.path.join(tmp, "data", "t"), os.path.join(tmp, "ck3")
        def rewrite_and_train(words, steps):
            with open(text, "w") as f:
                f.write(words)
            subprocess.run([prepare, "--input", text, "--output", prefix, "--tokenizer", "char", "--format", "llmc",
                            "--force"], check=True, capture_output=True, timeout=60)
            out, _ = train(binary, config, os.path.join(tmp, f"d{steps}.jsonl"), "data.source=file",
                           "data.path=" + prefix + ".tok", "checkpoint.dir=" + ck3, "checkpoint.every=5",
                           f"train.steps={steps}")
            return out
        rewrite_and_train("abcdefgh " * 3000, 5)
        out = rewrite_and_train("abcdefgh " * 2000, 7)
        changed = re.search(r"warning: resumed on data of t\.tok: 18000 tokens, checksum [0-9a-f]{16}, but the "
                            r"checkpoint's run read t\.tok: 27000 tokens, checksum [0-9a-f]{16} ", out)
        check(changed is not None, "a resume on a data file rewritten since the save is warned of")
        out = rewrite_and_train("hgfedcba " * 2000, 9)  # the same characters, so the same vocabulary and size
        check("warning: resumed on data of t.tok: 18000 tokens, checksum" in out,
              "... also when the rewrite has the same number of tokens")
        out = rewrite_and_train("hgfedcba " * 2000, 11)
        check("warning: resumed on data" not in out, "... and not when the data is the same")
        # Document masking switched on at a resume: attention differs from the uninterrupted run's.
        out, _ = train(binary, config, os.path.join(tmp, "doc.jsonl"), "data.source=file", "data.path=" + prefix + ".tok",
                       "checkpoint.dir=" + ck3, "train.steps=12", "data.document_mask=true", "data.eod_token=1")
        check("warning: resumed with data.document_mask = true (data.eod_token = 1), but the checkpoint's run had false"
              in out, "a resume that switches document masking on is warned of")
        out, _ = train(binary, config, os.path.join(tmp, "doc2.jsonl"), "data.source=file", "data.path=" + prefix + ".tok",
                       "checkpoint.dir=" + ck3, "train.steps=14", "data.document_mask=true", "data.eod_token=1",
                       "data.reset_positions=true")
        check("warning: resumed with learned positions counted from each document's start, but the checkpoint's run "
              "counted them from each sample's" in out and "data.document_mask =" not in out,
              "... and one that resets the positions alone, as that")
        out, _ = train(binary, config, os.path.join(tmp, "doc3.jsonl"), "data.source=file", "data.path=" + prefix + ".tok",
                       "checkpoint.dir=" + ck3, "train.steps=16", "data.document_mask=true", "data.eod_token=1",
                       "data.reset_positions=true", "data.eod_mask_loss=true")
        check("warning: resumed with data.eod_mask_loss = true (data.eod_token = 1), but the checkpoint's run had false"
              in out and "data.document_mask =" not in out, "... and one that switches the loss mask on, as that")
        # 1800 validation tokens make 54 windows of 33: 7 batches of 8 read some twice, and the log says so.
        out, _ = train(binary, config, os.path.join(tmp, "val.jsonl"), "data.source=file", "data.path=" + prefix + ".tok",
                       "checkpoint.resume=none", "train.steps=1", "log.val_every=1", "log.val_batches=7")
        check("note: a validation reads log.val_batches x train.global_batch = 56 samples, but the validation split "
              "has 54 distinct ones: some count more than once (log.val_batches = 6 reads each at most once)" in out,
              "a validation longer than the validation split is noted")
    print("PASS")


if __name__ == "__main__":
    main()
