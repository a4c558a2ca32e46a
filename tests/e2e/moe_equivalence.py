#!/usr/bin/env python3
"""Mixture-of-experts layout equivalence on the CPU in fp32 (DESIGN.md section 4): a tiny GPT whose
blocks have 4 experts (top 2, capacity factor 1: choices are dropped) and a shared MLP one expert
wide (moe.shared_experts = 1, in every layout), with dropout, gradient
clipping, a large weight decay and the balancing loss, trained for K steps at data 2 and 4, pipeline 2 (1f1b and gpipe),
pipeline 2 x data 2, ZeRO stages 1-3, full and elementwise activation checkpointing, with the
experts in every other block, with Mixtral's experts (model.mlp = swiglu, model.bias = false,
moe.ffn_hidden_size = 48: data 2, tensor 2 with and without sequence parallelism, expert 2 at ZeRO
stages 0 and 3, tensor 2 x expert 2 at stage 1, pipeline 2 with checkpointing, experts every other
block), with the gates not renormalized (tensor 2 x expert 2), with Qwen2-MoE's gate on the shared
MLP (moe.shared_gate: tensor 2 with sequence parallelism, tensor 2 x expert 2 at ZeRO stage 1,
pipeline 2 with checkpointing), with the first block dense (pipeline
2, tensor 2 x expert 2 at ZeRO stage 1), with tensor parallelism (each expert's MLP split over tensor = 2; with
data 2 at ZeRO stage 1, with pipeline 2, with checkpointing, without dropout, with dense blocks
between; with sequence parallelism too: alone, with pipeline 2, with checkpointing, with data 2 at
ZeRO stage 3 and dense blocks between; with expert parallelism too: tensor 2 x expert 2, and tensor 2
x data 4 x expert 2 with sequence parallelism, at ZeRO stages 0 and 3) and with expert parallelism
(parallel.expert = 2 and 4: each rank holds some of the experts; at data 4 with expert 2 the experts'
gradients are summed over the expert-data group; with pipeline 2; with checkpointing; at ZeRO stages
1-3, the experts' optimizer state sharded over the expert-data group, with pipeline 2, with the
optimizer offloaded, with tensor 2 and with an interleaved pipeline of 4 blocks, and at stages 2-3
the experts' gradients and parameters streamed over an expert-data group of 2, with two micro-batches
a rank, with recomputation, with pipeline 2 (also interleaved), prefetched past a dense block and
with the optimizer offloaded; the start record's
model state per rank as the formula with the experts apart) gives the same losses, gradient norms and exported weights (gathered from the
expert ranks) as one rank, up to fp32 reduction-order rounding.
A run stopped after step 3 and resumed continues bitwise on one rank; a stage-1 checkpoint at data 2
and an expert-parallel one resumed on one rank, a one-rank checkpoint resumed at expert 4, and the
stage-1 checkpoint resumed at data 2 x expert 2, and a tensor 2 x expert 2 checkpoint resumed on one
rank and the reverse, continue as the uninterrupted run; so do ZeRO checkpoints with expert
parallelism, on their own layout (each rank reading its own pieces) and resharded: onto one rank,
onto another expert size and ZeRO stage, from a dense data-parallel layout (also onto streamed
experts), to one without experts split, from pipeline 2, from an interleaved pipeline and from tensor 2 x expert 2 (also with
Mixtral's experts). model.init_from a one-rank checkpoint with Mixtral's experts starts from its weights,
and at data 4 x expert 2 (also at ZeRO stage 3) and tensor 2 x expert 2 gives the one-rank run. A
checkpoint whose experts sit in other blocks, or are of another width, is
refused with one line; so is an expert width the tensor group cannot split.
An expert group that does not divide the experts stops every rank, with one line. Dropless routing
(moe.dropless: no choice dropped, the log says, and other losses than capacity factor 1's) gives one
rank's run at tensor 2 with sequence parallelism, pipeline 2 x data 2 at ZeRO stage 1, data 4 at
stage 3 with two micro-batches a rank, with Mixtral's experts under Qwen2-MoE's gate at pipeline 2
with full recomputation and tensor 2 x data 2 with it, and with expert parallelism (uneven
exchanges): expert 2, expert 4 at ZeRO stage 3, tensor 2 x expert 2 with sequence parallelism
(Mixtral's experts), pipeline 2 x expert 2 with full recomputation, and expert 2 at data 4, ZeRO
stage 1 with two micro-batches a rank.
Usage: moe_equivalence.py TRAIN_GPT MPIEXEC CONFIG"""
import json
import math
import os
import re
import sys
import tempfile

import equivalence
from equivalence import LOSS_TOL, NORM_TOL, WEIGHT_L2_TOL, WEIGHT_MAX_TOL

STEPS = 6
# Settings that change the model trained: a layout with them is compared with one rank with them.
MODEL_KEYS = {"moe.layer_freq", "model.dropout", "model.n_layers", "train.global_batch", "model.mlp", "model.bias",
              "moe.ffn_hidden_size", "moe.renormalize", "moe.first_dense_layers", "moe.shared_gate", "moe.dropless"}
# Mixtral's experts (and shared MLP): SwiGLU without biases, of a width not 4C.
MIXTRAL = ["model.mlp=swiglu", "model.bias=false", "moe.ffn_hidden_size=48"]
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "train.grad_clip=0.5", "log.val_every=0", "moe.experts=4", "moe.top_k=2",
        "moe.capacity_factor=1.0", "moe.aux_loss_coef=0.05", "moe.z_loss_coef=0.05", "moe.shared_experts=1",
        "optimizer.weight_decay=10"]  # large: a piece updated with the wrong decay flag shows


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    start, losses, _, w, names, norms, out = equivalence.run(binary, mpiexec, config, tmp, ranks, tag,
                                                             BASE + list(sets))
    return start, losses, norms, w, names, out


def moe_stats(tmp, tag):
    """Per step: (balancing loss, fraction of choices dropped, z-loss) from the run's metrics file."""
    records = [json.loads(line) for line in open(os.path.join(tmp, tag + ".jsonl"))]
    return [(r["moe_aux_loss"], r["moe_dropped"], r["moe_z_loss"]) for r in records
            if "step" in r and r.get("split") != "val"]


def state_bytes_with_experts(tmp, tag, start, sets):
    """The start record's model state per rank, by ZeroOptimizer::model_state_bytes with the experts
    apart (fp32, no separate master): the others' by the ZeRO formula over the data group, the
    experts' by the same formula over the expert-data group, or, with one rank there, whole (their
    reduced piece the whole bucket). None where it does not apply (tensor or pipeline parallelism,
    offload, no ZeRO)."""
    opts = dict(x.split("=", 1) for x in sets)
    stage, G = int(opts.get("zero.stage", 0)), int(opts.get("parallel.expert", 1))
    if stage == 0 or G == 1 or {"parallel.tensor", "parallel.pipeline", "zero.offload"} & opts.keys():
        return None
    params = json.load(open(os.path.join(tmp, tag + "_weights", "model.json")))["params"]
    experts = sum(math.prod(p["shape"]) for p in params if ".moe.experts." in p["name"]) // G
    N, Ne = start["layout"]["data"], start["layout"]["data"] // G

    def sharded(n, N):
        return ((n * 4 // N if stage >= 3 else n * 4) + (n * 4 // N if stage >= 2 else n * 4 + n * 4 // N)
                + n * 8 // N)
    return [sharded(n - experts, N) + (sharded(experts, Ne) if Ne > 1 else experts * 20)
            for n in start["params_per_rank"]]


def rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def main():
    binary, mpiexec, config = sys.argv[1:4]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        refs = {}
        for freq in (1, 2):
            _, loss, norms, w, names, out = run(binary, mpiexec, config, tmp, 1, f"ref{freq}", f"moe.layer_freq={freq}")
            experts = [n for n in names if ".moe.experts." in n]
            shared = [n for n in names if ".moe.shared." in n]
            ok = "experts: 4 and 1 shared of width 256 in" in out and len(experts) == 4 * 4 * (2 // freq) and len(shared) == 4 * (2 // freq)
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} one rank, experts every {freq} block(s): {len(experts)} expert tensors, "
                  f"{len(shared)} of the shared MLP")
            refs[("moe.layer_freq=2",) if freq == 2 else ()] = (loss, norms, w, f"ref{freq}")
            stats = moe_stats(tmp, f"ref{freq}")
            # The z-loss is near log(4)^2 = 1.92 while the router's logits are small.
            ok = (len(stats) == STEPS and all(0.99 < a < 1.5 and 1.5 < z < 3 for a, _, z in stats)
                  and any(d > 0 for _, d, _ in stats))
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} one rank, experts every {freq} block(s): the log's balancing loss "
                  f"{stats[0][0]:.4f} .. {stats[-1][0]:.4f}, z-loss {stats[0][2]:.4f} .. {stats[-1][2]:.4f}, "
                  f"choices dropped {stats[0][1]:.2%} .. {stats[-1][1]:.2%}")

        # The one-rank run of the settings that change the model trained (the others are layouts),
        # run when first needed: (loss, norms, weights, tag).
        def reference(sets):
            key = tuple(sorted(x for x in sets if x.split("=")[0] in MODEL_KEYS))
            if key not in refs:
                tag = "ref_" + "_".join(x.replace("=", "").replace(".", "_") for x in key)
                _, loss, norms, w, _, _ = run(binary, mpiexec, config, tmp, 1, tag, *key)
                refs[key] = (loss, norms, w, tag)
            return refs[key]

        # Dropless routing drops nothing (the log says so every step) and trains another model than
        # capacity factor 1, which drops choices.
        dl_loss = reference(["moe.dropless=true"])[0]
        dl_stats = moe_stats(tmp, reference(["moe.dropless=true"])[3])
        ok = (len(dl_stats) == STEPS and all(d == 0 for _, d, _ in dl_stats) and rel(dl_loss, refs[()][0]) > 1e-4)
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} one rank, dropless: no choice dropped in {len(dl_stats)} steps, losses "
              f"{rel(dl_loss, refs[()][0]):.2e} from capacity factor 1's")

        # The dense model differs: the experts change the computation.
        _, dense_loss, _, _, _, _ = run(binary, mpiexec, config, tmp, 1, "dense", "moe.experts=0")
        ok = rel(dense_loss, refs[()][0]) > 1e-3
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} the dense model's losses differ from the experts' (control)")

        cases = [
            (2, "d2", []), (4, "d4", []),
            (2, "p2", ["parallel.pipeline=2"]),
            (2, "p2_gpipe", ["parallel.pipeline=2", "parallel.schedule=gpipe"]),
            (4, "p2_d2_z1", ["parallel.pipeline=2", "zero.stage=1"]),
            (2, "d2_z2", ["zero.stage=2"]), (4, "d4_z3", ["zero.stage=3"]),
            (2, "d2_full", ["train.checkpointing=full"]),
            (2, "p2_elementwise", ["parallel.pipeline=2", "train.checkpointing=elementwise"]),
            (2, "d2_freq2_z3", ["moe.layer_freq=2", "zero.stage=3"]),
            (2, "p2_freq2", ["moe.layer_freq=2", "parallel.pipeline=2"]),
            (2, "d2_e2", ["parallel.expert=2"]), (4, "d4_e2", ["parallel.expert=2"]),
            (4, "d4_e4", ["parallel.expert=4"]),
            (4, "p2_d2_e2", ["parallel.pipeline=2", "parallel.expert=2"]),
            (2, "d2_e2_full", ["parallel.expert=2", "train.checkpointing=full"]),
            (4, "d4_e2_freq2", ["parallel.expert=2", "moe.layer_freq=2"]),
            (2, "t2", ["parallel.tensor=2"]), (4, "t2_d2_z1", ["parallel.tensor=2", "zero.stage=1"]),
            (4, "t2_p2", ["parallel.tensor=2", "parallel.pipeline=2"]),
            (2, "t2_full", ["parallel.tensor=2", "train.checkpointing=full"]),
            (2, "t2_freq2", ["parallel.tensor=2", "moe.layer_freq=2"]),
            (2, "t2_nodrop", ["parallel.tensor=2", "model.dropout=0"]),
            (2, "t2_sp", ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
            (4, "t2_sp_p2", ["parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.pipeline=2"]),
            (2, "t2_sp_full", ["parallel.tensor=2", "parallel.sequence_parallel=true", "train.checkpointing=full"]),
            (4, "t2_sp_d2_freq2_z3", ["parallel.tensor=2", "parallel.sequence_parallel=true", "moe.layer_freq=2",
                                      "zero.stage=3"]),
            (4, "t2_e2", ["parallel.tensor=2", "parallel.expert=2"]),
            (8, "t2_d4_e2_sp", ["parallel.tensor=2", "parallel.expert=2", "parallel.sequence_parallel=true"]),
            # ZeRO with expert parallelism: the experts' state sharded over the expert-data group (of
            # one rank at data 2 x expert 2), at every stage, with pipeline, offload, tensor x expert.
            (2, "d2_e2_z1", ["parallel.expert=2", "zero.stage=1"]),
            (4, "d4_e2_z1", ["parallel.expert=2", "zero.stage=1"]),
            (4, "d4_e2_z2", ["parallel.expert=2", "zero.stage=2"]),
            (4, "d4_e4_z3", ["parallel.expert=4", "zero.stage=3"]),
            (4, "d4_e2_freq2_z3", ["parallel.expert=2", "moe.layer_freq=2", "zero.stage=3"]),
            (4, "p2_d2_e2_z1", ["parallel.pipeline=2", "parallel.expert=2", "zero.stage=1"]),
            (4, "d4_e2_z1_offload", ["parallel.expert=2", "zero.stage=1", "zero.offload=cpu"]),
            (8, "t2_d4_e2_sp_z3", ["parallel.tensor=2", "parallel.expert=2", "parallel.sequence_parallel=true",
                                   "zero.stage=3"]),
            (4, "t2_d2_e2_z2", ["parallel.tensor=2", "parallel.expert=2", "zero.stage=2"]),
            (4, "p2v2_d2_e2_z3", ["model.n_layers=4", "parallel.pipeline=2", "parallel.schedule=interleaved",
                                  "parallel.virtual_stages=2", "parallel.expert=2", "zero.stage=3"]),
            # The experts streamed over an expert-data group of 2 at stages 2-3: with two micro-batches
            # a rank (their reduced gradients accumulate), with recomputation, with pipeline 2.
            (4, "d4_e2_z2_acc2", ["parallel.expert=2", "zero.stage=2", "train.global_batch=16"]),
            (4, "d4_e2_z3_full", ["parallel.expert=2", "zero.stage=3", "train.checkpointing=full"]),
            (8, "p2_d4_e2_z3", ["parallel.pipeline=2", "parallel.expert=2", "zero.stage=3"]),
            # ... prefetched past a dense block, in an interleaved pipeline, with the optimizer offloaded.
            (4, "l4_freq2_d4_e2_z3", ["model.n_layers=4", "moe.layer_freq=2", "parallel.expert=2", "zero.stage=3"]),
            (8, "p2v2_d4_e2_z3", ["model.n_layers=4", "parallel.pipeline=2", "parallel.schedule=interleaved",
                                  "parallel.virtual_stages=2", "parallel.expert=2", "zero.stage=3",
                                  "train.global_batch=16"]),
            (4, "d4_e2_z3_offload", ["parallel.expert=2", "zero.stage=3", "zero.offload=cpu"]),
            # Mixtral's experts: [gate | up] split in 2 groups over the tensor group, the activation's
            # gradient written over it in the experts' batched backward, no biases anywhere.
            (2, "mx_d2", MIXTRAL), (2, "mx_t2", MIXTRAL + ["parallel.tensor=2"]),
            (2, "mx_t2_sp", MIXTRAL + ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
            (4, "mx_d4_e2", MIXTRAL + ["parallel.expert=2"]),
            (4, "mx_t2_e2_z1", MIXTRAL + ["parallel.tensor=2", "parallel.expert=2", "zero.stage=1"]),
            (2, "mx_p2_full", MIXTRAL + ["parallel.pipeline=2", "train.checkpointing=full"]),
            (4, "mx_d4_e2_z3", MIXTRAL + ["parallel.expert=2", "zero.stage=3"]),
            (2, "mx_d2_freq2", MIXTRAL + ["moe.layer_freq=2"]),
            # The gates not renormalized (DeepSeekMoE's, OLMoE's), with expert and tensor parallelism.
            (4, "raw_t2_e2", ["moe.renormalize=false", "parallel.tensor=2", "parallel.expert=2"]),
            # Qwen2-MoE's gate on the shared MLP: its logits' gradient summed over the tensor group (with
            # sequence parallelism, its input gradient added once), replicated, recomputed.
            (2, "q2m_t2_sp", MIXTRAL + ["moe.shared_gate=true", "parallel.tensor=2", "parallel.sequence_parallel=true"]),
            (4, "q2m_t2_e2_z1", MIXTRAL + ["moe.shared_gate=true", "parallel.tensor=2", "parallel.expert=2",
                                           "zero.stage=1"]),
            (2, "q2m_p2_full", MIXTRAL + ["moe.shared_gate=true", "parallel.pipeline=2", "train.checkpointing=full"]),
            # DeepSeekMoE's first block dense (moe.first_dense_layers): pipeline 2 (the dense block on
            # the first stage), tensor 2 x expert 2 at ZeRO stage 1.
            (2, "fd1_p2", ["moe.first_dense_layers=1", "parallel.pipeline=2"]),
            (4, "fd1_t2_e2_z1", ["moe.first_dense_layers=1", "parallel.tensor=2", "parallel.expert=2", "zero.stage=1"]),
            # Dropless routing (moe.dropless): every tensor rank sizes the same GEMMs from the same
            # counts; data ranks and micro-batches each their own; recomputation routes again.
            (2, "dl_t2_sp", ["moe.dropless=true", "parallel.tensor=2", "parallel.sequence_parallel=true"]),
            (4, "dl_p2_d2_z1", ["moe.dropless=true", "parallel.pipeline=2", "zero.stage=1"]),
            (4, "dl_d4_z3_acc2", ["moe.dropless=true", "zero.stage=3", "train.global_batch=16"]),
            (2, "dl_q2m_p2_full", MIXTRAL + ["moe.dropless=true", "moe.shared_gate=true", "parallel.pipeline=2",
                                             "train.checkpointing=full"]),
            (4, "dl_mx_t2_d2_full", MIXTRAL + ["moe.dropless=true", "parallel.tensor=2", "train.checkpointing=full"]),
            # ... with expert parallelism: the counts all-gathered, uneven exchanges, a run per source
            # rank and expert (the first writes the gradient); one expert a rank at ZeRO stage 3, with
            # tensor 2 and sequence parallelism, with pipeline 2 and recomputation, two micro-batches a rank.
            (2, "dl_d2_e2", ["moe.dropless=true", "parallel.expert=2"]),
            (4, "dl_d4_e4_z3", ["moe.dropless=true", "parallel.expert=4", "zero.stage=3"]),
            (4, "dl_mx_t2_e2_sp", MIXTRAL + ["moe.dropless=true", "parallel.tensor=2", "parallel.expert=2",
                                             "parallel.sequence_parallel=true"]),
            (4, "dl_p2_d2_e2_full", ["moe.dropless=true", "parallel.pipeline=2", "parallel.expert=2",
                                     "train.checkpointing=full"]),
            (4, "dl_d4_e2_z1_acc2", ["moe.dropless=true", "parallel.expert=2", "zero.stage=1", "train.global_batch=16"]),
        ]
        for ranks, tag, sets in cases:
            ref_loss, ref_norms, ref_w, ref_tag = reference(sets)
            start, loss, norms, w, _, _ = run(binary, mpiexec, config, tmp, ranks, tag, *sets)
            dl, dw, l2 = equivalence.compare(loss, ref_loss, w, ref_w)
            dn = rel(norms, ref_norms)
            want_bytes = state_bytes_with_experts(tmp, tag, start, sets)
            bytes_ok = want_bytes is None or start["model_state_bytes_per_rank"] == want_bytes
            stats, ref_stats = moe_stats(tmp, tag), moe_stats(tmp, ref_tag)
            ds = max(abs(a - b) / max(1.0, abs(b)) for s, r in zip(stats, ref_stats) for a, b in zip(s, r))
            ok = (len(loss) == STEPS and len(w) == len(ref_w) and dl <= LOSS_TOL and dn <= NORM_TOL
                  and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL and len(stats) == STEPS and ds <= 1e-5 and bytes_ok)
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {ranks} ranks {' '.join(sets) or 'data only'}: max loss rel diff {dl:.2e}, "
                  f"grad norm {dn:.2e}, weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}, "
                  f"logged MoE statistics {ds:.1e}"
                  + ("" if want_bytes is None else f"; model state per rank {start['model_state_bytes_per_rank'][0]} "
                     f"bytes ({'as' if bytes_ok else 'NOT as'} the formula with the experts apart: {want_bytes[0]})"))

        # model.init_from a model with experts (a one-rank checkpoint of Mixtral's experts): the run starts
        # from its weights (a first loss below a fresh run's); from the same run's weight export, on
        # expert, tensor x expert and ZeRO stage 3 layouts, each rank reads the tensors it holds (rank
        # 0 half the experts) and takes its pieces: the same run as one rank.
        src = os.path.join(tmp, "init_src")
        run(binary, mpiexec, config, tmp, 1, "init_src", *MIXTRAL, f"checkpoint.dir={src}")
        fresh = reference(MIXTRAL)[0]
        def read_counts(out):  # rank 0's "read N of its M parameters"
            m = re.search(r"rank 0 took ([\d,]+) of its ([\d,]+) parameters", out)
            return tuple(int(x.replace(",", "")) for x in m.groups()) if m else (0, 0)
        _, i_loss, i_norms, i_w, _, out = run(binary, mpiexec, config, tmp, 1, "init1", *MIXTRAL, f"model.init_from={src}")
        read, total = read_counts(out)
        ok = len(i_loss) == STEPS and i_loss[0] < fresh[0] - 0.05 and read == total > 0
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} model.init_from a checkpoint with Mixtral's experts: first loss {i_loss[0]:.4f} "
              f"(a fresh run's {fresh[0]:.4f}), {read} of {total} parameters read")
        for ranks, tag, sets in [(4, "init_d4_e2", ["parallel.expert=2"]),
                                 (4, "init_t2_e2", ["parallel.tensor=2", "parallel.expert=2"]),
                                 (4, "init_d4_e2_z3", ["parallel.expert=2", "zero.stage=3"])]:
            _, loss, norms, w, _, out = run(binary, mpiexec, config, tmp, ranks, tag, *MIXTRAL,
                                            f"model.init_from={src}_weights", *sets)
            dl, dw, l2 = equivalence.compare(loss, i_loss, w, i_w)
            dn = rel(norms, i_norms)
            read, _ = read_counts(out)  # rank 0 reads the tensors it holds: half the experts
            ok = (len(loss) == STEPS and dl <= LOSS_TOL and dn <= NORM_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL
                  and 0 < read < total)
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} model.init_from it at {ranks} ranks {' '.join(sets)}: max loss rel diff "
                  f"{dl:.2e}, grad norm {dn:.2e}, weights: rel L2 diff {l2:.2e}, max abs diff {dw:.2e}; rank 0 read "
                  f"{read} of {total} parameters")

        # Resume: bitwise on the same layout; a data-2 stage-1 checkpoint (each rank's optimizer
        # pieces) resharded onto one rank continues as the uninterrupted run.
        for ranks, tag, sets, then in [(1, "resume_d1", [], (1, [])),
                                       (2, "resume_d2_z1", ["zero.stage=1"], (1, [])),
                                       (4, "resume_d4_e2", ["parallel.expert=2"], (1, [])),
                                       (2, "resume_d2_z1_to_e2", ["zero.stage=1"], (2, ["parallel.expert=2"])),
                                       (1, "resume_d1_to_e4", [], (4, ["parallel.expert=4"])),
                                       (4, "resume_t2_e2", ["parallel.tensor=2", "parallel.expert=2"], (1, [])),
                                       (1, "resume_d1_to_t2_e2", [], (4, ["parallel.tensor=2", "parallel.expert=2"])),
                                       (4, "resume_d4_e2_z1", ["parallel.expert=2", "zero.stage=1"],
                                        (4, ["parallel.expert=2", "zero.stage=1"])),
                                       (4, "resume_d4_e2_z1_to_d1", ["parallel.expert=2", "zero.stage=1"], (1, [])),
                                       (4, "resume_d4_e2_z3_to_e4_z2", ["parallel.expert=2", "zero.stage=3"],
                                        (4, ["parallel.expert=4", "zero.stage=2"])),
                                       (2, "resume_d2_z1_to_d4_e2_z1", ["zero.stage=1"],
                                        (4, ["parallel.expert=2", "zero.stage=1"])),
                                       (8, "resume_t2_d4_e2_z1_to_d2_z1",
                                        ["parallel.tensor=2", "parallel.expert=2", "zero.stage=1"], (2, ["zero.stage=1"])),
                                       (4, "resume_p2_d2_e2_z1_to_d4_e2_z2",
                                        ["parallel.pipeline=2", "parallel.expert=2", "zero.stage=1"],
                                        (4, ["parallel.expert=2", "zero.stage=2"])),
                                       (4, "resume_p2v2_d2_e2_z3_to_d1",
                                        ["model.n_layers=4", "parallel.pipeline=2", "parallel.schedule=interleaved",
                                         "parallel.virtual_stages=2", "parallel.expert=2", "zero.stage=3"],
                                        (1, ["model.n_layers=4"])),
                                       (4, "resume_d4_e2_z3", ["parallel.expert=2", "zero.stage=3"],
                                        (4, ["parallel.expert=2", "zero.stage=3"])),
                                       (2, "resume_d2_z1_to_d4_e2_z3", ["zero.stage=1"],
                                        (4, ["parallel.expert=2", "zero.stage=3"])),
                                       (4, "resume_t2_d2_e2_z2_to_d4_e4_z1",
                                        ["parallel.tensor=2", "parallel.expert=2", "zero.stage=2"],
                                        (4, ["parallel.expert=4", "zero.stage=1"])),
                                       (4, "resume_mx_t2_e2_z1_to_d1", MIXTRAL + ["parallel.tensor=2", "parallel.expert=2",
                                                                                  "zero.stage=1"], (1, MIXTRAL))]:
            ref_loss, ref_norms, ref_w, _ = reference(sets)
            ck = os.path.join(tmp, tag + "_ck")
            run(binary, mpiexec, config, tmp, ranks, tag + "_a", f"checkpoint.dir={ck}", "train.stop_after=3", *sets)
            _, loss, norms, w, _, out = run(binary, mpiexec, config, tmp, then[0], tag + "_b", f"checkpoint.dir={ck}",
                                            *then[1])
            dl, dw, l2 = equivalence.compare(loss, ref_loss[3:], w, ref_w)
            bitwise = ranks == 1 and then[0] == 1
            # Per-rank optimizer state is read as written on the same layout, else resharded.
            per_rank = any(x.startswith("zero.stage=") and x != "zero.stage=0" for x in sets)
            resharded = "resharding it for" in out
            ok = (len(loss) == STEPS - 3 and (loss == ref_loss[3:] and w == ref_w if bitwise else
                                              dl <= LOSS_TOL and dw <= WEIGHT_MAX_TOL and l2 <= WEIGHT_L2_TOL)
                  and resharded == (per_rank and (ranks, sets) != then))
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} stopped after step 3 at {ranks} rank(s) {' '.join(sets)}, resumed on "
                  f"{then[0]} {' '.join(then[1])}: "
                  f"{'bitwise' if bitwise else 'resharded' if resharded else 'own pieces'}: loss rel diff {dl:.2e}, "
                  f"max abs weight diff {dw:.2e}")

        # An expert group that does not divide the experts: one line (from rank 0), every rank exits 1.
        # A checkpoint of other expert blocks (the same sizes) is refused, not read into the wrong tensors.
        ck = os.path.join(tmp, "resume_d1_ck")
        mx_ck = os.path.join(tmp, "resume_mx_t2_e2_z1_to_d1_ck")
        for ranks, sets, want in [(1, [f"checkpoint.dir={ck}", "moe.layer_freq=2", "model.n_layers=2"],
                                   "moe.experts 4 and 1 shared every 1 blocks"),
                                  (1, [f"checkpoint.dir={mx_ck}"] + MIXTRAL[:-1] + ["moe.ffn_hidden_size=40"],
                                   "moe.experts 4 and 1 shared of width 48 every 1 blocks"),
                                  (4, MIXTRAL[:-1] + ["moe.ffn_hidden_size=90", "parallel.tensor=4"],
                                   "its hidden width moe.ffn_hidden_size = 90 must be divisible by parallel.tensor = 4"),
                                  (2, ["moe.experts=3", "parallel.expert=2"], "parallel.expert = 2 must divide moe.experts = 3")]:
            cmd, p = equivalence.launch(binary, mpiexec, config, ranks, BASE + sets)
            lines = [l for l in p.stderr.splitlines() if l.startswith("error:")]
            ok = p.returncode != 0 and len(lines) == 1 and all(want in l for l in lines) and "Abort" not in p.stderr
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {' '.join(sets)}: exit {p.returncode}, {lines[:1]}")
    if failed:
        sys.exit("FAIL: a mixture-of-experts layout did not train the one-rank model")
    print("PASS")


if __name__ == "__main__":
    main()
