#!/usr/bin/env python3
"""Document masking with learned positions counted from each document's start (data.document_mask,
data.reset_positions; Megatron's --reset-attention-mask and --reset-position-ids) on GPT-2's
architecture, on the CPU in fp32 (DESIGN.md section 4), dropout on, token 10 ending documents. The
reset changes the losses against masking alone; data 2 with the embedding's rows gathered
(zero.embedding_grad = gather_rows: wpe's gradient scattered by position on each rank), tensor 2
(the vocabulary-parallel embedding; the batch split), tensor 2 with sequence parallelism, pipeline 2
(interleaved: middle chunks read the tokens for their document starts) and data 2 at ZeRO stage 3
with full recomputation give the same losses, gradient norms and exported weights as one rank, up to
fp32 reduction-order rounding. The target after each end-of-document token left out of the loss
(data.eod_mask_loss; Megatron's --eod-mask-loss) changes the losses, training and validation, and
the mean over the targets kept is counted over the step's whole batch: data 2 with 2 micro-batches
each (every rank and micro-batch keeps another count), pipeline 2 x data 2 and tensor 2 give the
same losses, norms and weights as one rank. data.reset_positions without document masking, or with
rotary positions, and data.eod_mask_loss without data.eod_token are refused with one line.
Usage: document_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
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
        # The loss mask: validation on the same samples at step 3 and 6.
        mask = ["data.eod_mask_loss=true", "log.val_every=3", "log.val_batches=2"]
        _, lm_loss, lm_val, lm_w, _, lm_norms, out = run(binary, mpiexec, config, tmp, 1, "eod_loss", *mask)
        _, _, masked_val, _, _, _, _ = run(binary, mpiexec, config, tmp, 1, "masked_val", *mask[1:])
        check("the one after every token 10 left out (data.eod_mask_loss)" in out and len(lm_val) == 2 and
              max(abs(a - b) for a, b in zip(lm_loss, masked_loss)) > 1e-4 and
              max(abs(a - b) for a, b in zip(lm_val, masked_val)) > 1e-4,
              f"data.eod_mask_loss: the log says so, losses {lm_loss[0]:.5f} .. (val {lm_val[0]:.5f} ..) against "
              f"{masked_loss[0]:.5f} .. (val {masked_val[0]:.5f} ..) with every target")
        equivalence.check_layouts(
            lambda ranks, tag, *sets: run(binary, mpiexec, config, tmp, ranks, "lm_" + tag, *mask, *sets), check, [
                (2, "loss mask: data 2, 2 micro-batches each", []),
                (4, "loss mask: pipeline 2 x data 2", ["parallel.pipeline=2"]),
                (2, "loss mask: tensor 2", ["parallel.tensor=2"])], (lm_loss, lm_w, lm_norms), STEPS, lm_val)
        check.refused(1, ["train.device=cpu", "data.eod_mask_loss=true"],
                      "data.eod_mask_loss = true needs data.eod_token", "loss mask without an EOD token")
        check.refused(1, ["train.device=cpu", "data.reset_positions=true"],
                      "data.reset_positions = true counts positions from each document's start, which needs "
                      "data.document_mask = true", "reset positions without document masking")
        check.refused(1, ["train.device=cpu", "model.position_embedding=rope", "data.reset_positions=true"] + DOCS,
                      "rotary ones (model.position_embedding = rope) are relative", "reset rotary positions")
    check.finish()


if __name__ == "__main__":
    main()
