#!/usr/bin/env python3
"""Rotary positions (model.position_embedding = rope) on the CPU in fp32 (DESIGN.md section 4): a
tiny GPT with RoPE and dropout trained for K steps at data 2 (with gradient accumulation), tensor 2
(the batch split), tensor 2 and 4 with sequence parallelism, pipeline 2 (1F1B and interleaved),
ZeRO stage 3 with full recomputation, tensor 2 x pipeline 2 x data 2, and with experts at tensor 2
x expert 2, gives the same losses, gradient norms and exported weights as one rank, up to fp32
reduction-order rounding. The model has no position table (exported: no wpe; the start line names
the rotary positions). A run stopped after step 3 and resumed continues bitwise on one rank, and a
tensor 2 checkpoint resumed on one rank continues as the uninterrupted run. Starting a RoPE run
from a learned-position checkpoint (model.init_from), or resuming one with another model.rope_theta,
is refused with one line; so is exporting a RoPE model to Hugging Face GPT-2, and a head size that is odd.
Partial rotary (model.partial_rotary_factor = 0.5: 8 of each head's 16 dims turn) trains other losses
than whole heads and the same at tensor 2 with sequence parallelism and pipeline 2 x data 2 at ZeRO
stage 1 as on one rank; a factor turning an odd number of dims is refused, and so is resuming a
whole-head checkpoint turning half of each head. LongRoPE (model.rope_scaling = longrope: a factor for
each of the 8 pairs, the long ones past 16 original positions, and the attention factor) trains other
losses and the same at tensor 2 with sequence parallelism and pipeline 2 x data 2 at ZeRO stage 1; a
list of another length is refused, and so is resuming a whole-head checkpoint with LongRoPE.
Usage: rope_equivalence.py TRAIN_GPT MPIEXEC CONFIG [EXPORT_HF]"""
import os
import sys
import tempfile

import equivalence

STEPS = 6
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "model.n_layers=4", "model.position_embedding=rope", "model.rope_theta=500",
        "log.val_every=0", "train.grad_clip=0.5"]
MOE = ["moe.experts=4", "moe.top_k=2", "moe.capacity_factor=1.0"]
PARTIAL = ["model.partial_rotary_factor=0.5"]  # 8 of each head's 16 dims turn
LONGROPE = ["model.rope_scaling=longrope", "model.rope_original_positions=16", "model.rope_scaling_factor=2",
            "model.rope_long_factor=1,1.5,2,3,4,6,8,16", "model.rope_short_factor=1,1.1,1.2,1.3,1.4,1.5,1.6,1.7"]


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))


def one_line_error(binary, mpiexec, config, ranks, sets, want):
    return equivalence.one_line_error(binary, mpiexec, config, ranks, BASE + list(sets), want)


def main():
    binary, mpiexec, config = sys.argv[1:4]
    export_hf = sys.argv[4] if len(sys.argv) > 4 else None
    check = equivalence.Checks(binary, mpiexec, config)

    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, _, ref_w, names, ref_norms, out = run(binary, mpiexec, config, tmp, 1, "ref")
        check("wpe" not in names and "rotary positions (theta 500)" in out and ref_loss[-1] < ref_loss[0],
              f"one rank: no position table among {len(names)} tensors, the start line names the rotary "
              f"positions, loss {ref_loss[0]:.4f} -> {ref_loss[-1]:.4f}")
        _, moe_loss, _, moe_w, _, moe_norms, _ = run(binary, mpiexec, config, tmp, 1, "ref_moe", *MOE)

        layouts = [
            (2, "data 2, two micro-batches a rank", []),
            (2, "tensor 2 (batch split)", ["parallel.tensor=2"]),
            (2, "tensor 2, sequence parallel", ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
            (4, "tensor 4, sequence parallel", ["parallel.tensor=4", "parallel.sequence_parallel=true"]),
            (2, "pipeline 2 (1f1b)", ["parallel.pipeline=2"]),
            (2, "pipeline 2 interleaved", ["parallel.pipeline=2", "parallel.schedule=interleaved",
                                           "parallel.virtual_stages=2"]),
            (2, "data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"]),
            (8, "tensor 2 x pipeline 2 x data 2, sequence parallel, ZeRO 1",
             ["parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true", "zero.stage=1"]),
            (4, "experts: tensor 2 x expert 2", MOE + ["parallel.tensor=2", "parallel.expert=2"]),
            (2, "partial rotary: tensor 2, sequence parallel", PARTIAL + ["parallel.tensor=2",
                                                                        "parallel.sequence_parallel=true"]),
            (4, "partial rotary: pipeline 2 x data 2, ZeRO 1", PARTIAL + ["parallel.pipeline=2", "zero.stage=1"]),
            (2, "LongRoPE: tensor 2, sequence parallel", LONGROPE + ["parallel.tensor=2",
                                                                    "parallel.sequence_parallel=true"]),
            (4, "LongRoPE: pipeline 2 x data 2, ZeRO 1", LONGROPE + ["parallel.pipeline=2", "zero.stage=1"]),
        ]
        _, part_loss, _, part_w, _, part_norms, part_out = run(binary, mpiexec, config, tmp, 1, "ref_partial", *PARTIAL)
        part_rel = max(abs(a - b) / abs(b) for a, b in zip(part_loss, ref_loss))
        check("rotary positions (theta 500, turning 8 of a head's 16 dims)" in part_out and part_rel > 1e-5,
              f"partial rotary on one rank: the start line says so, losses {part_rel:.1e} from whole heads'")
        _, long_loss, _, long_w, _, long_norms, long_out = run(binary, mpiexec, config, tmp, 1, "ref_longrope", *LONGROPE)
        long_rel = max(abs(a - b) / abs(b) for a, b in zip(long_loss, ref_loss))
        check("longrope rope scaling (factor 2, original positions 16" in long_out and long_rel > 1e-5,
              f"LongRoPE on one rank: the start line says so, losses {long_rel:.1e} from unscaled ones'")
        for ranks, what, sets in layouts:
            experts = any(s.startswith("moe.") for s in sets)
            loss0, w0, norms0 = (moe_loss, moe_w, moe_norms) if experts else (ref_loss, ref_w, ref_norms)
            if sets[:1] == PARTIAL:
                loss0, w0, norms0 = part_loss, part_w, part_norms
            if sets[:len(LONGROPE)] == LONGROPE:
                loss0, w0, norms0 = long_loss, long_w, long_norms
            tag = "l" + str(layouts.index((ranks, what, sets)))
            _, loss, _, w, _, norms, _ = run(binary, mpiexec, config, tmp, ranks, tag, *sets)
            ok, text = equivalence.layout_line((loss, w, norms), (loss0, w0, norms0), STEPS)
            check(ok, f"{what}: {text}")

        equivalence.check_resumes(lambda *a: run(binary, mpiexec, config, tmp, *a), check, tmp, ref_loss, ref_w, STEPS)

        ckpt = os.path.join(tmp, "ckpt1")
        ok, line = one_line_error(binary, mpiexec, config, 1, ["checkpoint.dir=" + ckpt, "model.rope_theta=10000",
                                                                "train.steps=8"], "rope theta 10000")
        check(ok, f"resume with another model.rope_theta: {line}")
        learned = equivalence.short_checkpoint(binary, mpiexec, config, tmp, "learned")
        ok, line = one_line_error(binary, mpiexec, config, 1, ["model.init_from=" + learned, "model.n_layers=2",
                                                                "model.dropout=0"], "learned positions")
        check(ok, f"init_from a learned-position model: {line}")
        ok, line = one_line_error(binary, mpiexec, config, 1, ["model.n_heads=64"], "must be even")
        check(ok, f"an odd head size: {line}")
        ok, line = one_line_error(binary, mpiexec, config, 1, ["model.partial_rotary_factor=0.4375"],
                                  "turns 7 of a head's 16 dims")
        check(ok, f"a partial rotary factor turning an odd number of dims: {line}")
        ok, line = one_line_error(binary, mpiexec, config, 1, ["checkpoint.dir=" + ckpt, "train.steps=8"] + PARTIAL,
                                  "turning 8 dims a head")
        check(ok, f"resume turning half of each head: {line}")
        ok, line = one_line_error(binary, mpiexec, config, 1, LONGROPE + ["model.rope_short_factor=1,2"],
                                  'model.rope_short_factor = "1,2" lists 2 (allowed with model.rope_scaling = longrope: 8')
        check(ok, f"a LongRoPE list of 2 factors for 8 pairs: {line}")
        ok, line = one_line_error(binary, mpiexec, config, 1, ["checkpoint.dir=" + ckpt, "train.steps=8"] + LONGROPE,
                                  "longrope rope scaling (factor 2")
        check(ok, f"resume an unscaled checkpoint with LongRoPE: {line}")
        if export_hf:
            equivalence.check_export_refused(check, export_hf, os.path.join(tmp, "ref_weights"),
                                             os.path.join(tmp, "hf"), "rotary positions")
    check.finish()


if __name__ == "__main__":
    main()
