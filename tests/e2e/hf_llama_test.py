#!/usr/bin/env python3
"""Hugging Face Llama directories (transformers' LlamaForCausalLM), both ways.

Everywhere (pure Python): a tiny Llama (rotary positions of base 500, SwiGLU of width 88, RMSNorm of
eps 1e-6, 2 key-value heads of 4, no linear biases, an untied head) trained 3 steps on the CPU and
exported: config.json describes it (model_type llama, num_key_value_heads, intermediate_size,
rms_norm_eps, rope_theta, tie_word_embeddings false), model.safetensors holds Llama's tensors with
exactly Trellis's values (qkv as q_proj, k_proj, v_proj; fc as gate_proj, up_proj; no vocabulary
padding); model.init_from of the export starts the same model exactly (padding rows zero), and one of
another shape gets one error line; the same tensors split into two shards with a
model.safetensors.index.json (as transformers saves a large model) start it the same, and an index
naming a file outside the directory gets one error line. Tied, the export has no lm_head.weight and says
tie_word_embeddings true. One error line, nothing written, for a model that is neither a GPT-2 nor a
Llama; one error line from model.init_from for a config.json with another rope_scaling type, another activation,
biases, or another model_type. Llama 3.1's rope scaling (rope_type llama3) is exported as
transformers writes it, started from, and refused by a run without it; so is linear rope scaling
(rope_type linear, factor 4), refused by a run with Llama 3's; and YaRN (rope_type yarn, factor 4 over 16
original positions, its attention factor written as resolved), refused by a run with linear scaling.
Where torch and transformers import: LlamaForCausalLM.from_pretrained(export) computes the loss
Trellis computed (a --dump-grads dump) within 1e-5, also with rope scaling, and a random Llama that
transformers wrote (unscaled, and scaled) starts a Trellis run whose first loss is transformers' on
the same tokens.
Qwen3 (Qwen3ForCausalLM): QK-norm and heads of 24 at d_model 64 (model.head_dim), tied, exported with
head_dim and each block's q_norm and k_norm, exactly; started from; refused into a run of another head
size, and exported not at all with qkv biases too; with transformers its loss is Trellis's, and a Qwen3
it wrote (norm weights drawn) starts a Trellis run whose first loss is transformers'. So does a Mistral
it wrote (MistralForCausalLM: Llama's block; heads of 32 at hidden_size 64, model.head_dim), and one
whose sliding window (8) is shorter than its context, started with model.sliding_window = 8 (without
it the log warns); a Llama attending within a window of 8 exports as a Mistral whose loss in
transformers is Trellis's, and with QK-norm the export is refused. So does a Phi-3 it wrote
(Phi3ForCausalLM: Llama's block, its qkv_proj and gate_up_proj fused as Trellis's qkv and fc), and one
turning half of each head (partial_rotary_factor 0.5, model.partial_rotary_factor), which one line
refuses into a run turning whole heads; one line refuses partial rotary in a Llama's config.json. A
model turning half of each head exports as a Phi-3 whose loss in transformers is Trellis's; with
QK-norm it is refused. LongRoPE (model.rope_scaling = longrope, the long factors past 16 original
positions) exports as a Phi-3 with both lists and the attention factor, whose loss in transformers is
Trellis's; a Phi-3 it wrote with LongRoPE (the attention factor inferred) starts a Trellis run whose
first loss is transformers', and one line refuses it into a run without; one line refuses LongRoPE
in a Llama's config.json.
Mixtral (MixtralForCausalLM): a tiny Llama whose MLPs are 4 SwiGLU experts of width 40, top 2, is
exported with num_local_experts, num_experts_per_tok and intermediate_size 40 and each expert's w1,
w3 (fc's gate and up rows) and w2, the router as block_sparse_moe.gate, exactly; model.init_from of
the export starts the same model, and one line refuses it into a run of another expert width and the
export of experts with a shared MLP or with gates not renormalized; with transformers, its loss is Trellis's, and a Mixtral it wrote
starts a Trellis run whose first loss is transformers'.
Qwen3-MoE (Qwen3MoeForCausalLM): Mixtral's experts with Qwen3's attention, gates renormalized
(norm_topk_prob) and not, exported with num_experts, moe_intermediate_size and each block's mlp.gate and
experts' gate_proj, up_proj, down_proj, exactly; started from; with transformers its loss is Trellis's,
and a Qwen3-MoE it wrote starts a Trellis run whose first loss is transformers'.
Qwen2-MoE (Qwen2MoeForCausalLM): Mixtral's experts (gates not renormalized) with Qwen2's qkv biases
and a shared MLP two experts wide, gated per token (moe.shared_gate), exported with
shared_expert_intermediate_size and each block's mlp.shared_expert and mlp.shared_expert_gate,
exactly; started from; with transformers its loss is Trellis's, and a Qwen2-MoE it wrote starts a
Trellis run whose first loss is transformers'; one line refuses a shared width that is no multiple
of the experts'.
Usage: hf_llama_test.py TRAIN_GPT EXPORT_HF CONFIG"""
import json
import math
import os
import shutil
import struct
import sys
import tempfile

import equivalence
from hf_export_test import check_hf_loss, hf_loss, read_safetensors, run

LLAMA = ["model.position_embedding=rope", "model.rope_theta=500", "model.mlp=swiglu", "model.ffn_hidden_size=88",
         "model.norm=rmsnorm", "model.norm_eps=1e-6", "model.n_kv_heads=2", "model.bias=false",
         "model.tie_embeddings=false"]
# Phi-3's: Llama's block turning half of each head's dims (model.partial_rotary_factor).
PARTIAL = LLAMA + ["model.partial_rotary_factor=0.5"]
# Llama 3.1's rope scaling, with original positions 64 so that the tiny model's 8 frequencies fall in all three bands.
SCALED = LLAMA + ["model.rope_scaling=llama3", "model.rope_original_positions=64"]
# Linear rope scaling (position interpolation), every frequency divided by 4.
LINEAR = LLAMA + ["model.rope_scaling=linear", "model.rope_scaling_factor=4"]
# YaRN, factor 4 over 16 original positions: of the 8 pairs the first kept, the second blended, the rest divided.
YARN = LLAMA + ["model.rope_scaling=yarn", "model.rope_scaling_factor=4", "model.rope_original_positions=16"]
# LongRoPE (Phi-3.5's): the 32 positions past the original 16 take the long factors; the attention
# factor is transformers' default for a factor of 2, sqrt(1 + ln 2 / ln 16).
LONG_FACTORS, SHORT_FACTORS = [1, 1.5, 2, 3, 4, 6, 8, 16], [1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7]
LONGROPE = LLAMA + ["model.rope_scaling=longrope", "model.rope_original_positions=16", "model.rope_scaling_factor=2",
                    "model.rope_long_factor=" + ",".join(map(str, LONG_FACTORS)),
                    "model.rope_short_factor=" + ",".join(map(str, SHORT_FACTORS))]
QWEN2 = LLAMA + ["model.qkv_bias=true"]  # Qwen2's biases on q, k and v
# Qwen3's attention: QK-norm and heads of 24 (q 96 wide at d_model 64), tied as Qwen3 0.6B.
QWEN3 = [s for s in LLAMA if "tie_embeddings" not in s] + ["model.qk_norm=true", "model.head_dim=24"]
# Mixtral's: Llama's block whose MLP is 4 SwiGLU experts of width 40 (top 2, dropless, as Mixtral
# routes).
MIXTRAL = [s for s in LLAMA if "ffn_hidden_size" not in s] + ["moe.experts=4", "moe.top_k=2", "moe.ffn_hidden_size=40",
                                                              "moe.dropless=true"]
# Qwen3-MoE's: Mixtral's experts with Qwen3's attention (QK-norm, heads of 24); gates renormalized
# (norm_topk_prob true, as Qwen3-30B-A3B's) and not.
QWEN3_MOE = MIXTRAL + ["model.qk_norm=true", "model.head_dim=24"]
# Qwen2-MoE's (Qwen1.5-MoE's): Mixtral's experts, gates not renormalized, Qwen2's qkv biases and a shared
# MLP two experts wide whose output a per-token sigmoid gates.
QWEN2_MOE = MIXTRAL + ["model.qkv_bias=true", "moe.shared_experts=2", "moe.shared_gate=true", "moe.renormalize=false"]
SCALING = {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
           "original_max_position_embeddings": 64}
# Llama 3.2 1B's config.json as published (transformers 4.45).
LLAMA32_1B = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
              "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
              "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
              "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
              "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                               "original_max_position_embeddings": 8192, "rope_type": "llama3"},
              "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256}
# Qwen3 0.6B's shape in its config.json's form (transformers 4.51): heads of 128 at hidden_size 1024.
QWEN3_06B = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
             "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
             "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960,
             "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
             "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
             "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
             "use_sliding_window": False, "vocab_size": 151936}
# Phi-3-mini-4k's config.json (examples/configs/phi3_mini_4k_finetune.toml): its sliding window of 2047.
PHI3_MINI_4K = {"architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
                "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
                "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
                "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
                "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047,
                "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32064}
check = equivalence.Checks(None, None, None)  # the ok/FAIL tally


def train(binary, config, sets, extra=()):
    cmd = [binary, config]
    for s in ["train.device=cpu", "train.steps=3", "model.dropout=0", "train.precision=fp32"] + sets:
        cmd += ["--set", s]
    p = run(cmd + list(extra))
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def one_error(cmd, want):
    p = run(cmd)
    lines = [x for x in p.stderr.splitlines() if x.startswith("error")]
    return p.returncode != 0 and len(lines) == 1 and want in lines[0], lines


def floats(path):
    raw = open(path, "rb").read()
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def write_shards(src, dst, names_per_shard):
    """dst: src's model.safetensors split into shards of these tensor names, and the index."""
    raw = open(src, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    os.makedirs(dst)
    weight_map = {}
    for k, names in enumerate(names_per_shard):
        file = f"model-{k + 1:05d}-of-{len(names_per_shard):05d}.safetensors"
        hdr, body = {}, b""
        for name in names:
            a, b = header[name]["data_offsets"]
            hdr[name] = {**header[name], "data_offsets": [len(body), len(body) + b - a]}
            body += data[a:b]
            weight_map[name] = file
        text = json.dumps(hdr).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        open(os.path.join(dst, file), "wb").write(struct.pack("<Q", len(text)) + text + body)
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(dst, "model.safetensors.index.json"), "w"))
    os.link(os.path.join(os.path.dirname(src), "config.json"), os.path.join(dst, "config.json"))


def padded_source(dump):
    """A dump's parameters as an init_from of its export holds them: padding rows zero (wte's, and an
    untied head's)."""
    src, meta = floats(os.path.join(dump, "params.f32")), json.load(open(os.path.join(dump, "model.json")))
    V, P, C = meta["config"]["vocab_size"], meta["config"]["padded_vocab"], meta["config"]["d_model"]
    pad = (0.0,) * ((P - V) * C)
    head_at = next((q["offset"] for q in meta["params"] if q["name"] == "lm_head.w"), None)
    if head_at is None:  # tied
        return src[:V * C] + pad + src[P * C:]
    return src[:V * C] + pad + src[P * C:head_at + V * C] + pad


def write_sparse_llama(d, cfg):
    """A Hugging Face Llama directory of this config.json with a model.safetensors whose header names
    every tensor (bf16) and whose data are holes: what a reader checks before it reads values."""
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    C, F, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    hd = cfg.get("head_dim", C // cfg["num_attention_heads"])
    A, Ckv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [V, C]
    for i in range(L):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [C], p + "post_attention_layernorm.weight": [C],
                       p + "self_attn.o_proj.weight": [C, A], p + "mlp.down_proj.weight": [C, F]})
        if cfg["model_type"] == "phi3":  # q, k, v and gate, up fused
            shapes.update({p + "self_attn.qkv_proj.weight": [A + 2 * Ckv, C], p + "mlp.gate_up_proj.weight": [2 * F, C]})
        else:
            shapes.update({p + "self_attn.q_proj.weight": [A, C], p + "self_attn.k_proj.weight": [Ckv, C],
                           p + "self_attn.v_proj.weight": [Ckv, C], p + "mlp.gate_proj.weight": [F, C],
                           p + "mlp.up_proj.weight": [F, C]})
        if cfg["model_type"] == "qwen3":
            shapes.update({p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd]})
    header, at = {}, 0
    for name, shape in shapes.items():
        n = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + at)


def expected(weights_dir):
    """Llama's tensors from a Trellis weight export: {name: (shape, values)}."""
    meta = json.load(open(os.path.join(weights_dir, "model.json")))
    flat, c = floats(os.path.join(weights_dir, "params.f32")), meta["config"]
    V, C, F = c["vocab_size"], c["d_model"], c.get("ffn_hidden_size", 4 * c["d_model"])
    hd = c.get("head_dim", C // c["n_heads"])
    A, Ckv = c["n_heads"] * hd, c.get("n_kv_heads", c["n_heads"]) * hd  # q's width, k's and v's
    out = {}
    for p in meta["params"]:
        name, off = p["name"], p["offset"]
        if name in ("wte", "lm_head.w"):
            out["model.embed_tokens.weight" if name == "wte" else "lm_head.weight"] = ([V, C], flat[off:off + V * C])
            continue
        if name == "lnf.w":
            out["model.norm.weight"] = ([C], flat[off:off + C])
            continue
        layer, rest = name.split(".", 2)[1], name.split(".", 2)[2]
        pre = f"model.layers.{layer}."
        # Qwen3-MoE's and Qwen2-MoE's names (mlp.gate, gate_proj, up_proj, down_proj), else Mixtral's
        q3m = c.get("qk_norm", False) or c.get("moe", {}).get("shared_gate", False)
        moe = pre + ("mlp." if q3m else "block_sparse_moe.")
        if rest == "moe.router.w":
            E = c["moe"]["experts"]
            out[moe + "gate.weight"] = ([E, C], flat[off:off + E * C])
            continue
        if rest == "moe.shared_gate.w":
            out[moe + "shared_expert_gate.weight"] = ([1, C], flat[off:off + C])
            continue
        if rest.startswith("moe.shared."):  # Qwen2-MoE's shared expert: fc.w gate_proj and up_proj, proj.w down_proj
            Fs = c["moe"]["ffn_hidden_size"] * c["moe"]["shared_experts"]
            if rest == "moe.shared.fc.w":
                out[moe + "shared_expert.gate_proj.weight"] = ([Fs, C], flat[off:off + Fs * C])
                out[moe + "shared_expert.up_proj.weight"] = ([Fs, C], flat[off + Fs * C:off + 2 * Fs * C])
            else:
                out[moe + "shared_expert.down_proj.weight"] = ([C, Fs], flat[off:off + C * Fs])
            continue
        if rest.startswith("moe.experts."):  # moe.experts.J.fc.w: w1 (gate) and w3 (up); proj.w: w2
            j, what = rest.split(".")[2], ".".join(rest.split(".")[3:])
            Fe, ex = c["moe"]["ffn_hidden_size"], f"{moe}experts.{j}."
            gate, up, down = ("gate_proj", "up_proj", "down_proj") if q3m else ("w1", "w3", "w2")
            if what == "fc.w":
                out[ex + gate + ".weight"] = ([Fe, C], flat[off:off + Fe * C])
                out[ex + up + ".weight"] = ([Fe, C], flat[off + Fe * C:off + 2 * Fe * C])
            else:
                out[ex + down + ".weight"] = ([C, Fe], flat[off:off + C * Fe])
            continue
        pieces = {"ln1.w": [("input_layernorm.weight", [C])], "ln2.w": [("post_attention_layernorm.weight", [C])],
                  "attn.qkv.w": [("self_attn.q_proj.weight", [A, C]), ("self_attn.k_proj.weight", [Ckv, C]),
                                 ("self_attn.v_proj.weight", [Ckv, C])],
                  "attn.q_norm.w": [("self_attn.q_norm.weight", [hd])],
                  "attn.k_norm.w": [("self_attn.k_norm.weight", [hd])],
                  "attn.proj.w": [("self_attn.o_proj.weight", [C, A])],
                  "mlp.fc.w": [("mlp.gate_proj.weight", [F, C]), ("mlp.up_proj.weight", [F, C])],
                  "mlp.proj.w": [("mlp.down_proj.weight", [C, F])],
                  "attn.qkv.b": [("self_attn.q_proj.bias", [A]), ("self_attn.k_proj.bias", [Ckv]),
                                 ("self_attn.v_proj.bias", [Ckv])]}[rest]
        for hf, shape in pieces:
            n = shape[0] * (shape[1] if len(shape) > 1 else 1)
            out[pre + hf] = (shape, flat[off:off + n])
            off += n
    return out


def main():
    binary, export_hf, config = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        dump, hf = os.path.join(tmp, "dump"), os.path.join(tmp, "hf")
        train(binary, config, LLAMA, ["--dump-grads", dump])
        p = run([export_hf, dump, hf])
        check(p.returncode == 0 and "Llama" in p.stdout, f"export_hf of the Llama: exit {p.returncode} {p.stderr.strip()}")
        cfg = json.load(open(os.path.join(hf, "config.json")))
        check(cfg["model_type"] == "llama" and cfg["num_key_value_heads"] == 2 and cfg["num_attention_heads"] == 4 and
              cfg["intermediate_size"] == 88 and cfg["rms_norm_eps"] == 1e-6 and cfg["rope_theta"] == 500 and
              cfg["tie_word_embeddings"] is False and cfg["hidden_act"] == "silu" and cfg["attention_bias"] is False,
              "config.json: " + json.dumps(cfg))
        got, want = read_safetensors(os.path.join(hf, "model.safetensors"))[1], expected(dump)
        same = set(got) == set(want) and all(got[k][1:] == want[k] for k in want)
        check(same, f"{len(got)} tensors, each with Llama's name, shape and exactly Trellis's values")

        init = os.path.join(tmp, "init")
        train(binary, config, LLAMA + ["model.init_from=" + hf, "train.steps=1"], ["--dump-grads", init])
        back = floats(os.path.join(init, "params.f32"))
        check(back == padded_source(dump), "model.init_from = the Llama directory: the source's parameters (padding rows zero)")
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf] +
                              sum((["--set", s] for s in LLAMA if "n_kv_heads" not in s), []), "model.n_kv_heads = 2")
        check(ok, f"model.init_from with 4 key-value heads: {lines}")
        names = sorted(read_safetensors(os.path.join(hf, "model.safetensors"))[1])
        sharded, init_sharded = os.path.join(tmp, "sharded"), os.path.join(tmp, "init_sharded")
        write_shards(os.path.join(hf, "model.safetensors"), sharded, [names[::2], names[1::2]])
        train(binary, config, LLAMA + ["model.init_from=" + sharded, "train.steps=1"], ["--dump-grads", init_sharded])
        check(floats(os.path.join(init_sharded, "params.f32")) == back,
              "model.init_from = the same tensors in 2 shards with an index: the same parameters")
        index = os.path.join(sharded, "model.safetensors.index.json")
        bad = json.load(open(index))
        bad["weight_map"][names[0]] = "../" + bad["weight_map"][names[0]]
        json.dump(bad, open(index, "w"))
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + sharded] +
                              sum((["--set", s] for s in LLAMA), []), "no plain file name in this directory")
        check(ok, f"an index naming a file outside the directory: {lines}")

        tied, hf_tied = os.path.join(tmp, "tied"), os.path.join(tmp, "hf_tied")
        train(binary, config, LLAMA[:-1], ["--export-weights", tied])
        p = run([export_hf, tied, hf_tied])
        tcfg = json.load(open(os.path.join(hf_tied, "config.json"))) if p.returncode == 0 else {}
        names = set(read_safetensors(os.path.join(hf_tied, "model.safetensors"))[1]) if p.returncode == 0 else set()
        check(tcfg.get("tie_word_embeddings") is True and "lm_head.weight" not in names and
              "model.embed_tokens.weight" in names, "a tied Llama: tie_word_embeddings true, no lm_head.weight")

        mixed, out = os.path.join(tmp, "mixed"), os.path.join(tmp, "hf_mixed")
        train(binary, config, ["model.position_embedding=rope"], ["--export-weights", mixed])
        p = run([export_hf, mixed, out])
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(lines) == 1 and "a Llama rotary positions, SwiGLU" in lines[0] and
              not os.path.exists(out), f"export_hf of a model with rotary positions and GELU: {lines}")
        for key, value, want in [("rope_scaling", {"rope_type": "dynamic", "factor": 2.0},
                                  'rope_type is "dynamic" (allowed: default, llama3, linear, yarn, longrope)'),
                                 ("hidden_act", "gelu", 'hidden_act is "gelu"'),
                                 ("attention_bias", True, "attention_bias is true"),
                                 ("model_type", "gemma", '"gemma" (allowed: gpt2, llama, mistral, phi3, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe)'),
                                 ("sliding_window", 0, "sliding_window is 0"),
                                 ("rope_parameters", {"rope_type": "longrope", "long_factor": [1] * 8, "short_factor": [1] * 8},
                                  "Trellis reads LongRoPE from Phi-3 only"),
                                 ("partial_rotary_factor", 0.75, "partial_rotary_factor is not 1")]:
            d = os.path.join(tmp, "bad_" + key)
            os.makedirs(d)
            extra = {"model_type": "mistral"} if key == "sliding_window" else {}  # Mistral's window
            json.dump({**cfg, **extra, key: value}, open(os.path.join(d, "config.json"), "w"))
            os.link(os.path.join(hf, "model.safetensors"), os.path.join(d, "model.safetensors"))
            ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + d] +
                                  sum((["--set", s] for s in LLAMA), []), want)
            check(ok, f"config.json with {key} = {json.dumps(value)}: {lines}")

        # Llama 3.1's rope scaling: exported as transformers writes it, started from, refused unscaled.
        scaled_dump, hf_scaled = os.path.join(tmp, "scaled_dump"), os.path.join(tmp, "hf_scaled")
        train(binary, config, SCALED, ["--dump-grads", scaled_dump])
        p = run([export_hf, scaled_dump, hf_scaled])
        scfg = json.load(open(os.path.join(hf_scaled, "config.json"))) if p.returncode == 0 else {}
        check(scfg.get("rope_scaling") == SCALING, f"a scaled Llama's config.json: rope_scaling {scfg.get('rope_scaling')}")
        scaled_init = os.path.join(tmp, "scaled_init")
        train(binary, config, SCALED + ["model.init_from=" + hf_scaled, "train.steps=1"], ["--dump-grads", scaled_init])
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_scaled] +
                              sum((["--set", s] for s in LLAMA), []), "llama3 rope scaling (factor 8")
        check(ok, f"model.init_from of the scaled Llama into an unscaled run: {lines}")
        # Linear rope scaling likewise: rope_type linear with its factor, started from, refused with llama3's.
        linear_dump, hf_linear = os.path.join(tmp, "linear_dump"), os.path.join(tmp, "hf_linear")
        train(binary, config, LINEAR, ["--dump-grads", linear_dump])
        p = run([export_hf, linear_dump, hf_linear])
        lcfg = json.load(open(os.path.join(hf_linear, "config.json"))) if p.returncode == 0 else {}
        check(lcfg.get("rope_scaling") == {"rope_type": "linear", "factor": 4},
              f"a Llama with linear rope scaling: config.json's rope_scaling {lcfg.get('rope_scaling')}")
        linear_init = os.path.join(tmp, "linear_init")
        train(binary, config, LINEAR + ["model.init_from=" + hf_linear, "train.steps=1"], ["--dump-grads", linear_init])
        check(floats(os.path.join(linear_init, "params.f32")) == padded_source(linear_dump),
              "model.init_from = the Llama with linear rope scaling: the source's parameters")
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_linear] +
                              sum((["--set", s] for s in SCALED), []), "linear rope scaling (factor 4)")
        check(ok, f"model.init_from of it into a run with Llama 3's scaling: {lines}")

        # YaRN likewise: rope_type yarn with every value (the attention factor resolved), started from,
        # refused with linear's.
        yarn_dump, hf_yarn = os.path.join(tmp, "yarn_dump"), os.path.join(tmp, "hf_yarn")
        train(binary, config, YARN, ["--dump-grads", yarn_dump])
        p = run([export_hf, yarn_dump, hf_yarn])
        ycfg = json.load(open(os.path.join(hf_yarn, "config.json"))) if p.returncode == 0 else {}
        want_yarn = {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 16, "beta_fast": 32,
                     "beta_slow": 1, "attention_factor": 0.1 * math.log(4) + 1}
        got_yarn = ycfg.get("rope_scaling") or {}
        check(set(got_yarn) == set(want_yarn) and all(abs(got_yarn[k] - v) < 1e-12 for k, v in want_yarn.items()
                                                      if k != "rope_type") and got_yarn["rope_type"] == "yarn",
              f"a Llama with YaRN: config.json's rope_scaling {got_yarn}")
        yarn_init = os.path.join(tmp, "yarn_init")
        train(binary, config, YARN + ["model.init_from=" + hf_yarn, "train.steps=1"], ["--dump-grads", yarn_init])
        check(floats(os.path.join(yarn_init, "params.f32")) == padded_source(yarn_dump),
              "model.init_from = the Llama with YaRN: the source's parameters")
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_yarn] +
                              sum((["--set", s] for s in LINEAR), []), "yarn rope scaling (factor 4, original positions 16")
        check(ok, f"model.init_from of it into a run with linear scaling: {lines}")

        # examples/configs/llama32_1b_finetune.toml is Llama 3.2 1B's shape. Its config.json and a
        # sparse model.safetensors of its tensors (bf16, 2.5 GB of holes): the run's shape checks come
        # before the model is built (else this machine would first be told the 36 GiB run does not fit
        # it), in order: a wrong rope scaling factor is named, and a head untied, the last check, is
        # named only when everything before it matched.
        l32 = os.path.join(tmp, "llama32_1b")
        write_sparse_llama(l32, LLAMA32_1B)
        finetune = [binary, os.path.join(os.path.dirname(config), "llama32_1b_finetune.toml"), "--set",
                    "model.init_from=" + l32, "--set", "data.source=synthetic", "--set", "data.path=", "--set",
                    "train.device=cpu"]
        ok, lines = one_error(finetune + ["--set", "model.rope_scaling_factor=8"], "llama3 rope scaling (factor 32")
        check(ok, f"Llama 3.2 1B's directory into llama32_1b_finetune.toml with another rope scaling factor: {lines}")
        ok, lines = one_error(finetune + ["--set", "model.tie_embeddings=false"],
                              "holds a model with a head tied to the token embedding")
        check(ok, f"... and untied, the one difference named (the example has Llama 3.2 1B's shape): {lines}")
        # Likewise examples/configs/qwen3_0.6b_finetune.toml and Qwen3 0.6B's: without QK-norm the heads are
        # named, and untied the head (so every check before it, head_dim and QK-norm among them, matched).
        q06 = os.path.join(tmp, "qwen3_06b")
        write_sparse_llama(q06, QWEN3_06B)
        finetune = [binary, os.path.join(os.path.dirname(config), "qwen3_0.6b_finetune.toml"), "--set",
                    "model.init_from=" + q06, "--set", "data.source=synthetic", "--set", "data.path=", "--set",
                    "train.device=cpu"]
        ok, lines = one_error(finetune + ["--set", "model.qk_norm=false"], "holds a model with heads of size 128 with "
                              "QK-norm (model.head_dim = 128, model.qk_norm = true); this run has heads of size 128 without")
        check(ok, f"Qwen3 0.6B's directory into qwen3_0.6b_finetune.toml without QK-norm: {lines}")
        ok, lines = one_error(finetune + ["--set", "model.tie_embeddings=false"],
                              "holds a model with a head tied to the token embedding")
        check(ok, f"... and untied, the one difference named (the example has Qwen3 0.6B's shape): {lines}")

        # Likewise examples/configs/phi3_mini_4k_finetune.toml and Phi-3-mini-4k's (fused projections, a window
        # of 2047): tied, the head is named (every check before it matched); the window is the source's (no
        # warning before the memory check refuses the 3.8B run here), and without it the log warns.
        phi = os.path.join(tmp, "phi3_mini_4k")
        write_sparse_llama(phi, PHI3_MINI_4K)
        finetune = [binary, os.path.join(os.path.dirname(config), "phi3_mini_4k_finetune.toml"), "--set",
                    "model.init_from=" + phi, "--set", "data.source=synthetic", "--set", "data.path=", "--set",
                    "train.device=cpu"]
        ok, lines = one_error(finetune + ["--set", "model.tie_embeddings=true"], "holds a model with a head of its own")
        check(ok, f"Phi-3-mini-4k's directory into phi3_mini_4k_finetune.toml tied, the one difference named: {lines}")
        same, unwindowed = run(finetune), run(finetune + ["--set", "model.sliding_window=0"])
        check(same.returncode != 0 and "sliding window" not in same.stdout and
              "attends within a sliding window of 2047 positions" in unwindowed.stdout,
              f"... the window matched (no warning), and warned without it: {same.stderr.strip()[-200:]}")

        # Qwen2: biases on q, k and v alone (model.qkv_bias), exported as Qwen2ForCausalLM and started from.
        qdump, hf_q, qinit = os.path.join(tmp, "qdump"), os.path.join(tmp, "hf_qwen2"), os.path.join(tmp, "qinit")
        train(binary, config, QWEN2, ["--dump-grads", qdump])
        p = run([export_hf, qdump, hf_q])
        qcfg = json.load(open(os.path.join(hf_q, "config.json"))) if p.returncode == 0 else {}
        check(qcfg.get("model_type") == "qwen2" and qcfg.get("architectures") == ["Qwen2ForCausalLM"] and
              "Qwen2" in p.stdout, f"export_hf of a model with qkv biases: a Qwen2 ({p.stdout.strip()} {p.stderr.strip()})")
        got, want = read_safetensors(os.path.join(hf_q, "model.safetensors"))[1], expected(qdump)
        check(set(got) == set(want) and all(got[k][1:] == want[k] for k in want) and
              "model.layers.0.self_attn.k_proj.bias" in got, f"{len(got)} Qwen2 tensors, q/k/v biases among them, exact")
        train(binary, config, QWEN2 + ["model.init_from=" + hf_q, "train.steps=1"], ["--dump-grads", qinit])
        check(floats(os.path.join(qinit, "params.f32")) == padded_source(qdump),
              "model.init_from = the Qwen2 directory: the source's parameters")
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_q] +
                              sum((["--set", s] for s in LLAMA), []), "biases on qkv alone")
        check(ok, f"model.init_from of the Qwen2 into a run without qkv biases: {lines}")

        # Qwen3: QK-norm and a head size of its own, exported as Qwen3ForCausalLM and started from.
        q3dump, hf_q3, q3init = os.path.join(tmp, "q3dump"), os.path.join(tmp, "hf_qwen3"), os.path.join(tmp, "q3init")
        train(binary, config, QWEN3, ["--dump-grads", q3dump])
        p = run([export_hf, q3dump, hf_q3])
        q3cfg = json.load(open(os.path.join(hf_q3, "config.json"))) if p.returncode == 0 else {}
        check(q3cfg.get("model_type") == "qwen3" and q3cfg.get("architectures") == ["Qwen3ForCausalLM"] and
              q3cfg.get("head_dim") == 24 and q3cfg.get("tie_word_embeddings") is True and "Qwen3" in p.stdout,
              f"export_hf of a model with QK-norm: a Qwen3 with head_dim 24 ({p.stdout.strip()} {p.stderr.strip()})")
        got, want = read_safetensors(os.path.join(hf_q3, "model.safetensors"))[1], expected(q3dump)
        check(set(got) == set(want) and all(got[k][1:] == want[k] for k in want) and
              got.get("model.layers.1.self_attn.q_proj.weight", [0, [0]])[1] == [96, 64] and
              "model.layers.0.self_attn.k_norm.weight" in got,
              f"{len(got)} Qwen3 tensors (q_proj 96 x 64, q_norm and k_norm among them), exact")
        train(binary, config, QWEN3 + ["model.init_from=" + hf_q3, "train.steps=1"], ["--dump-grads", q3init])
        check(floats(os.path.join(q3init, "params.f32")) == padded_source(q3dump),
              "model.init_from = the Qwen3 directory: the source's parameters")
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_q3] +
                              sum((["--set", s] for s in QWEN3 if "head_dim" not in s), []),
                              "holds a model with heads of size 24 with QK-norm (model.head_dim = 24, model.qk_norm = true); "
                              "this run has heads of size 16 with QK-norm")
        check(ok, f"model.init_from of the Qwen3 into a run of heads of 16: {lines}")
        both = os.path.join(tmp, "qk_norm_and_qkv_bias")
        train(binary, config, QWEN3 + ["model.qkv_bias=true"], ["--export-weights", both])
        equivalence.check_export_refused(check, export_hf, both, os.path.join(tmp, "hf_both"),
                                         "both QK-norm (model.qk_norm) and biases on qkv")

        # Mixtral: exported as MixtralForCausalLM (each expert's w1, w3, w2, the router as the gate), started from.
        mdump, hf_m, minit = os.path.join(tmp, "mdump"), os.path.join(tmp, "hf_mixtral"), os.path.join(tmp, "minit")
        train(binary, config, MIXTRAL, ["--dump-grads", mdump])
        p = run([export_hf, mdump, hf_m])
        mcfg = json.load(open(os.path.join(hf_m, "config.json"))) if p.returncode == 0 else {}
        check(mcfg.get("model_type") == "mixtral" and mcfg.get("architectures") == ["MixtralForCausalLM"] and
              mcfg.get("num_local_experts") == 4 and mcfg.get("num_experts_per_tok") == 2 and
              mcfg.get("intermediate_size") == 40 and "Mixtral" in p.stdout,
              f"export_hf of Llama's block with SwiGLU experts: a Mixtral ({p.stdout.strip()} {p.stderr.strip()})")
        got, want = read_safetensors(os.path.join(hf_m, "model.safetensors"))[1], expected(mdump)
        check(set(got) == set(want) and all(got[k][1:] == want[k] for k in want) and
              "model.layers.1.block_sparse_moe.experts.3.w3.weight" in got,
              f"{len(got)} Mixtral tensors (experts' w1, w3, w2 and the gate among them), exact")
        train(binary, config, MIXTRAL + ["model.init_from=" + hf_m, "train.steps=1"], ["--dump-grads", minit])
        check(floats(os.path.join(minit, "params.f32")) == padded_source(mdump),
              "model.init_from = the Mixtral directory: the source's parameters")
        capped = [s for s in MIXTRAL if s != "moe.dropless=true"] + ["model.init_from=" + hf_m, "train.steps=1"]
        p = run([binary, config] + sum((["--set", s] for s in ["train.device=cpu"] + capped), []))
        warned = [x for x in p.stdout.splitlines() if "routes without dropping" in x]
        check(p.returncode == 0 and len(warned) == 1 and "set moe.dropless = true" in warned[0],
              f"model.init_from = the Mixtral directory into a run with a capacity: one warning ({warned})")
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_m] +
                              sum((["--set", s] for s in MIXTRAL + ["moe.ffn_hidden_size=48"]), []),
                              "holds a model with experts (moe.experts = 4, moe.ffn_hidden_size = 40,")
        check(ok, f"model.init_from of the Mixtral into a run of experts of width 48: {lines}")
        # Qwen3-MoE: exported as Qwen3MoeForCausalLM (mlp.gate, each expert's gate_proj, up_proj, down_proj).
        for renorm in (True, False):
            sets = QWEN3_MOE + ([] if renorm else ["moe.renormalize=false"])
            q3mdump, hf_q3m = os.path.join(tmp, f"q3mdump{renorm:d}"), os.path.join(tmp, f"hf_qwen3_moe{renorm:d}")
            train(binary, config, sets, ["--dump-grads", q3mdump])
            p = run([export_hf, q3mdump, hf_q3m])
            c3 = json.load(open(os.path.join(hf_q3m, "config.json"))) if p.returncode == 0 else {}
            check(c3.get("model_type") == "qwen3_moe" and c3.get("num_experts") == 4 and c3.get("norm_topk_prob") is renorm
                  and c3.get("moe_intermediate_size") == 40 and c3.get("head_dim") == 24 and "Qwen3-MoE" in p.stdout,
                  f"export_hf of Mixtral's experts with QK-norm, norm_topk_prob {renorm}: a Qwen3-MoE "
                  f"({p.stdout.strip()} {p.stderr.strip()})")
            got, want = read_safetensors(os.path.join(hf_q3m, "model.safetensors"))[1], expected(q3mdump)
            check(set(got) == set(want) and all(got[k][1:] == want[k] for k in want) and
                  "model.layers.1.mlp.experts.3.up_proj.weight" in got and "model.layers.0.mlp.gate.weight" in got,
                  f"{len(got)} Qwen3-MoE tensors (mlp.gate, the experts' gate_proj, up_proj, down_proj), exact")
            q3minit = os.path.join(tmp, f"q3minit{renorm:d}")
            train(binary, config, sets + ["model.init_from=" + hf_q3m, "train.steps=1"], ["--dump-grads", q3minit])
            check(floats(os.path.join(q3minit, "params.f32")) == padded_source(q3mdump),
                  "model.init_from = the Qwen3-MoE directory: the source's parameters")
            check_hf_loss(check, hf_q3m, q3mdump, f"the Qwen3-MoE export (norm_topk_prob {renorm})",
                          model_class="Qwen3MoeForCausalLM", tol=1e-6)
        # Qwen2-MoE: exported as Qwen2MoeForCausalLM (mlp.shared_expert's gate_proj, up_proj, down_proj and
        # mlp.shared_expert_gate beside Qwen3-MoE's names).
        q2mdump, hf_q2m = os.path.join(tmp, "q2mdump"), os.path.join(tmp, "hf_qwen2_moe")
        train(binary, config, QWEN2_MOE, ["--dump-grads", q2mdump])
        p = run([export_hf, q2mdump, hf_q2m])
        c2 = json.load(open(os.path.join(hf_q2m, "config.json"))) if p.returncode == 0 else {}
        check(c2.get("model_type") == "qwen2_moe" and c2.get("num_experts") == 4 and c2.get("norm_topk_prob") is False
              and c2.get("moe_intermediate_size") == 40 and c2.get("shared_expert_intermediate_size") == 80
              and c2.get("qkv_bias") is True and "Qwen2-MoE" in p.stdout,
              f"export_hf of Mixtral's experts with a gated shared MLP: a Qwen2-MoE ({p.stdout.strip()} {p.stderr.strip()})")
        got, want = read_safetensors(os.path.join(hf_q2m, "model.safetensors"))[1], expected(q2mdump)
        check(set(got) == set(want) and all(got[k][1:] == want[k] for k in want) and
              "model.layers.1.mlp.shared_expert.up_proj.weight" in got and
              got.get("model.layers.0.mlp.shared_expert_gate.weight", (0, []))[1] == [1, 64] and
              "model.layers.1.self_attn.k_proj.bias" in got,
              f"{len(got)} Qwen2-MoE tensors (the shared expert, its gate, the qkv biases), exact")
        q2minit = os.path.join(tmp, "q2minit")
        train(binary, config, QWEN2_MOE + ["model.init_from=" + hf_q2m, "train.steps=1"], ["--dump-grads", q2minit])
        check(floats(os.path.join(q2minit, "params.f32")) == padded_source(q2mdump),
              "model.init_from = the Qwen2-MoE directory: the source's parameters")
        check_hf_loss(check, hf_q2m, q2mdump, "the Qwen2-MoE export", model_class="Qwen2MoeForCausalLM", tol=1e-6)
        odd = os.path.join(tmp, "hf_qwen2_moe_odd")
        shutil.copytree(hf_q2m, odd)
        with open(os.path.join(odd, "config.json"), "w") as f:
            json.dump({**c2, "shared_expert_intermediate_size": 100}, f)
        ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + odd] +
                              sum((["--set", s] for s in QWEN2_MOE), []),
                              "shared_expert_intermediate_size 100 is not 1 to 64 times moe_intermediate_size 40")
        check(ok, f"model.init_from of a Qwen2-MoE whose shared width is no multiple of the experts': {lines}")
        shared = os.path.join(tmp, "shared_experts")
        train(binary, config, MIXTRAL + ["moe.shared_experts=1"], ["--export-weights", shared])
        equivalence.check_export_refused(check, export_hf, shared, os.path.join(tmp, "hf_shared"),
                                         "with a shared MLP (moe.shared_experts)")
        raw = os.path.join(tmp, "raw_gates")
        train(binary, config, MIXTRAL + ["moe.renormalize=false"], ["--export-weights", raw])
        equivalence.check_export_refused(check, export_hf, raw, os.path.join(tmp, "hf_raw"),
                                         "whose gates are not renormalized (moe.renormalize = false)")

        check_hf_loss(check, hf, dump, "the Llama export", model_class="LlamaForCausalLM")
        check_hf_loss(check, hf_m, mdump, "the Mixtral export", model_class="MixtralForCausalLM", tol=1e-6)
        check_hf_loss(check, hf_q, qdump, "the Qwen2 export", model_class="Qwen2ForCausalLM", tol=1e-6)
        check_hf_loss(check, hf_q3, q3dump, "the Qwen3 export", model_class="Qwen3ForCausalLM", tol=1e-6)
        # 1e-6: the tiny model's loss moves by about 1e-5 between scaled and unscaled rotation.
        check_hf_loss(check, hf_scaled, scaled_dump, "the Llama export with Llama 3.1's rope scaling",
                      model_class="LlamaForCausalLM", tol=1e-6)
        check_hf_loss(check, hf_linear, linear_dump, "the Llama export with linear rope scaling",
                      model_class="LlamaForCausalLM", tol=1e-6)
        check_hf_loss(check, hf_yarn, yarn_dump, "the Llama export with YaRN", model_class="LlamaForCausalLM", tol=1e-6)
        # Partial rotary: exported as a Phi-3 (the family that turns part of a head), its projections
        # fused; 1e-6 sees the half-turned heads (the loss moves by about 2e-5 against whole ones).
        pdump, hf_p = os.path.join(tmp, "partial_dump"), os.path.join(tmp, "hf_phi3")
        train(binary, config, PARTIAL, ["--dump-grads", pdump])
        p = run([export_hf, pdump, hf_p])
        pc = json.load(open(os.path.join(hf_p, "config.json"))) if p.returncode == 0 else {}
        names = set(read_safetensors(os.path.join(hf_p, "model.safetensors"))[1]) if p.returncode == 0 else set()
        check(pc.get("model_type") == "phi3" and pc.get("partial_rotary_factor") == 0.5 and "Phi-3" in p.stdout and
              "model.layers.1.self_attn.qkv_proj.weight" in names and "model.layers.0.mlp.gate_up_proj.weight" in names,
              f"export_hf of a model turning half of each head: a Phi-3 ({p.stdout.strip()} {p.stderr.strip()})")
        check_hf_loss(check, hf_p, pdump, "the Phi-3 export (partial_rotary_factor 0.5)", model_class="Phi3ForCausalLM",
                      tol=1e-6)
        # A sliding window: exported as a Mistral (Llama's block with a window), which transformers masks alike.
        wdump, hf_w = os.path.join(tmp, "window_dump"), os.path.join(tmp, "hf_mistral")
        train(binary, config, LLAMA + ["model.sliding_window=8"], ["--dump-grads", wdump])
        p = run([export_hf, wdump, hf_w])
        wc = json.load(open(os.path.join(hf_w, "config.json"))) if p.returncode == 0 else {}
        check(wc.get("model_type") == "mistral" and wc.get("sliding_window") == 8 and "Mistral" in p.stdout,
              f"export_hf of a model attending within 8 positions: a Mistral ({p.stdout.strip()} {p.stderr.strip()})")
        check_hf_loss(check, hf_w, wdump, "the Mistral export (sliding_window 8)", model_class="MistralForCausalLM",
                      tol=1e-6)
        qk_window = os.path.join(tmp, "qk_window")
        train(binary, config, QWEN3 + ["model.sliding_window=8"], ["--export-weights", qk_window])
        equivalence.check_export_refused(check, export_hf, qk_window, os.path.join(tmp, "hf_qk_window"),
                                         "sliding window of 8 positions")
        # LongRoPE: exported as a Phi-3 with rope_scaling longrope (Phi-3's three keys: the attention
        # factor is transformers' default for the 32 positions over the original 16).
        ldump, hf_l = os.path.join(tmp, "longrope_dump"), os.path.join(tmp, "hf_phi3_longrope")
        train(binary, config, LONGROPE, ["--dump-grads", ldump])
        p = run([export_hf, ldump, hf_l])
        lc = json.load(open(os.path.join(hf_l, "config.json"))) if p.returncode == 0 else {}
        ls = lc.get("rope_scaling") or {}
        check(lc.get("model_type") == "phi3" and
              ls == {"type": "longrope", "long_factor": LONG_FACTORS, "short_factor": SHORT_FACTORS} and
              lc.get("original_max_position_embeddings") == 16 and lc.get("max_position_embeddings") == 32,
              f"export_hf of a LongRoPE model: a Phi-3 with rope_scaling {ls} ({p.stdout.strip()} {p.stderr.strip()})")
        check_hf_loss(check, hf_l, ldump, "the Phi-3 export with LongRoPE (long factors past 16 positions)",
                      model_class="Phi3ForCausalLM", tol=1e-6)
        adump, hf_a = os.path.join(tmp, "longrope_attention_dump"), os.path.join(tmp, "hf_phi3_longrope_attention")
        train(binary, config, LONGROPE + ["model.rope_attention_factor=1.3"], ["--dump-grads", adump])
        p = run([export_hf, adump, hf_a])
        ac = json.load(open(os.path.join(hf_a, "config.json"))) if p.returncode == 0 else {}
        check((ac.get("rope_scaling") or {}).get("attention_factor") == 1.3,
              f"a LongRoPE attention factor transformers would not infer is written: {ac.get('rope_scaling')}")
        check_hf_loss(check, hf_a, adump, "the Phi-3 export with LongRoPE and attention factor 1.3",
                      model_class="Phi3ForCausalLM", tol=1e-6)
        qk_partial = os.path.join(tmp, "qk_partial")
        train(binary, config, QWEN3 + ["model.partial_rotary_factor=0.5"], ["--export-weights", qk_partial])
        equivalence.check_export_refused(check, export_hf, qk_partial, os.path.join(tmp, "hf_qk_partial"),
                                         "in a block not Phi-3's")
        if hf_loss(hf, dump, "LlamaForCausalLM") is not None:  # a Llama transformers wrote, started in Trellis
            import torch
            from transformers import LlamaConfig, LlamaForCausalLM
            torch.manual_seed(0)
            theirs = os.path.join(tmp, "theirs")
            LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                         rms_norm_eps=1e-6, rope_theta=500.0, tie_word_embeddings=False)
                             ).save_pretrained(theirs, safe_serialization=True)
            first = os.path.join(tmp, "first")
            train(binary, config, LLAMA + ["model.init_from=" + theirs, "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs, first, "a Llama it wrote, started in Trellis (the first step's loss)",
                          model_class="LlamaForCausalLM")
            torch.manual_seed(0)
            theirs_scaled = os.path.join(tmp, "theirs_scaled")
            LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                         rms_norm_eps=1e-6, rope_theta=500.0, tie_word_embeddings=False,
                                         rope_scaling={**SCALING, "factor": 8.0})
                             ).save_pretrained(theirs_scaled, safe_serialization=True)
            first = os.path.join(tmp, "first_scaled")
            train(binary, config, SCALED + ["model.init_from=" + theirs_scaled, "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs_scaled, first, "a Llama with rope scaling it wrote, started in Trellis",
                          model_class="LlamaForCausalLM", tol=1e-6)
            from transformers import Qwen2Config, Qwen2ForCausalLM
            torch.manual_seed(0)
            theirs_q = os.path.join(tmp, "theirs_qwen2")
            model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                                 rms_norm_eps=1e-6, rope_theta=500.0, tie_word_embeddings=False))
            with torch.no_grad():  # transformers starts the biases at zero: give them values, so that they show
                for name, t in model.named_parameters():
                    if name.endswith("proj.bias"):
                        t.normal_(0, 0.5)
            model.save_pretrained(theirs_q, safe_serialization=True)
            first = os.path.join(tmp, "first_qwen2")
            train(binary, config, QWEN2 + ["model.init_from=" + theirs_q, "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs_q, first, "a Qwen2 it wrote (biases drawn), started in Trellis",
                          model_class="Qwen2ForCausalLM", tol=1e-6)
            torch.manual_seed(0)
            theirs_yarn = os.path.join(tmp, "theirs_yarn")  # the attention factor left to transformers to infer
            LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                         rms_norm_eps=1e-6, rope_theta=500.0, tie_word_embeddings=False,
                                         rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                       "original_max_position_embeddings": 16})
                             ).save_pretrained(theirs_yarn, safe_serialization=True)
            first = os.path.join(tmp, "first_yarn")
            train(binary, config, YARN + ["model.init_from=" + theirs_yarn, "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs_yarn, first, "a Llama with YaRN it wrote, started in Trellis",
                          model_class="LlamaForCausalLM", tol=1e-6)
            from transformers import Phi3Config, Phi3ForCausalLM
            def phi3_started_here(name, sets, what, **overrides):
                """Writes a Phi-3 of transformers' (seeded; Llama's sizes, `overrides` on top), starts a
                one-step Trellis run with `sets` from it and checks the loss; returns its directory."""
                torch.manual_seed(0)
                theirs = os.path.join(tmp, "theirs_" + name)
                Phi3ForCausalLM(Phi3Config(**{
                    "vocab_size": 64, "hidden_size": 64, "intermediate_size": 88, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
                    "original_max_position_embeddings": 32, "rms_norm_eps": 1e-6, "rope_theta": 500.0,
                    "tie_word_embeddings": False, "pad_token_id": None, "bos_token_id": None, "eos_token_id": None,
                    **overrides})).save_pretrained(theirs, safe_serialization=True)
                first = os.path.join(tmp, "first_" + name)
                train(binary, config, sets + ["model.init_from=" + theirs, "train.steps=1"], ["--dump-grads", first])
                check_hf_loss(check, theirs, first, what, model_class="Phi3ForCausalLM", tol=1e-6)
                return theirs

            phi3_started_here("phi3", LLAMA, "a Phi-3 it wrote (qkv_proj and gate_up_proj fused), started in Trellis")
            theirs_pp = phi3_started_here("phi3_partial", PARTIAL, "a Phi-3 it wrote turning half of each head "
                                          "(partial_rotary_factor 0.5), started in Trellis", partial_rotary_factor=0.5)
            ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + theirs_pp] +
                                  sum((["--set", s] for s in LLAMA), []), "turning 8 of a head's 16 dims")
            check(ok, f"model.init_from of that Phi-3 into a run turning whole heads: {lines}")
            theirs_pl = phi3_started_here(
                "phi3_longrope", LONGROPE, "a Phi-3 it wrote with LongRoPE (the attention factor left to transformers), "
                "started in Trellis", original_max_position_embeddings=16,
                rope_scaling={"rope_type": "longrope", "long_factor": LONG_FACTORS, "short_factor": SHORT_FACTORS})
            ok, lines = one_error([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + theirs_pl] +
                                  sum((["--set", s] for s in LLAMA), []), "longrope rope scaling (factor 2")
            check(ok, f"model.init_from of that Phi-3 into a run without LongRoPE: {lines}")
            from transformers import MistralConfig, MistralForCausalLM
            torch.manual_seed(0)
            theirs_ms = os.path.join(tmp, "theirs_mistral")
            MistralForCausalLM(MistralConfig(vocab_size=64, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                             max_position_embeddings=32, rms_norm_eps=1e-6, rope_theta=500.0,
                                             sliding_window=None, tie_word_embeddings=False)
                               ).save_pretrained(theirs_ms, safe_serialization=True)
            first = os.path.join(tmp, "first_mistral")
            train(binary, config, LLAMA + ["model.head_dim=32", "model.init_from=" + theirs_ms, "train.steps=1"],
                  ["--dump-grads", first])
            check_hf_loss(check, theirs_ms, first, "a Mistral it wrote (heads of 32 at hidden_size 64, as Mistral "
                          "Nemo's are decoupled), started in Trellis", model_class="MistralForCausalLM", tol=1e-6)
            torch.manual_seed(0)
            theirs_msw = os.path.join(tmp, "theirs_mistral_window")
            MistralForCausalLM(MistralConfig(vocab_size=64, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                             rms_norm_eps=1e-6, rope_theta=500.0, sliding_window=8,
                                             tie_word_embeddings=False)
                               ).save_pretrained(theirs_msw, safe_serialization=True)
            first = os.path.join(tmp, "first_mistral_window")
            out = train(binary, config, LLAMA + ["model.sliding_window=8", "model.init_from=" + theirs_msw,
                                                 "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs_msw, first, "a Mistral it wrote with sliding_window 8 (of 32 positions), "
                          "started in Trellis with model.sliding_window = 8", model_class="MistralForCausalLM", tol=1e-6)
            out = train(binary, config, LLAMA + ["model.init_from=" + theirs_msw, "train.steps=1"], [])
            check("attends within a sliding window of 8 positions" in out,
                  "model.init_from of that Mistral into a run attending to every position: the log warns")
            from transformers import Qwen3Config, Qwen3ForCausalLM
            torch.manual_seed(0)
            theirs_q3 = os.path.join(tmp, "theirs_qwen3")
            model = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                                                 num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                                                 max_position_embeddings=32, rms_norm_eps=1e-6, rope_theta=500.0,
                                                 tie_word_embeddings=True))
            with torch.no_grad():  # transformers starts the norms at one: give q_norm and k_norm values, so they show
                for name, t in model.named_parameters():
                    if name.endswith("_norm.weight"):
                        t.uniform_(0.5, 1.5)
            model.save_pretrained(theirs_q3, safe_serialization=True)
            first = os.path.join(tmp, "first_qwen3")
            train(binary, config, QWEN3 + ["model.init_from=" + theirs_q3, "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs_q3, first, "a Qwen3 it wrote (norm weights drawn), started in Trellis",
                          model_class="Qwen3ForCausalLM", tol=1e-6)
            from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
            torch.manual_seed(0)
            theirs_q3m = os.path.join(tmp, "theirs_qwen3_moe")
            Qwen3MoeForCausalLM(Qwen3MoeConfig(vocab_size=64, hidden_size=64, intermediate_size=88, moe_intermediate_size=40,
                                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                               head_dim=24, max_position_embeddings=32, num_experts=4,
                                               num_experts_per_tok=2, norm_topk_prob=True, rms_norm_eps=1e-6,
                                               rope_theta=500.0, tie_word_embeddings=False)
                                ).save_pretrained(theirs_q3m, safe_serialization=True)
            first = os.path.join(tmp, "first_qwen3_moe")
            train(binary, config, QWEN3_MOE + ["model.init_from=" + theirs_q3m, "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs_q3m, first, "a Qwen3-MoE it wrote, started in Trellis",
                          model_class="Qwen3MoeForCausalLM", tol=1e-6)
            from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM
            torch.manual_seed(0)
            theirs_q2m = os.path.join(tmp, "theirs_qwen2_moe")
            Qwen2MoeForCausalLM(Qwen2MoeConfig(vocab_size=64, hidden_size=64, intermediate_size=80, moe_intermediate_size=40,
                                               shared_expert_intermediate_size=80, num_hidden_layers=2,
                                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                               num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                                               rms_norm_eps=1e-6, rope_theta=500.0, tie_word_embeddings=False)
                                ).save_pretrained(theirs_q2m, safe_serialization=True)
            first = os.path.join(tmp, "first_qwen2_moe")
            train(binary, config, QWEN2_MOE + ["model.init_from=" + theirs_q2m, "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs_q2m, first, "a Qwen2-MoE it wrote, started in Trellis",
                          model_class="Qwen2MoeForCausalLM", tol=1e-6)
            from transformers import MixtralConfig, MixtralForCausalLM
            torch.manual_seed(0)
            theirs_m = os.path.join(tmp, "theirs_mixtral")
            MixtralForCausalLM(MixtralConfig(vocab_size=64, hidden_size=64, intermediate_size=40, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                             num_local_experts=4, num_experts_per_tok=2, rms_norm_eps=1e-6,
                                             rope_theta=500.0, tie_word_embeddings=False)
                               ).save_pretrained(theirs_m, safe_serialization=True)
            first = os.path.join(tmp, "first_mixtral")
            train(binary, config, MIXTRAL + ["model.init_from=" + theirs_m, "train.steps=1"], ["--dump-grads", first])
            check_hf_loss(check, theirs_m, first, "a Mixtral it wrote, started in Trellis", model_class="MixtralForCausalLM",
                          tol=1e-6)
    check.finish()


if __name__ == "__main__":
    main()
