#!/usr/bin/env python3
"""Optimizer offload (zero.offload = "cpu") on the CPU: a tiny GPT with dropout trained for K steps
with the master weights and Adam moments in the offloaded host buffers (gradients staged down per
bucket, AdamW on the host, parameters copied back) gives bitwise the losses, gradient norms and
exported weights of the same run without offload: in fp32, bf16 (split masters) and fp16 (loss
scaling), at ZeRO stages 0, 1 and 3 (stage 3 with tensor = 2). The start record's device model
state shrinks by the moments (and the master), and the run says where they live. A checkpoint
written with offload resumes without it, and one written without resumes with it, bitwise (the
checkpoint format does not depend on where the state lived).
Usage: offload_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import os
import sys
import tempfile

import equivalence

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=1", "train.global_batch=8",
        "model.dropout=0.1", "train.grad_clip=0.5", "log.val_every=0"]


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    start, losses, _, w, _, norms, out = equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))
    return start, losses, norms, w, out


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        cases = [(1, "fp32", ["zero.stage=0"]), (2, "fp32", ["zero.stage=1"]),
                 (4, "fp32", ["parallel.tensor=2", "zero.stage=3"]), (1, "bf16", ["zero.stage=0"]),
                 (2, "bf16", ["zero.stage=1"]), (1, "fp16", ["zero.stage=0"])]
        for ranks, precision, sets in cases:
            name = f"{precision} {ranks} rank(s) {' '.join(sets)}"
            tag = f"{precision}_{ranks}_{'_'.join(s.replace('=', '') for s in sets)}"
            sets = sets + [f"train.precision={precision}"]
            s0, loss0, norms0, w0, _ = run(binary, mpiexec, config, tmp, ranks, tag + "_dev", *sets)
            s1, loss1, norms1, w1, out = run(binary, mpiexec, config, tmp, ranks, tag + "_off", *sets, "zero.offload=cpu")
            same = loss1 == loss0 and norms1 == norms0 and w1 == w0 and len(loss0) == STEPS
            smaller = s1["model_state_bytes_allocated"] < s0["model_state_bytes_allocated"]
            said = "offload: master weights and Adam moments in host memory" in out
            ok = same and smaller and said
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: offloaded {'bitwise equal to' if same else 'DIFFERS from'} "
                  f"on the device; model state allocated {s1['model_state_bytes_allocated']} against "
                  f"{s0['model_state_bytes_allocated']} bytes{'' if said else '; no offload line in the output'}")
        # Checkpoints cross between offloaded and not: stop after step 3 with one, resume with the other.
        for ranks, precision, sets in [(1, "fp32", ["zero.stage=0"]), (2, "bf16", ["zero.stage=1"])]:
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
