#!/usr/bin/env python3
"""RMSNorm (model.norm = rmsnorm) on the CPU in fp32 (DESIGN.md section 4), in Llama's block: RMSNorm,
rotary positions and a SwiGLU MLP of width model.ffn_hidden_size = 88, dropout on. K steps at data
2, tensor 2 (the batch split), tensor 2 and 4 with sequence parallelism (the norms' weight gradients
summed over the token shards), tensor 2 with element-wise recomputation (the norms recomputed),
pipeline 2 (1F1B and interleaved), ZeRO stage 3 with full recomputation and tensor 2 x pipeline 2 x
data 2 give the same losses, gradient norms and exported weights as one rank, up to fp32
reduction-order rounding. The norms hold weights only (no ln*.b, lnf.b). A run stopped after step 3
and resumed continues bitwise on one rank; a tensor 2 checkpoint resumed on one rank continues as the
uninterrupted run. Resuming it with LayerNorm, starting an RMSNorm run from a LayerNorm model
(model.init_from) and exporting it to Hugging Face GPT-2 are refused with one line.
Usage: rmsnorm_equivalence.py TRAIN_GPT MPIEXEC CONFIG [EXPORT_HF]"""
import os
import sys
import tempfile

import equivalence

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "model.n_layers=4", "model.norm=rmsnorm", "model.position_embedding=rope",
        "model.mlp=swiglu", "model.ffn_hidden_size=88", "log.val_every=0", "train.grad_clip=0.5"]


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))


def main():
    binary, mpiexec, config = sys.argv[1:4]
    export_hf = sys.argv[4] if len(sys.argv) > 4 else None
    check = equivalence.Checks(binary, mpiexec, config)
    refused = check.refused

    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, _, ref_w, names, ref_norms, out = run(binary, mpiexec, config, tmp, 1, "ref")
        biases = [n for n in names if n.endswith(("ln1.b", "ln2.b")) or n == "lnf.b"]
        check(not biases and "lnf.w" in names and "RMSNorm" in out and ref_loss[-1] < ref_loss[0],
              f"one rank: no norm biases ({len(names)} tensors), the start line names RMSNorm, "
              f"loss {ref_loss[0]:.4f} -> {ref_loss[-1]:.4f}")

        layouts = [
            (2, "data 2, two micro-batches a rank", []),
            (2, "tensor 2 (batch split)", ["parallel.tensor=2"]),
            (2, "tensor 2, sequence parallel", ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
            (4, "tensor 4, sequence parallel", ["parallel.tensor=4", "parallel.sequence_parallel=true"]),
            (2, "tensor 2, element-wise recomputation", ["parallel.tensor=2", "train.checkpointing=elementwise"]),
            (2, "pipeline 2 (1f1b)", ["parallel.pipeline=2"]),
            (2, "pipeline 2 (interleaved, 2 virtual stages)",
             ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"]),
            (2, "data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"]),
            (8, "tensor 2 x pipeline 2 x data 2, sequence parallel, ZeRO 1",
             ["parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true", "zero.stage=1"]),
        ]
        equivalence.check_layouts(lambda *a: run(binary, mpiexec, config, tmp, *a), check, layouts,
                                  (ref_loss, ref_w, ref_norms), STEPS)
        equivalence.check_resumes(lambda *a: run(binary, mpiexec, config, tmp, *a), check, tmp, ref_loss, ref_w, STEPS)

        refused(1, BASE + ["checkpoint.dir=" + os.path.join(tmp, "ckpt1"), "model.norm=layernorm", "train.steps=8"],
                "rmsnorm, precision", "resume an RMSNorm checkpoint with LayerNorm")
        plain = equivalence.short_checkpoint(binary, mpiexec, config, tmp, "plain")
        refused(1, ["train.device=cpu", "model.norm=rmsnorm", "model.init_from=" + plain], "LayerNorm (model.norm = layernorm)",
                "init_from a LayerNorm model")
        if export_hf:  # a model with RMSNorm alone (its rotary positions would be refused first)
            equivalence.run(binary, mpiexec, config, tmp, 1, "rms", ["train.device=cpu", "train.steps=2", "model.norm=rmsnorm"])
            equivalence.check_export_refused(check, export_hf, os.path.join(tmp, "rms_weights"),
                                             os.path.join(tmp, "hf"), "RMSNorm")
    check.finish()


if __name__ == "__main__":
    main()
