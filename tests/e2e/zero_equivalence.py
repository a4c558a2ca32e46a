#!/usr/bin/env python3
"""ZeRO layout equivalence on the CPU in fp32: a tiny GPT with dropout trained for K steps with
ZeRO stages 0 and 1 at (tensor, pipeline, data) = (1,1,4), (2,1,2), (1,2,2) and (2,2,2) (and stage 1
on a buffer that needs padding) gives the
same losses, gradient norms (clipping active: the norm of the gradient slices summed over the data
group must be exact) and exported weights as one rank, up to fp32 reduction-order rounding. The
start record's model_state_bytes_per_rank follows the formula: params + f32 grads of the padded
buffer in full, AdamW moments and the reduced gradient slice over the data size. A stage-1 run
stopped after step 3 and resumed from its checkpoint continues bitwise.
Usage: zero_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import os
import sys
import tempfile

import equivalence
from equivalence import LOSS_TOL, NORM_TOL, WEIGHT_L2_TOL, WEIGHT_MAX_TOL

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "train.grad_clip=0.5", "log.val_every=0"]


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    start, losses, _, w, _, norms, out = equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))
    return start, losses, norms, w, out


def rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def state_bytes(n, stage, data):
    """fp32: params 4 + grads 4 per (padded) element; stage 0: + m, v (8) per element; stage 1:
    m, v and the reduced gradient slice (12) per element of this rank's slice only."""
    if stage == 0 or data == 1:
        return n * 16
    s = -(-n // data)
    return s * data * 8 + s * 12


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, ref_norms, ref_w, _ = run(binary, mpiexec, config, tmp, 1, "ref")
        results = {}
        for tp, pp, data in [(1, 1, 4), (2, 1, 2), (1, 2, 2), (2, 2, 2)]:
            for stage in (0, 1):
                ranks = tp * pp * data
                tag = f"t{tp}_p{pp}_d{data}_z{stage}"
                start, loss, norms, w, out = run(binary, mpiexec, config, tmp, ranks, tag, f"parallel.tensor={tp}",
                                                 f"parallel.pipeline={pp}", f"zero.stage={stage}")
                results[tag] = (loss, w, start["model_state_bytes_per_rank"])
                dl, dn = rel(loss, ref_loss), rel(norms, ref_norms)
                dw = max(abs(a - b) for a, b in zip(w, ref_w))
                l2 = (sum((a - b) ** 2 for a, b in zip(w, ref_w)) / sum(b * b for b in ref_w)) ** 0.5
                want = [state_bytes(n, stage, data) for n in start["params_per_rank"]]
                ok_bytes = start["model_state_bytes_per_rank"] == want
                if stage == 1:  # and it is less than stage 0's on every rank
                    ok_bytes &= all(a < b for a, b in zip(want, results[f"t{tp}_p{pp}_d{data}_z0"][2]))
                ok = (start["layout"] == {"tensor": tp, "pipeline": pp, "data": data} and start["zero_stage"] == stage
                      and f"ZeRO stage {stage}" in out and ok_bytes and len(loss) == STEPS and len(w) == len(ref_w)
                      and dl <= LOSS_TOL and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL)
                failed |= not ok
                print(f"{'ok  ' if ok else 'FAIL'} tensor={tp} pipeline={pp} data={data} zero={stage}: max loss rel "
                      f"diff {dl:.2e}, grad norm {dn:.2e}, weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}; "
                      f"model state on rank 0 {start['model_state_bytes_per_rank'][0]} bytes "
                      f"({'as' if ok_bytes else 'NOT as'} the formula: {want[0]})")
        # A buffer that does not divide by the data size: 63,822 parameters over 4 ranks (padded by 2).
        odd = ["model.d_model=66", "model.n_heads=3", "model.n_layers=1"]
        _, odd_loss, odd_norms, odd_w, _ = run(binary, mpiexec, config, tmp, 1, "odd_ref", *odd)
        start, loss, norms, w, _ = run(binary, mpiexec, config, tmp, 4, "odd_d4_z1", *odd, "zero.stage=1")
        n = start["params_per_rank"][0]
        dl, dn = rel(loss, odd_loss), rel(norms, odd_norms)
        dw = max(abs(a - b) for a, b in zip(w, odd_w))
        ok = (n % 4 != 0 and start["model_state_bytes_per_rank"] == [state_bytes(n, 1, 4)] * 4 and len(w) == len(odd_w)
              and dl <= LOSS_TOL and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL)
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} data=4 zero=1 with {n} parameters (padded to {-(-n // 4) * 4}): max loss rel "
              f"diff {dl:.2e}, grad norm {dn:.2e}, weights max abs diff {dw:.2e}")
        # Resume under stage 1: stop after step 3, resume with the same layout, bitwise.
        ck = os.path.join(tmp, "ck")
        z1 = ["parallel.tensor=2", "zero.stage=1", "checkpoint.dir=" + ck]
        whole_loss, whole_w, _ = results["t2_p1_d2_z1"]
        run(binary, mpiexec, config, tmp, 4, "ck_first", *z1, "train.stop_after=3")
        _, resumed, _, resumed_w, _ = run(binary, mpiexec, config, tmp, 4, "ck_resume", *z1)
        ok = resumed == whole_loss[3:] and resumed_w == whole_w
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} tensor=2 data=2 zero=1 checkpoint after step 3, resumed on the same layout: "
              f"{'bitwise equal to' if ok else 'differs from'} the uninterrupted run")
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
