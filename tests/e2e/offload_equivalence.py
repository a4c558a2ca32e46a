#!/usr/bin/env python3
"""Optimizer offload (zero.offload = "cpu") on the CPU: a tiny GPT with dropout trained for K steps
with the master weights and Adam moments in the offloaded host buffers (gradients staged down per
bucket, AdamW on the host, parameters copied back) gives bitwise the losses, gradient norms and
exported weights of the same run without offload: in fp32, bf16 (split masters) and fp16 (loss
scaling), at ZeRO stages 0, 1 and 3 (stage 3 with tensor = 2), and at pipeline = 2 (the tied
embedding's gradient summed over its stages before the host's AdamW). The device model state rank 0
allocates shrinks, the start record's per-rank model state follows the ZeRO formula without the
master and moments, and the run says where they live. A checkpoint written with offload resumes
without it, and one written without resumes with it, bitwise (fp32, bf16 and fp16 at stage 0,
bf16 at stage 1: the checkpoint format does not depend on where the state lived). With
zero.offload = nvme (the state in unlinked files mapped from zero.offload_dir) the runs are bitwise
the plain ones too, and the directory is left empty.
Usage: offload_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import os
import sys
import tempfile

import equivalence

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=1", "train.global_batch=8",
        "model.dropout=0.1", "train.grad_clip=0.5", "log.val_every=0"]


def state_bytes(n, precision, stage, data, offload, grad_dtype):
    """ZeroOptimizer::model_state_bytes: parameters (stage 3: over N), gradients (f32, or 16-bit
    under train.grad_dtype; stages 2-3: f32 over N; stage 1: whole plus the f32 reduced pieces), and
    on the device unless offloaded the master (bf16: 2 low bytes, fp16: 4) and the moments (8), over N."""
    e, master = {"fp32": (4, 0), "bf16": (2, 2), "fp16": (2, 4)}[precision]
    g = 4 if grad_dtype == "f32" else 2
    N = data if stage >= 1 else 1
    params = n * e // N if stage >= 3 else n * e
    grads = n * 4 // N if stage >= 2 else n * g + (n * 4 // N if N > 1 else 0)
    return params + grads + (0 if offload else n * (master + 8) // N)


def formula_ok(start, precision, offload):
    stage, data = start["zero_stage"], start["layout"]["data"]
    want = [state_bytes(n, precision, stage, data, offload, start["grad_dtype"]) for n in start["params_per_rank"]]
    return start["model_state_bytes_per_rank"] == want


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    start, losses, _, w, _, norms, out = equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))
    return start, losses, norms, w, out


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(1, "fp32", ["zero.stage=0"]), (2, "fp32", ["zero.stage=1"]),
                 (4, "fp32", ["parallel.tensor=2", "zero.stage=3"]), (2, "fp32", ["parallel.pipeline=2", "zero.stage=0"]),
                 (1, "bf16", ["zero.stage=0"]),
                 (2, "bf16", ["zero.stage=1"]), (1, "fp16", ["zero.stage=0"]),
                 # one micro-batch a step on one rank: 16-bit gradients (train.grad_dtype), staged as such
                 (1, "bf16", ["zero.stage=0", "train.global_batch=1"]), (1, "fp16", ["zero.stage=0", "train.global_batch=1"])]
        for ranks, precision, sets in cases:
            name = f"{precision} {ranks} rank(s) {' '.join(sets)}"
            tag = f"{precision}_{ranks}_{'_'.join(s.replace('=', '') for s in sets)}"
            sets = sets + [f"train.precision={precision}"]
            s0, loss0, norms0, w0, _ = run(binary, mpiexec, config, tmp, ranks, tag + "_dev", *sets)
            s1, loss1, norms1, w1, out = run(binary, mpiexec, config, tmp, ranks, tag + "_off", *sets, "zero.offload=cpu")
            same = loss1 == loss0 and norms1 == norms0 and w1 == w0 and len(loss0) == STEPS
            smaller = (s1["model_state_bytes_allocated"] < s0["model_state_bytes_allocated"]
                       and formula_ok(s0, precision, False) and formula_ok(s1, precision, True))
            said = "offload: master weights and Adam moments in host memory" in out
            grads16 = "train.global_batch=1" in sets and precision != "fp32"
            said = said and (s0["grad_dtype"] != "f32") == grads16 and s1["grad_dtype"] == s0["grad_dtype"]
            ok = same and smaller and said
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: offloaded {'bitwise equal to' if same else 'DIFFERS from'} "
                  f"on the device; model state allocated {s1['model_state_bytes_allocated']} against "
                  f"{s0['model_state_bytes_allocated']} bytes{'' if smaller else ' (NOT smaller, or not as the formula)'}"
                  f"; gradients {s0['grad_dtype']}{'' if said else ' (NOT as expected, or no offload line in the output)'}")
        # zero.offload = nvme: the same state in unlinked, mapped files in zero.offload_dir, which
        # is left as it was (here: empty) after the run.
        for ranks, precision, sets in [(1, "fp32", ["zero.stage=0"]), (2, "bf16", ["zero.stage=1"])]:
            name = f"{precision} {ranks} rank(s) {' '.join(sets)}"
            tag = f"nvme_{precision}_{ranks}"
            sets = sets + [f"train.precision={precision}"]
            files = os.path.join(tmp, tag + "_files")
            os.mkdir(files)
            _, loss0, norms0, w0, _ = run(binary, mpiexec, config, tmp, ranks, tag + "_dev", *sets)
            _, loss1, norms1, w1, out = run(binary, mpiexec, config, tmp, ranks, tag + "_off", *sets,
                                            "zero.offload=nvme", "zero.offload_dir=" + files)
            same = loss1 == loss0 and norms1 == norms0 and w1 == w0 and len(loss0) == STEPS
            said = f"master weights and Adam moments in files in {files}" in out
            left = os.listdir(files)
            ok = same and said and not left
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} nvme {name}: {'bitwise equal to' if same else 'DIFFERS from'} on the "
                  f"device; {'said where' if said else 'no offload line'}; offload_dir left {left}")
        # Checkpoints cross between offloaded and not: stop after step 3 with one, resume with the other.
        for ranks, precision, sets in [(1, "fp32", ["zero.stage=0"]), (1, "bf16", ["zero.stage=0"]),
                                       (1, "fp16", ["zero.stage=0"]), (2, "bf16", ["zero.stage=1"])]:
            sets = sets + [f"train.precision={precision}"]
            tag = f"ck_{precision}_{ranks}"
            _, whole, _, whole_w, _ = run(binary, mpiexec, config, tmp, ranks, tag + "_whole", *sets)
            for first, then in [("cpu", "none"), ("none", "cpu")]:
                ck = os.path.join(tmp, f"{tag}_{first}")
                run(binary, mpiexec, config, tmp, ranks, f"{tag}_{first}_first", *sets, "checkpoint.dir=" + ck,
                    "train.stop_after=3", f"zero.offload={first}")
                _, resumed, _, resumed_w, _ = run(binary, mpiexec, config, tmp, ranks, f"{tag}_{first}_resume", *sets,
                                                  "checkpoint.dir=" + ck, f"zero.offload={then}")
                ok = resumed == whole[3:] and resumed_w == whole_w
                failed |= not ok
                print(f"{'ok  ' if ok else 'FAIL'} {precision} {ranks} rank(s): checkpoint written with offload "
                      f"{first}, resumed with {then}: {'bitwise equal to' if ok else 'DIFFERS from'} the "
                      f"uninterrupted run")
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
