#!/usr/bin/env python3
"""Supervised fine-tuning data (DESIGN.md section 4): prepare_data --json-keys prompt,response turns
JSON Lines of question and answer into a dataset with a loss mask (PREFIX.lossmask) that keeps only
the answers' tokens as targets; training on it (CPU, fp32, dropout on) then differs from training on
the same tokens without the mask, the llm.c format trains the same model as the Megatron one, and
data 2 with 2 micro-batches each, pipeline 2 x data 2 and tensor 2 give the same losses, validation
losses, gradient norms and weights as one rank (the mean over the targets kept is counted over each
step's whole batch). With data.packing = documents (whole examples a sample, padded) the same holds
for data 2 and tensor 2, and an llm.c file is refused. The loss and every gradient match the PyTorch
reference where torch is installed, either way. With one key (--json-keys response) each line is a document and no mask is written. Bad
JSON lines, missing keys, three keys, responses all empty (the old dataset under --force kept whole),
validation samples without a target, ranks reading different data (one without the mask), data whose
mask was not copied beside it and a truncated mask are refused with one line; some empty responses
are warned of, and a partial file an interrupted run left is refused, or with --force removed (never
moved into place). Usage: sft_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import equivalence

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "model.n_layers=4", "log.val_every=3", "log.val_batches=1", "train.grad_clip=0.5",
        "data.source=file"]


def prepare(prepare_data, jsonl, prefix, *extra):
    cmd = [prepare_data, "--input", jsonl, "--output", prefix, "--tokenizer", "char", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def copy_without_mask(src, dst):
    """The same tokens and vocabulary, no mask: the vocabulary's "loss_mask": true (which makes
    training require the mask) taken out."""
    for ext in (".bin", ".idx"):
        shutil.copy(src + ext, dst + ext)
    with open(src + ".vocab.json") as f:
        vocab = json.load(f)
    if vocab.pop("loss_mask", None) is not True:
        raise SystemExit(f"{src}.vocab.json does not say the data has a loss mask")
    with open(dst + ".vocab.json", "w") as f:
        json.dump(vocab, f)


def main():
    binary, mpiexec, config = sys.argv[1:4]
    prepare_data = os.path.join(os.path.dirname(binary), "prepare_data")
    check = equivalence.Checks(binary, mpiexec, config)
    with tempfile.TemporaryDirectory() as tmp:
        rng = random.Random(3)
        jsonl = os.path.join(tmp, "qa.jsonl")
        with open(jsonl, "w") as f:
            for i in range(600):
                a, b = rng.randrange(100), rng.randrange(100)
                f.write(json.dumps({"id": i, "prompt": f"Q: {a}+{b}=", "response": f" {a + b}.\n"}) + "\n")
        sft, sft_llmc, plain = (os.path.join(tmp, n) for n in ("sft", "sft_llmc", "plain"))
        p = prepare(prepare_data, jsonl, sft, "--json-keys", "prompt,response")
        check(p.returncode == 0 and "sft.lossmask: " in p.stdout and "targets to learn (the response's)" in p.stdout,
              f"prepare_data --json-keys prompt,response: {p.stdout.strip().splitlines()[-2:]} {p.stderr.strip()}")
        prepare(prepare_data, jsonl, sft_llmc, "--json-keys", "prompt,response", "--format", "llmc")
        text = os.path.join(tmp, "text")
        p = prepare(prepare_data, jsonl, text, "--json-keys", "response")
        check(p.returncode == 0 and "600 documents" in p.stdout and not os.path.exists(text + ".lossmask"),
              f"prepare_data --json-keys response: one document a line, no mask: {p.stdout.strip().splitlines()[-1]}")
        os.makedirs(plain)
        copy_without_mask(sft, os.path.join(plain, "p"))

        def run(ranks, tag, path, *sets):
            return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + ["data.path=" + path, *sets])

        _, ref_loss, ref_val, ref_w, _, ref_norms, out = run(1, "ref", sft)
        _, plain_loss, plain_val, _, _, _, _ = run(1, "plain", os.path.join(plain, "p"))
        check("loss: the mean over the targets kept: those sft.lossmask marks" in out and len(ref_val) == 2 and
              max(abs(a - b) for a, b in zip(ref_loss, plain_loss)) > 1e-3 and
              max(abs(a - b) for a, b in zip(ref_val, plain_val)) > 1e-3,
              f"the loss mask: the log says so, losses {ref_loss[0]:.5f} .. (val {ref_val[0]:.5f} ..) against "
              f"{plain_loss[0]:.5f} .. (val {plain_val[0]:.5f} ..) on every target")
        _, llmc_loss, _, llmc_w, _, _, _ = run(1, "llmc", sft_llmc + ".tok")
        check(llmc_loss == ref_loss and llmc_w == ref_w, "the llm.c format with its mask trains the same model bitwise")
        equivalence.check_layouts(lambda ranks, tag, *sets: run(ranks, tag, sft, *sets), check, [
            (2, "data 2, 2 micro-batches each", []),
            (4, "pipeline 2 x data 2", ["parallel.pipeline=2"]),
            (2, "tensor 2", ["parallel.tensor=2"])], (ref_loss, ref_w, ref_norms), STEPS, ref_val)

        # Whole examples a sample (data.packing = documents): padded, never cut from their prompts.
        packed = ["data.packing=documents"]
        _, pk_loss, pk_val, pk_w, _, pk_norms, out = run(1, "packed", sft, *packed)
        check("the padding after each sample's whole documents (data.packing = documents: " in out and
              "; those sft.lossmask marks" in out and max(abs(a - b) for a, b in zip(pk_loss, ref_loss)) > 1e-3,
              f"whole examples a sample: the log says so, losses {pk_loss[0]:.5f} .. against {ref_loss[0]:.5f} .. "
              f"cut anywhere")
        equivalence.check_layouts(lambda ranks, tag, *sets: run(ranks, "p" + tag, sft, *packed, *sets), check, [
            (2, "whole examples, data 2, 2 micro-batches each", []),
            (2, "whole examples, tensor 2", ["parallel.tensor=2"])], (pk_loss, pk_w, pk_norms), STEPS, pk_val)
        check.refused(1, BASE + ["data.path=" + sft_llmc + ".tok"] + packed,
                      'data.packing = "documents" needs the documents\' lengths, which a Megatron dataset\'s index holds',
                      "whole examples from an llm.c token file")

        parity = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_parity.py")
        for what, sets in [("", []), (", whole examples a sample", packed)]:
            p = subprocess.run([sys.executable, parity, binary, config, "--set", "data.source=file", "--set",
                                "data.path=" + sft] + [x for kv in sets for x in ("--set", kv)],
                               capture_output=True, text=True, timeout=300)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("loss:", "training step", "SKIP"))]
            if p.returncode == 77:
                print("skip the PyTorch reference:", lines)
            else:
                check(p.returncode == 0, f"against the PyTorch reference{what}: {lines}")

        # Refusals, one line each.
        bad = os.path.join(tmp, "bad.jsonl")
        for text, want in [('{"prompt": "a", "response": "b"}\n{"prompt": "a", "response": \n', "bad.jsonl:2: invalid JSON"),
                           ('{"prompt": "a"}\n', 'bad.jsonl:1: no member "response" (--json-keys names the strings to read)'),
                           ('{"prompt": "a", "response": 3}\n', 'bad.jsonl:1: the member "response" is not a string'),
                           ('["a", "b"]\n', "bad.jsonl:1: not a JSON object")]:
            with open(bad, "w") as f:
                f.write(text)
            p = prepare(prepare_data, bad, os.path.join(tmp, "bad"), "--json-keys", "prompt,response")
            err = p.stderr.strip().splitlines()
            check(p.returncode == 1 and len(err) == 1 and want in err[0] and not os.path.exists(os.path.join(tmp, "bad.bin")),
                  f"prepare_data refuses {text.splitlines()[-1]!r}: {err}")
        with open(bad, "wb") as f:  # a byte order mark before the first line is read past
            f.write(b'\xef\xbb\xbf{"prompt": "Q: 1+1=", "response": " 2."}\n')
        p = prepare(prepare_data, bad, os.path.join(tmp, "bom"), "--json-keys", "prompt,response")
        check(p.returncode == 0 and "1 documents" in p.stdout, f"a UTF-8 byte order mark: {p.stderr.strip()}")
        p = prepare(prepare_data, jsonl, os.path.join(tmp, "three"), "--json-keys", "a,b,c")
        check(p.returncode == 1 and "--json-keys takes one key (the text's) or two different ones" in p.stderr,
              f"three keys refused: {p.stderr.strip()}")
        # A --force run that fails keeps the old dataset whole and leaves no partial files.
        empty = os.path.join(tmp, "empty.jsonl")
        with open(empty, "w") as f:
            f.write('{"prompt": "Q: 1+1=", "response": ""}\n' * 50)
        before = {ext: open(sft + ext, "rb").read() for ext in (".bin", ".idx", ".vocab.json", ".lossmask")}
        p = prepare(prepare_data, empty, sft, "--json-keys", "prompt,response", "--force")
        err = p.stderr.strip().splitlines()
        after = {ext: open(sft + ext, "rb").read() for ext in before}
        check(p.returncode == 1 and len(err) == 1 and 'every "response" is empty: no response to learn' in err[0] and
              after == before and not [n for n in os.listdir(tmp) if ".partial" in n],
              f"responses all empty: refused, the old dataset kept as it was, no partial files: {err}")
        # Validation samples without a target (the last fifth of the answers empty): refused at the start.
        tail = os.path.join(tmp, "tail.jsonl")
        with open(jsonl) as src, open(tail, "w") as f:
            for i, line in enumerate(src):
                r = json.loads(line)
                f.write(json.dumps({"prompt": r["prompt"], "response": r["response"] if i < 480 else ""}) + "\n")
        p = prepare(prepare_data, tail, os.path.join(tmp, "tail"), "--json-keys", "prompt,response")
        check('warning: 120 of the 600 "response" strings are empty (the first at ' + tail + ':481): those examples teach nothing' in p.stdout,
              f"empty responses warned of: {[ln for ln in p.stdout.splitlines() if 'warning' in ln]}")
        check.refused(1, BASE + ["data.path=" + os.path.join(tmp, "tail")],
                      "the validation's samples (log.val_batches x train.global_batch = 8) keep no target",
                      "validation without a target")
        # Ranks reading different data under the same config: each rank in its own directory, rank 1's
        # copy of data.path = "s" without the mask (an MPMD launch).
        cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-x", "OMP_NUM_THREADS=1"]
        for rank in range(2):
            wdir = os.path.join(tmp, f"rank{rank}")
            os.makedirs(wdir)
            if rank == 0:
                for ext in (".bin", ".idx", ".vocab.json", ".lossmask"):
                    shutil.copy(sft + ext, os.path.join(wdir, "s" + ext))
            else:
                copy_without_mask(sft, os.path.join(wdir, "s"))
            cmd += ["-np", "1", "-wdir", wdir, binary, config] + \
                [x for kv in BASE + ["data.path=s"] for x in ("--set", kv)] + [":"]
        p = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=120)
        err = [ln for ln in p.stderr.splitlines() if ln.startswith("error")]
        check(p.returncode != 0 and len(err) == 1 and "the ranks do not all read the same data (rank 1: s.bin: " in err[0]
              and "; targets: every one; rank 0: s.bin: " in err[0] and "loss mask" in err[0],
              f"ranks reading different data refused: {err}")
        # Data whose vocabulary says it was written with a mask, copied without it: refused.
        os.makedirs(os.path.join(tmp, "nomask"))
        for ext in (".bin", ".idx", ".vocab.json"):
            shutil.copy(sft + ext, os.path.join(tmp, "nomask", "s" + ext))
        check.refused(1, BASE + ["data.path=" + os.path.join(tmp, "nomask", "s")],
                      "s.lossmask is missing: " + os.path.join(tmp, "nomask", "s.vocab.json") +
                      " says the data was written with that loss mask", "the mask not copied beside the data")
        # What an interrupted run left under PREFIX.partial is neither moved into place nor kept.
        with open(os.path.join(tmp, "stale.partial.bin"), "wb") as f:
            f.write(b"left by a killed run")
        p = prepare(prepare_data, jsonl, os.path.join(tmp, "stale"), "--json-keys", "prompt,response", "--format", "llmc")
        check(p.returncode == 1 and "stale.partial.bin exists (left by an interrupted prepare_data" in p.stderr,
              f"a stale partial file refused without --force: {p.stderr.strip()}")
        p = prepare(prepare_data, jsonl, os.path.join(tmp, "stale"), "--json-keys", "prompt,response", "--format", "llmc",
                    "--force")
        left = sorted(n for n in os.listdir(tmp) if n.startswith("stale"))
        check(p.returncode == 0 and left == ["stale.lossmask", "stale.tok", "stale.vocab.json"],
              f"with --force a stale partial file is removed, not moved into place: {left}")
        with open(sft + ".lossmask", "r+b") as f:
            f.truncate(os.path.getsize(sft + ".lossmask") - 1)
        check.refused(1, BASE + ["data.path=" + sft], "sft.lossmask: 8582 bytes, not the 8583 a mask of 8559 tokens "
                      "takes: a truncated or damaged file", "a truncated mask")
    check.finish()


if __name__ == "__main__":
    main()
