#!/usr/bin/env python3
"""An untied head (model.tie_embeddings = false: lm_head.w of its own) on the CPU in fp32 (DESIGN.md
section 4), dropout on. K steps at data 2 (zero.embedding_grad auto), tensor 2 (the batch split;
lm_head.w split by vocabulary rows), tensor 4 with sequence parallelism, pipeline 2 (1F1B and
interleaved: the last stage holds lm_head.w and no copy of wte, and nothing is summed between the
stages), data 2 at ZeRO stages 2 and 3 (lm_head.w a bucket kept whole) and tensor 2 x pipeline 2 x
data 2 give the same losses, gradient norms and exported weights as one rank, up to fp32
reduction-order rounding. A run stopped after step 3 and resumed continues bitwise on one rank; a
tensor 2 checkpoint resumed on one rank continues as the uninterrupted run. Resuming it with a tied
head, starting an untied run from a tied model (model.init_from) and zero.embedding_grad =
gather_rows are refused with one line; the untied checkpoint starts a fresh untied run (model.init_from).
Usage: untied_head_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import os
import sys
import tempfile

import equivalence

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "model.n_layers=4", "model.tie_embeddings=false", "log.val_every=0",
        "train.grad_clip=0.5"]


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))


def main():
    binary, mpiexec, config = sys.argv[1:4]
    check = equivalence.Checks(binary, mpiexec, config)
    refused = check.refused

    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, _, ref_w, names, ref_norms, out = run(binary, mpiexec, config, tmp, 1, "ref")
        check(names[-1] == "lm_head.w" and names.count("wte") == 1 and "untied head" in out and
              ref_loss[-1] < ref_loss[0],
              f"one rank: lm_head.w last of {len(names)} tensors, the start line names the untied head, "
              f"loss {ref_loss[0]:.4f} -> {ref_loss[-1]:.4f}")

        layouts = [
            (2, "data 2, two micro-batches a rank", []),
            (2, "tensor 2 (batch split)", ["parallel.tensor=2"]),
            (4, "tensor 4, sequence parallel", ["parallel.tensor=4", "parallel.sequence_parallel=true"]),
            (2, "pipeline 2 (1f1b)", ["parallel.pipeline=2"]),
            (2, "pipeline 2 (interleaved, 2 virtual stages)",
             ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"]),
            (2, "data 2, ZeRO 2", ["zero.stage=2"]),
            (2, "data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"]),
            (8, "tensor 2 x pipeline 2 x data 2, sequence parallel, ZeRO 1",
             ["parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true", "zero.stage=1"]),
        ]
        equivalence.check_layouts(lambda *a: run(binary, mpiexec, config, tmp, *a), check, layouts,
                                  (ref_loss, ref_w, ref_norms), STEPS)
        equivalence.check_resumes(lambda *a: run(binary, mpiexec, config, tmp, *a), check, tmp, ref_loss, ref_w, STEPS)

        # The untied checkpoint starts a fresh untied run (model.init_from reads the head from its config).
        _, loss, _, _, _, _, _ = run(binary, mpiexec, config, tmp, 1, "from_untied",
                                     "model.init_from=" + os.path.join(tmp, "ckpt1"), "train.steps=1")
        check(loss[0] < ref_loss[0], f"init_from the untied checkpoint: first loss {loss[0]:.4f} (fresh {ref_loss[0]:.4f})")
        refused(1, BASE + ["checkpoint.dir=" + os.path.join(tmp, "ckpt1"), "model.tie_embeddings=true", "train.steps=8"],
                "untied head", "resume an untied checkpoint with a tied head")
        tied = equivalence.short_checkpoint(binary, mpiexec, config, tmp, "tied")
        refused(1, ["train.device=cpu", "model.tie_embeddings=false", "model.init_from=" + tied],
                "a head tied to the token embedding (model.tie_embeddings = true)", "init_from a tied model")
        refused(2, BASE + ["zero.embedding_grad=gather_rows"], "model.tie_embeddings = true",
                "zero.embedding_grad = gather_rows")
    check.finish()


if __name__ == "__main__":
    main()
