#!/usr/bin/env python3
"""Tensor layout equivalence (DESIGN.md section 4) on the CPU in fp32: a tiny GPT with dropout (residual,
embedding and attention) trained for K steps on 1 rank and with tensor = 2 and 4 (each with and
without sequence parallelism), tensor 2 x data 2 (also with the row-parallel forward in 3 communication
chunks), tensor 2 x pipeline 2 and tensor 2 x pipeline 2 x data 2 gives the same losses, validation losses and exported weights (gathered from the shards) up
to fp32 reduction-order rounding; so do tensor = 2 runs without dropout (the residual adds in rank 0's GEMM
epilogues), with the batch split (each block's forward in two halves of the micro-batch, the default) and without. A tensor = 2 run stopped and resumed from its checkpoint
continues bitwise, and the checkpoint (in the whole model's layout) resumes on one rank. Bad shapes fail on every rank with one clear line.
Usage: tensor_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import os
import sys
import tempfile

import equivalence
from equivalence import LOSS_TOL, NORM_TOL, WEIGHT_L2_TOL, WEIGHT_MAX_TOL, compare

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "model.n_layers=2", "train.micro_batch=2", "train.global_batch=4",
        "model.dropout=0.1", "log.val_every=3", "log.val_batches=2"]


def launch(binary, mpiexec, config, ranks, sets, extra=()):
    return equivalence.launch(binary, mpiexec, config, ranks, BASE + list(sets), extra)


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))[:6]


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        ref_start, ref_loss, ref_val, ref_w, ref_names, ref_norms = run(binary, mpiexec, config, tmp, 1, "t1")
        results = {}
        # (tensor, pipeline, data, sequence parallel, row-parallel communication chunks)
        cases = [(2, 1, 1, False, 1), (2, 1, 1, True, 1), (4, 1, 1, False, 1), (4, 1, 1, True, 1), (2, 1, 2, True, 1),
                 (2, 2, 1, False, 1), (2, 2, 1, True, 1), (2, 2, 2, True, 1), (2, 1, 2, False, 3)]
        for tp, pp, data, sp, chunks in cases:
            ranks = tp * pp * data
            tag = f"t{tp}_p{pp}_d{data}_sp{int(sp)}" + (f"_c{chunks}" if chunks > 1 else "")
            start, loss, val, w, names, norms = run(binary, mpiexec, config, tmp, ranks, tag, f"parallel.tensor={tp}",
                                             f"parallel.pipeline={pp}", f"parallel.sequence_parallel={str(sp).lower()}",
                                             f"parallel.tensor_comm_chunks={chunks}")
            results[tag] = (loss, w)
            dl, dw, l2 = compare(loss, ref_loss, w, ref_w)
            ok_layout = start["layout"] == {"tensor": tp, "pipeline": pp, "data": data}
            # Each rank holds about 1/(tp pp) of the parameters (replicated LayerNorms and biases aside).
            ok_params = max(start["params_per_rank"]) < ref_start["params_per_rank"][0] / tp * 1.1
            ok = (ok_layout and ok_params and names == ref_names and len(loss) == STEPS and len(w) == len(ref_w)
                  and dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL)
            # Validation reads log.val_batches global batches: the same samples on every layout.
            dv = max(abs(a - b) / abs(b) for a, b in zip(val, ref_val))
            ok = ok and len(val) == len(ref_val) and dv <= LOSS_TOL
            # The gradient norm counts split parameters on every tensor rank, replicated ones once.
            dn = max(abs(a - b) / abs(b) for a, b in zip(norms, ref_norms))
            ok = ok and len(norms) == STEPS and dn <= NORM_TOL
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} tensor={tp} pipeline={pp} data={data} sequence_parallel={sp} "
                  f"comm_chunks={chunks}: "
                  f"layout reported {start['layout']}, params on rank 0 {start['params_per_rank'][0]}, "
                  f"max loss rel diff {dl:.2e}, val {dv:.2e}, grad norm {dn:.2e}, weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}")

        # Without dropout the residual adds are rank 0's GEMM epilogues; the batch split (on by default:
        # micro-batch 2 runs as two halves of one sample) against the whole micro-batch, and against
        # one rank without dropout.
        nodrop = ["model.dropout=0", "model.attention_dropout=0"]
        _, ref0_loss, _, ref0_w, _, _ = run(binary, mpiexec, config, tmp, 1, "t1_nodrop", *nodrop)
        for ranks, sets in [(2, ["parallel.tensor=2"]), (2, ["parallel.tensor=2", "parallel.tensor_split_batch=false"]),
                            (4, ["parallel.tensor=2"]), (4, ["parallel.tensor=2", "parallel.pipeline=2"])]:
            tag = "nodrop_" + "_".join(x.split(".")[1].replace("=", "") for x in sets) + f"_n{ranks}"
            _, loss, _, w, _, _ = run(binary, mpiexec, config, tmp, ranks, tag, *nodrop, *sets)
            dl, dw, l2 = compare(loss, ref0_loss, w, ref0_w)
            ok = len(loss) == STEPS and dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} no dropout, {ranks} ranks, {' '.join(sets)}: max loss rel diff {dl:.2e}, "
                  f"weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}")

        # Checkpoints: stop a tensor = 2 run (sequence parallel) after step 3 and resume it with the
        # same layout: bitwise the uninterrupted run.
        ck = os.path.join(tmp, "ck")
        t2 = ["parallel.tensor=2", "parallel.sequence_parallel=true", "checkpoint.dir=" + ck]
        whole_loss, whole_w = results["t2_p1_d1_sp1"]
        run(binary, mpiexec, config, tmp, 2, "ck_first", *t2, "train.stop_after=3")
        _, resumed, _, resumed_w, _, _ = run(binary, mpiexec, config, tmp, 2, "ck_resume", *t2)
        ok = resumed == whole_loss[3:] and resumed_w == whole_w
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} tensor=2 sequence_parallel checkpoint after step 3, resumed with tensor=2: "
              f"{'bitwise equal' if ok else 'differs from'} the uninterrupted run")

        # The checkpoint is in the whole model's layout: it resumes on one rank too.
        ck1 = os.path.join(tmp, "ck1")
        run(binary, mpiexec, config, tmp, 2, "ck1_first", *t2[:2], "checkpoint.dir=" + ck1, "train.stop_after=3")
        _, on_one, _, on_one_w, _, _ = run(binary, mpiexec, config, tmp, 1, "ck1_on_one", "checkpoint.dir=" + ck1)
        dl, dw, l2 = compare(on_one, ref_loss[3:], on_one_w, ref_w)
        ok = len(on_one) == STEPS - 3 and dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} tensor=2 checkpoint of step 3 resumed on one rank: max loss rel diff "
              f"{dl:.2e}, weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}")

        # Shapes that do not fit: one "error:" line, every rank exits non-zero, no crash banner.
        bad = [(3, ["parallel.tensor=3"], "model.n_heads = 4 must be divisible by parallel.tensor = 3"),
               (4, ["parallel.tensor=4", "parallel.sequence_parallel=true", "train.micro_batch=1",
                    "model.seq_len=30"], "tokens of a micro-batch into parallel.tensor = 4 shards"),
               (2, ["parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.tensor_comm_chunks=2"],
                "parallel.tensor_comm_chunks = 2 applies only without parallel.sequence_parallel")]
        for ranks, sets, want in bad:
            cmd, p = launch(binary, mpiexec, config, ranks, sets)
            errors = [line for line in p.stderr.splitlines() if line.startswith("error")]
            banner = any(b in p.stderr + p.stdout for b in ("MPI_ABORT", "terminate called", "Segmentation", "[rank "))
            ok = p.returncode != 0 and len(errors) == 1 and want in errors[0] and not banner
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {' '.join(sets)}: exit {p.returncode}, "
                  f"{errors[0] if len(errors) == 1 else errors}")
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
