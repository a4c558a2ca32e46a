#!/usr/bin/env python3
"""Llama's architecture whole on the CPU in fp32 (DESIGN.md section 4): RMSNorm of eps 1e-6, rotary
positions, SwiGLU of width 88, a head of its own, 2 key-value heads of 4, and no biases in the linear
layers (model.bias = false), dropout on. K steps at data 2, tensor 2 (the batch split), tensor 2
without dropout (the residual added in the projections' GEMM epilogue, with no bias), tensor 2 with
sequence parallelism, pipeline 2 (interleaved), ZeRO stage 3 with full recomputation, and tensor 2 x
pipeline 2 x data 2 give the same losses, gradient norms and exported weights as one rank, up to
fp32 reduction-order rounding. A run stopped after step 3 and resumed continues bitwise on one rank;
a tensor 2 checkpoint resumed on one rank continues as the uninterrupted run. With biases on qkv alone
(model.qkv_bias, Qwen2's) tensor 2, also with sequence parallelism, gives one rank's; so do, with Qwen3's
attention (QK-norm, heads of 24 at d_model 64), tensor 2 with and without sequence parallelism, data 2
with ZeRO 3 and full recomputation, and pipeline 2 with selective recomputation; so do, with
Mistral's sliding window (model.sliding_window = 8 of 32 positions, other losses than attending to
all), tensor 2 with sequence parallelism (with dropout) and pipeline 2 x data 2 at ZeRO stage 2; so
do, with document masking (data.document_mask, token 10 ending documents), tensor 2 with and without
sequence parallelism, pipeline 2 (interleaved) and data 2 at ZeRO stage 3 with full recomputation. One
line refuses: resuming it with biases, a windowed checkpoint without the window, init_from a model
with biases, and exporting it to Hugging Face GPT-2.
Usage: llama_equivalence.py TRAIN_GPT MPIEXEC CONFIG [EXPORT_HF]"""
import os
import sys
import tempfile

import equivalence

STEPS = 6
LLAMA = ["model.norm=rmsnorm", "model.norm_eps=1e-6", "model.position_embedding=rope", "model.mlp=swiglu",
         "model.ffn_hidden_size=88", "model.tie_embeddings=false", "model.n_kv_heads=2", "model.bias=false"]
BASE = ["train.device=cpu", f"train.steps={STEPS}", "train.micro_batch=2", "train.global_batch=8",
        "model.dropout=0.1", "model.n_layers=4", "log.val_every=0", "train.grad_clip=0.5"] + LLAMA


def run(binary, mpiexec, config, tmp, ranks, tag, *sets):
    return equivalence.run(binary, mpiexec, config, tmp, ranks, tag, BASE + list(sets))


def main():
    binary, mpiexec, config = sys.argv[1:4]
    export_hf = sys.argv[4] if len(sys.argv) > 4 else None
    check = equivalence.Checks(binary, mpiexec, config)

    with tempfile.TemporaryDirectory() as tmp:
        _, ref_loss, _, ref_w, names, ref_norms, out = run(binary, mpiexec, config, tmp, 1, "ref")
        biases = [n for n in names if n.endswith(".b")]
        model_line = next((line for line in out.splitlines() if line.startswith("model:")), "")
        check(not biases and "no linear biases" in model_line and "norm eps 1e-06" in model_line and
              ref_loss[-1] < ref_loss[0],
              f"one rank: no biases among {len(names)} tensors; {model_line}; loss {ref_loss[0]:.4f} -> {ref_loss[-1]:.4f}")
        _, nodrop_loss, _, nodrop_w, _, nodrop_norms, _ = run(binary, mpiexec, config, tmp, 1, "ref0", "model.dropout=0")

        layouts = [
            (2, "data 2, two micro-batches a rank", [], False),
            (2, "tensor 2 (batch split)", ["parallel.tensor=2"], False),
            (2, "tensor 2 without dropout (residual in the GEMM)", ["parallel.tensor=2", "model.dropout=0"], True),
            (2, "tensor 2, sequence parallel", ["parallel.tensor=2", "parallel.sequence_parallel=true"], False),
            (2, "pipeline 2 (interleaved, 2 virtual stages)",
             ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"], False),
            (2, "data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"], False),
            (8, "tensor 2 x pipeline 2 x data 2, sequence parallel, ZeRO 1",
             ["parallel.tensor=2", "parallel.pipeline=2", "parallel.sequence_parallel=true", "zero.stage=1"], False),
        ]
        for i, (ranks, what, sets, nodrop) in enumerate(layouts):
            _, loss, _, w, _, norms, _ = run(binary, mpiexec, config, tmp, ranks, f"l{i}", *sets)
            ref = (nodrop_loss, nodrop_w, nodrop_norms) if nodrop else (ref_loss, ref_w, ref_norms)
            ok, text = equivalence.layout_line((loss, w, norms), ref, STEPS)
            check(ok, f"{what}: {text}")
        equivalence.check_resumes(lambda *a: run(binary, mpiexec, config, tmp, *a), check, tmp, ref_loss, ref_w, STEPS)

        # Qwen2's biases on qkv alone (model.qkv_bias): split over the tensor group as qkv's uneven groups.
        _, q_loss, _, q_w, q_names, q_norms, _ = run(binary, mpiexec, config, tmp, 1, "qref", "model.qkv_bias=true")
        q_biases = [n for n in q_names if n.endswith(".b")]
        check(q_biases == [f"h.{i}.attn.qkv.b" for i in range(4)], f"model.qkv_bias: one rank holds {q_biases}")
        for i, (what, sets) in enumerate([("tensor 2 (batch split)", ["parallel.tensor=2"]),
                                          ("tensor 2, sequence parallel", ["parallel.tensor=2",
                                                                           "parallel.sequence_parallel=true"])]):
            _, loss, _, w, _, norms, _ = run(binary, mpiexec, config, tmp, 2, f"q{i}", "model.qkv_bias=true", *sets)
            ok, text = equivalence.layout_line((loss, w, norms), (q_loss, q_w, q_norms), STEPS)
            check(ok, f"qkv biases, {what}: {text}")

        # Qwen3's attention: QK-norm (its weights replicated over the tensor group, their gradients summed
        # over it) and heads of 24 at d_model 64 (q and the attention output 96 wide).
        QWEN3 = ["model.qk_norm=true", "model.head_dim=24"]
        _, k_loss, _, k_w, k_names, k_norms, k_out = run(binary, mpiexec, config, tmp, 1, "kref", *QWEN3)
        norms = [n for n in k_names if n.endswith("_norm.w")]
        check(norms == [f"h.{i}.attn.{qk}_norm.w" for i in range(4) for qk in "qk"] and "QK-norm" in k_out and
              k_loss[-1] < k_loss[0], f"model.qk_norm, model.head_dim = 24: one rank holds {norms}; "
              f"loss {k_loss[0]:.4f} -> {k_loss[-1]:.4f}")
        for i, (what, sets) in enumerate([
                ("tensor 2 (batch split)", ["parallel.tensor=2"]),
                ("tensor 2, sequence parallel", ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
                ("data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"]),
                ("pipeline 2, selective recompute", ["parallel.pipeline=2", "train.checkpointing=selective"])]):
            _, loss, _, w, _, norms, _ = run(binary, mpiexec, config, tmp, 2, f"k{i}", *QWEN3, *sets)
            ok, text = equivalence.layout_line((loss, w, norms), (k_loss, k_w, k_norms), STEPS)
            check(ok, f"QK-norm and heads of 24, {what}: {text}")
        # Mistral's sliding window: each rank's heads attend within it, as one rank's do.
        WINDOW = ["model.sliding_window=8"]
        _, w_loss, _, w_w, _, w_norms, w_out = run(binary, mpiexec, config, tmp, 1, "wref", *WINDOW)
        check("sliding window 8" in w_out and max(abs(a - b) for a, b in zip(w_loss, ref_loss)) > 1e-3,
              f"model.sliding_window = 8: the log says so, losses {w_loss[0]:.5f} .. against {ref_loss[0]:.5f} .. of all")
        for i, (ranks, what, sets) in enumerate([
                (2, "tensor 2, sequence parallel", ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
                (4, "pipeline 2 x data 2, ZeRO 2", ["parallel.pipeline=2", "zero.stage=2"])]):
            _, loss, _, w, _, norms, _ = run(binary, mpiexec, config, tmp, ranks, f"w{i}", *WINDOW, *sets)
            ok, text = equivalence.layout_line((loss, w, norms), (w_loss, w_w, w_norms), STEPS)
            check(ok, f"sliding window 8, {what}: {text}")
        # Document masking (token 10 ends documents): every chunk's attention, on every layout, stays
        # within its documents as one rank's does; the batch split halves the document starts with the
        # samples, and the middle chunks of the interleaved pipeline fetch the tokens for them.
        DOCS = ["data.document_mask=true", "data.eod_token=10"]
        _, d_loss, _, d_w, _, d_norms, d_out = run(binary, mpiexec, config, tmp, 1, "dref", *DOCS)
        check("a new one after every token 10" in d_out and max(abs(a - b) for a, b in zip(d_loss, ref_loss)) > 1e-4,
              f"data.document_mask: the log says so, losses {d_loss[0]:.5f} .. against {ref_loss[0]:.5f} .. unmasked")
        for i, (ranks, what, sets) in enumerate([
                (2, "tensor 2 (batch split)", ["parallel.tensor=2"]),
                (2, "tensor 2, sequence parallel", ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
                (2, "pipeline 2 (interleaved, 2 virtual stages)",
                 ["parallel.pipeline=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"]),
                (2, "data 2, ZeRO 3, full recompute", ["zero.stage=3", "train.checkpointing=full"])]):
            _, loss, _, w, _, norms, _ = run(binary, mpiexec, config, tmp, ranks, f"d{i}", *DOCS, *sets)
            ok, text = equivalence.layout_line((loss, w, norms), (d_loss, d_w, d_norms), STEPS)
            check(ok, f"document masking, {what}: {text}")
        windowed = equivalence.short_checkpoint(binary, mpiexec, config, tmp, "window_ckpt", LLAMA + WINDOW)
        check.refused(1, ["train.device=cpu", "train.steps=4", "checkpoint.dir=" + windowed] + LLAMA,
                      "n_kv_heads 2, sliding window 8,", "resume a sliding-window checkpoint without the window")
        qk = equivalence.short_checkpoint(binary, mpiexec, config, tmp, "qk_ckpt", LLAMA + QWEN3)
        check.refused(1, ["train.device=cpu", "train.steps=4", "checkpoint.dir=" + qk] + LLAMA + QWEN3[1:],
                      "was written for vocab_size 64, seq_len 32, n_layers 2, n_heads 4, d_model 64, rope theta 10000, "
                      "swiglu MLP, ffn_hidden_size 88, rmsnorm, untied head, n_kv_heads 2, head_dim 24, qk_norm,",
                      "resume a QK-norm checkpoint without it")

        check.refused(1, BASE + ["checkpoint.dir=" + os.path.join(tmp, "ckpt1"), "model.bias=true", "train.steps=8"],
                      "no linear biases", "resume a bias-free checkpoint with biases")
        biased = equivalence.short_checkpoint(binary, mpiexec, config, tmp, "biased", LLAMA[:-1])
        check.refused(1, ["train.device=cpu", "model.init_from=" + biased] + LLAMA,
                      "biases in its linear layers (model.bias = true)", "init_from the same model with biases")
        if export_hf:  # biases alone missing (Llama's other parts would be refused first)
            equivalence.run(binary, mpiexec, config, tmp, 1, "nobias", ["train.device=cpu", "train.steps=2", "model.bias=false"])
            equivalence.check_export_refused(check, export_hf, os.path.join(tmp, "nobias_weights"),
                                             os.path.join(tmp, "hf"), "no linear biases")
    check.finish()


if __name__ == "__main__":
    main()
