#!/usr/bin/env python3
"""Document masking with learned positions counted from each document's start (data.document_mask,
data.reset_positions; Megatron's --reset-attention-mask and --reset-position-ids) on GPT-2's
architecture, on the CPU in fp32 (DESIGN.md section 4), dropout on, token 10 ending documents. The
reset changes the losses against masking alone; data 2 with the embedding's rows gathered
(zero.embedding_grad = gather_rows: wpe's gradient scattered by position on each rank), tensor 2
(the vocabulary-parallel embedding; the batch split), tensor 2 with sequence parallelism, pipeline 2
(interleaved: middle chunks read the tokens for their document starts) and data 2 at ZeRO stage 3
with full recomputation give the same losses, gradient norms and exported weights as one rank, up to
fp32 reduction-order rounding. data.reset_positions without document masking, or with rotary
positions, is refused with one line. Usage: document_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import sys
import tempfile

import equivalence

STEPS = 6
DOCS = ["data.document_mask=true", "data.eod_token=10"]
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "model.n_layers=4", "log.val_every=0", "train.grad_clip=0.5"] + DOCS


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))


def main():
    binary, mpiexec, config = sys.argv[1:4]
    check = equivalence.Checks(binary, mpiexec, config)
    with tempfile.TemporaryDirectory() as tmp:
        _, masked_loss, _, _, _, _, _ = run(binary, mpiexec, config, tmp, 1, "masked")
        _, ref_loss, _, ref_w, _, ref_norms, out = run(binary, mpiexec, config, tmp, 1, "ref", "data.reset_positions=true")
        check("positions from each document's start" in out and
              max(abs(a - b) for a, b in zip(ref_loss, masked_loss)) > 1e-4,
              f"data.reset_positions: the log says so, losses {ref_loss[0]:.5f} .. against {masked_loss[0]:.5f} .. "
              "with positions from the sample's start")
        equivalence.check_layouts(
            lambda *a: run(binary, mpiexec, config, tmp, *a, "data.reset_positions=true"), check, [
                (2, "data 2, the embedding's rows gathered", ["zero.embedding_grad=gather_rows"]),
                (2, "tensor 2 (batch split)", ["parallel.tensor=2"]),
                (2, "tensor 2, sequence parallel", ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
                (2, "pipeline 2 (interleaved, 2 virtual stages)",
                 ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"]),
                (2, "data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"])],
            (ref_loss, ref_w, ref_norms), STEPS)
        check.refused(1, ["train.device=cpu", "data.reset_positions=true"],
                      "data.reset_positions = true counts positions from each document's start, which needs "
                      "data.document_mask = true", "reset positions without document masking")
        check.refused(1, ["train.device=cpu", "model.position_embedding=rope", "data.reset_positions=true"] + DOCS,
                      "rotary ones (model.position_embedding = rope) are relative", "reset rotary positions")
    check.finish()


if __name__ == "__main__":
    main()
