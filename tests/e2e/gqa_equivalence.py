#!/usr/bin/env python3
"""Grouped-query attention (model.n_kv_heads = 2 of the tiny model's 4 heads) on the CPU in fp32
(DESIGN.md section 4), dropout on. K steps at data 2, tensor 2 (the batch split; each rank 2 query
heads and their one key-value head), tensor 2 with sequence parallelism and element-wise
recomputation, pipeline 2 (1F1B and interleaved), ZeRO stage 3 with full recomputation, tensor 2 x
pipeline 2 x data 2, and with rotary positions at tensor 2, give the same losses, gradient norms and
exported weights as one rank, up to fp32 reduction-order rounding; multi-query attention
(model.n_kv_heads = 1) trains at data 2 as on one rank. A run stopped after step 3 and resumed
continues bitwise on one rank; a tensor 2 checkpoint resumed on one rank continues as the
uninterrupted run. One line refuses: resuming with another n_kv_heads, init_from a model with as many
key-value heads as heads, n_kv_heads that does not divide n_heads, a tensor group that does not
divide n_kv_heads, and exporting to Hugging Face GPT-2.
Usage: gqa_equivalence.py TRAIN_GPT MPIEXEC CONFIG [EXPORT_HF]"""
import os
import sys
import tempfile

import equivalence

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "model.n_layers=4", "model.n_kv_heads=2", "log.val_every=0", "train.grad_clip=0.5"]


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))


def main():
    binary, mpiexec, config = sys.argv[1:4]
    export_hf = sys.argv[4] if len(sys.argv) > 4 else None
    check = equivalence.Checks(binary, mpiexec, config)
    refused = check.refused

    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, _, ref_w, _, ref_norms, out = run(binary, mpiexec, config, tmp, 1, "ref")
        check("2 key-value heads" in out and len(ref_w) > 0 and ref_loss[-1] < ref_loss[0],
              f"one rank: the start line names 2 key-value heads, loss {ref_loss[0]:.4f} -> {ref_loss[-1]:.4f}")

        layouts = [
            (2, "data 2, two micro-batches a rank", []),
            (2, "tensor 2 (batch split)", ["parallel.tensor=2"]),
            (2, "tensor 2, sequence parallel, element-wise recomputation",
             ["parallel.tensor=2", "parallel.sequence_parallel=true", "train.checkpointing=elementwise"]),
            (2, "pipeline 2 (1f1b)", ["parallel.pipeline=2"]),
            (2, "pipeline 2 (interleaved, 2 virtual stages)",
             ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"]),
            (2, "data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"]),
            (8, "tensor 2 x pipeline 2 x data 2, sequence parallel, ZeRO 1",
             ["parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true", "zero.stage=1"]),
        ]
        equivalence.check_layouts(lambda *a: run(binary, mpiexec, config, tmp, *a), check, layouts,
                                  (ref_loss, ref_w, ref_norms), STEPS)
        for tag, what, sets in [("rope", "rotary positions", ["model.position_embedding=rope"]),
                                ("mqa", "multi-query (one key-value head)", ["model.n_kv_heads=1"])]:
            _, one_loss, _, one_w, _, one_norms, _ = run(binary, mpiexec, config, tmp, 1, tag + "1", *sets)
            ranks, layout = (2, ["parallel.tensor=2"]) if tag == "rope" else (2, [])
            _, loss, _, w, _, norms, _ = run(binary, mpiexec, config, tmp, ranks, tag + "2", *sets, *layout)
            ok, text = equivalence.layout_line((loss, w, norms), (one_loss, one_w, one_norms), STEPS)
            check(ok and one_w != ref_w, f"{what}, {'tensor' if tag == 'rope' else 'data'} 2 against one rank: {text}")
        equivalence.check_resumes(lambda *a: run(binary, mpiexec, config, tmp, *a), check, tmp, ref_loss, ref_w, STEPS)

        refused(1, BASE + ["checkpoint.dir=" + os.path.join(tmp, "ckpt1"), "model.n_kv_heads=4", "train.steps=8"],
                "n_kv_heads 2", "resume a 2-key-value-head checkpoint with 4")
        plain = equivalence.short_checkpoint(binary, mpiexec, config, tmp, "plain")
        refused(1, ["train.device=cpu", "model.n_kv_heads=2", "model.init_from=" + plain],
                "4 key-value heads (model.n_kv_heads = 4); this run has 2 key-value heads", "init_from a multi-head model")
        refused(1, ["train.device=cpu", "model.n_kv_heads=3"], "model.n_kv_heads = 3 does not divide model.n_heads = 4",
                "n_kv_heads 3 of 4 heads")
        refused(4, ["train.device=cpu", "model.n_kv_heads=2", "parallel.tensor=4"],
                "model.n_kv_heads = 2 must be divisible by parallel.tensor = 4", "tensor 4 with 2 key-value heads")
        if export_hf:
            equivalence.check_export_refused(check, export_hf, os.path.join(tmp, "ref_weights"),
                                             os.path.join(tmp, "hf"), "grouped-query")
    check.finish()


if __name__ == "__main__":
    main()
