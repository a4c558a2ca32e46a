#!/usr/bin/env python3
"""fp16 dynamic loss scaling under ZeRO and 3D layouts on the CPU: the overflow check is global.
A tiny GPT in fp16 starts with a loss scale of 2^24, far above what its f16 gradients can hold,
so the first steps overflow and are skipped while the scale halves (hysteresis 1), then training
goes on. At (tensor, pipeline, data) = (2,2,2) with ZeRO stages 2 and 3 (each rank sees only its
pieces of the gradients) and at data = 4 with stage 1, every step must be skipped or applied
exactly as on one rank, with the same loss scale, and the losses of the applied steps must follow
the one-rank run (fp16 rounding of different reduction orders: relative 2e-3). With the optimizer
offloaded (zero.offload = cpu: a skipped step neither updates on the host nor sends parameters back
up) one rank skips the same steps and its losses are bitwise the plain run's.
Usage: zero_loss_scaling.py TRAIN_GPT MPIEXEC CONFIG"""
import json
import os
import sys
import tempfile

import equivalence

STEPS = 12
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=1", "train.global_batch=8",
        "train.precision=fp16", "fp16.initial_scale_power=24", "fp16.hysteresis=1", "train.grad_clip=0.5",
        "log.val_every=0"]
LOSS_TOL = 2e-3


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    start, _, _, _, _, _, _ = equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))
    steps = [json.loads(l) for l in open(os.path.join(tmp, tag + ".jsonl"))]
    steps = [r for r in steps if "loss_scale" in r]
    return start, [(r["skipped"], r["loss_scale"]) for r in steps], [r["loss"] for r in steps]


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        _, ref_scaling, ref_loss = run(binary, mpiexec, config, tmp, 1, "ref")
        skipped = sum(s for s, _ in ref_scaling)
        if not 0 < skipped < STEPS:
            sys.exit(f"FAIL: the one-rank run skipped {skipped} of {STEPS} steps; the test needs some of each")
        for tp, pp, data, stage in [(2, 2, 2, 2), (2, 2, 2, 3), (1, 1, 4, 1)]:
            tag = f"t{tp}_p{pp}_d{data}_z{stage}"
            start, scaling, loss = run(binary, mpiexec, config, tmp, tp * pp * data, tag, f"parallel.tensor={tp}",
                                       f"parallel.pipeline={pp}", f"zero.stage={stage}")
            dl = max(abs(a - b) / abs(b) for a, b in zip(loss, ref_loss))
            ok = start["zero_stage"] == stage and scaling == ref_scaling and len(loss) == STEPS and dl <= LOSS_TOL
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} tensor={tp} pipeline={pp} data={data} zero={stage}: "
                  f"{'the same' if scaling == ref_scaling else 'NOT the same'} {skipped} skipped steps and loss "
                  f"scales as one rank; max loss rel diff {dl:.2e}")
        _, scaling, loss = run(binary, mpiexec, config, tmp, 1, "offload", "zero.offload=cpu")
        ok = scaling == ref_scaling and loss == ref_loss
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} one rank, zero.offload=cpu: "
              f"{'the same' if scaling == ref_scaling else 'NOT the same'} skipped steps and loss scales, losses "
              f"{'bitwise equal' if loss == ref_loss else 'DIFFERENT'}")
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
