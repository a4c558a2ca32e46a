#!/usr/bin/env python3
"""SwiGLU MLPs (model.mlp = swiglu) on the CPU in fp32 (DESIGN.md section 4): a tiny GPT with SwiGLU
and dropout trained for K steps at data 2, tensor 2 (the batch split; fc's [gate | up] split as two
groups, so each rank gates its own columns), tensor 2 and 4 with sequence parallelism, tensor 2 with
element-wise recomputation (g recomputed from h), pipeline 2, ZeRO stage 3 with full recomputation
and tensor 2 x pipeline 2 x data 2 gives the same losses, gradient norms and exported weights as one
rank, up to fp32 reduction-order rounding. The export holds fc at twice the width. A run stopped
after step 3 and resumed continues bitwise on one rank, and a tensor 2 checkpoint resumed on one
rank continues as the uninterrupted run. Resuming a SwiGLU checkpoint as a GELU model, starting a
SwiGLU run from a GELU model (model.init_from) and exporting a SwiGLU model to Hugging Face GPT-2
are refused with one line. An MLP width of model.ffn_hidden_size = 88 (no multiple
of d_model), SwiGLU and GELU, at tensor 2, tensor 4 with sequence parallelism and tensor 2 x pipeline 2
x data 2 gives one rank's results at that width; a width tensor 4 cannot split and resuming at
another width are refused with one line.
Usage: swiglu_equivalence.py TRAIN_GPT MPIEXEC CONFIG [EXPORT_HF]"""
import json
import os
import sys
import tempfile

import equivalence

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "model.n_layers=4", "model.mlp=swiglu", "log.val_every=0", "train.grad_clip=0.5"]


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))


def main():
    binary, mpiexec, config = sys.argv[1:4]
    export_hf = sys.argv[4] if len(sys.argv) > 4 else None
    check = equivalence.Checks(binary, mpiexec, config)
    refused = check.refused

    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, _, ref_w, _, ref_norms, out = run(binary, mpiexec, config, tmp, 1, "ref")
        shapes = {q["name"]: q["shape"] for q in json.load(open(os.path.join(tmp, "ref_weights", "model.json")))["params"]}
        C = shapes["h.0.ln1.w"][0]
        check(shapes["h.0.mlp.fc.w"] == [8 * C, C] and shapes["h.0.mlp.proj.w"] == [C, 4 * C] and
              "SwiGLU MLPs" in out and ref_loss[-1] < ref_loss[0],
              f"one rank: fc {shapes['h.0.mlp.fc.w']}, proj {shapes['h.0.mlp.proj.w']}, the start line names SwiGLU, "
              f"loss {ref_loss[0]:.4f} -> {ref_loss[-1]:.4f}")

        layouts = [
            (2, "data 2, two micro-batches a rank", []),
            (2, "tensor 2 (batch split)", ["parallel.tensor=2"]),
            (2, "tensor 2, sequence parallel", ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
            (4, "tensor 4, sequence parallel", ["parallel.tensor=4", "parallel.sequence_parallel=true"]),
            (2, "tensor 2, element-wise recomputation", ["parallel.tensor=2", "train.checkpointing=elementwise"]),
            (2, "pipeline 2 (1f1b)", ["parallel.pipeline=2"]),
            (2, "data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"]),
            (8, "tensor 2 x pipeline 2 x data 2, sequence parallel, ZeRO 1",
             ["parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true", "zero.stage=1"]),
        ]
        equivalence.check_layouts(lambda *a: run(binary, mpiexec, config, tmp, *a), check, layouts,
                                  (ref_loss, ref_w, ref_norms), STEPS)
        equivalence.check_resumes(lambda *a: run(binary, mpiexec, config, tmp, *a), check, tmp, ref_loss, ref_w, STEPS)

        # model.ffn_hidden_size: a width F = 88 that is no multiple of d_model = 64, SwiGLU and GELU,
        # split by tensor 2 and 4 (22 columns of gate and of up a rank) and across stages, against one
        # rank of that width.
        wide = ["model.ffn_hidden_size=88"]
        for mlp in ("swiglu", "gelu"):
            _, wref_loss, _, wref_w, _, wref_norms, out = run(binary, mpiexec, config, tmp, 1, f"w{mlp}", *wide,
                                                               "model.mlp=" + mlp)
            wshapes = {q["name"]: q["shape"] for q in
                       json.load(open(os.path.join(tmp, f"w{mlp}_weights", "model.json")))["params"]}
            fc_rows = 176 if mlp == "swiglu" else 88
            check(wshapes["h.0.mlp.fc.w"] == [fc_rows, C] and wshapes["h.0.mlp.proj.w"] == [C, 88] and
                  "MLP width 88" in out and wref_loss[-1] < wref_loss[0],
                  f"{mlp}, width 88, one rank: fc {wshapes['h.0.mlp.fc.w']}, proj {wshapes['h.0.mlp.proj.w']}, "
                  f"loss {wref_loss[0]:.4f} -> {wref_loss[-1]:.4f}")
            wide_layouts = [
                (2, "tensor 2 (batch split)", ["parallel.tensor=2"]),
                (4, "tensor 4, sequence parallel", ["parallel.tensor=4", "parallel.sequence_parallel=true"]),
                (8, "tensor 2 x pipeline 2 x data 2, sequence parallel, ZeRO 1",
                 ["parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true", "zero.stage=1"]),
            ]
            for i, (ranks, what, sets) in enumerate(wide_layouts):
                _, loss, _, w, _, norms, _ = run(binary, mpiexec, config, tmp, ranks, f"w{mlp}{i}", *wide,
                                                 "model.mlp=" + mlp, *sets)
                ok, text = equivalence.layout_line((loss, w, norms), (wref_loss, wref_w, wref_norms), STEPS)
                check(ok, f"{mlp}, width 88, {what}: {text}")
        refused(4, BASE + ["model.ffn_hidden_size=90", "parallel.tensor=4"],
                "its hidden width model.ffn_hidden_size = 90 must be divisible by parallel.tensor = 4",
                "a width tensor 4 cannot split")
        refused(1, BASE + ["checkpoint.dir=" + os.path.join(tmp, "ckpt1"), "model.ffn_hidden_size=88", "train.steps=8"],
                "ffn_hidden_size 88", "resume a 4C checkpoint at width 88")
        refused(1, BASE + ["checkpoint.dir=" + os.path.join(tmp, "ckpt1"), "model.mlp=gelu", "train.steps=8"],
                "swiglu MLP, precision", "resume a SwiGLU checkpoint as a GELU model")
        gelu = equivalence.short_checkpoint(binary, mpiexec, config, tmp, "gelu")
        refused(1, BASE + ["model.init_from=" + gelu, "model.n_layers=2", "model.dropout=0"], "a GELU MLP",
                "init_from a GELU model")
        if export_hf:
            equivalence.check_export_refused(check, export_hf, os.path.join(tmp, "ref_weights"),
                                             os.path.join(tmp, "hf"), "SwiGLU")
    check.finish()


if __name__ == "__main__":
    main()
