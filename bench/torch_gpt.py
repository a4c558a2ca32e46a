"""PyTorch reference GPT-2 that matches Trellis's model exactly, and a loader for Trellis's
`train_gpt --dump-grads DIR` dumps (model.json, params.f32, grads.f32, tokens.i32, targets.i32).

Run `python3 bench/torch_gpt.py --selftest` to check the loader and that the SDPA and manual
attention paths agree, for learned and rotary positions and the SwiGLU MLP (CPU is enough)."""
import json
import math
import os
import sys
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 50257
    seq_len: int = 1024
    n_layers: int = 12
    n_heads: int = 12
    d_model: int = 768
    dropout: float = 0.0
    attn: str = "sdpa"  # sdpa | manual (explicit softmax, for checking SDPA)
    # Mixture of experts in blocks l with l % moe_layer_freq == 0 (Trellis's [moe] section); 0 = none.
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_capacity_factor: float = 1.25
    moe_dropless: bool = False  # no capacity: every choice computed (moe.dropless; here a capacity of every token)
    moe_aux_loss_coef: float = 0.01
    moe_z_loss_coef: float = 0.0
    moe_layer_freq: int = 1
    moe_first_dense: int = 0  # the first blocks keep the dense MLP (moe.first_dense_layers)
    moe_shared_experts: int = 0  # one more MLP this many experts wide every token goes through
    moe_shared_gate: bool = False  # its output times sigmoid(x . w) per token (moe.shared_gate, Qwen2-MoE's)
    moe_ffn_hidden: int = 0  # an expert's hidden width (moe.ffn_hidden_size); 0 = 4C
    moe_renormalize: bool = True  # top_k > 1: gates divided by the chosen probabilities' sum (moe.renormalize)
    rope_theta: float = 0.0  # > 0: rotary positions of this base (model.position_embedding = rope), no wpe
    # Llama 3's frequency scaling (model.rope_scaling = llama3): (factor, low_freq_factor,
    # high_freq_factor, original positions); linear (position interpolation): (factor,); YaRN:
    # ("yarn", factor, original positions, beta_fast, beta_slow, attention factor); LongRoPE:
    # ("longrope", factor, original positions, attention factor, long factors, short factors); () = none.
    rope_scaling: tuple = ()
    rope_dims: int = 0  # partial rotary (model.partial_rotary_factor): each head's first rope_dims turn; 0 = all
    mlp: str = "gelu"  # gelu | swiglu (model.mlp): swiglu's fc is (2F, C), rows [gate | up]
    ffn_hidden: int = 0  # the dense MLP's hidden width F (model.ffn_hidden_size); 0 = 4C
    norm: str = "layernorm"  # layernorm | rmsnorm (model.norm): ln1, ln2, lnf; RMSNorm has a weight only
    tie_embeddings: bool = True  # model.tie_embeddings: the head is wte, else lm_head (Vp, C) of its own
    n_kv_heads: int = 0  # model.n_kv_heads: key-value heads (grouped-query attention); 0 = n_heads
    norm_eps: float = 1e-5  # model.norm_eps
    bias: bool = True  # model.bias: biases in qkv, attn.proj, mlp.fc, mlp.proj
    qkv_bias: bool = False  # model.qkv_bias: with bias = False, biases on qkv alone (Qwen2's)
    head_dim: int = 0  # model.head_dim: the heads' size; 0 = d_model // n_heads
    qk_norm: bool = False  # model.qk_norm: RMSNorm of every q and k head before the rotary turn (Qwen3's)
    sliding_window: int = 0  # model.sliding_window: a query sees the last this many positions; 0 = all

    def __post_init__(self):  # as Trellis's config checks
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f'norm must be "layernorm" or "rmsnorm", not {self.norm!r}')
        if self.mlp not in ("gelu", "swiglu"):
            raise ValueError(f'mlp must be "gelu" or "swiglu", not {self.mlp!r}')

    @property
    def padded_vocab(self):  # Trellis pads the vocabulary to a multiple of 128
        return (self.vocab_size + 127) // 128 * 128


PRESETS = {  # name -> (n_layers, n_heads, d_model); vocab 50257, seq 1024
    "tiny": (2, 2, 64),
    "124m": (12, 12, 768),
    "350m": (24, 16, 1024),
    "1.3b": (24, 16, 2048),
}


def rotary_table(seq_len, head_dim, theta, scaling=()):
    """cos and sin (seq_len, head_dim / 2) of the angles t * theta^(-2i/hd), in float64; with
    scaling = (factor, low_freq_factor, high_freq_factor, original positions), Llama 3's rescaled
    frequencies (transformers' rope_type "llama3"); with (factor,), every frequency divided by it
    (rope_type "linear"); with ("yarn", factor, original positions, beta_fast, beta_slow, attention
    factor), YaRN's blend (rope_type "yarn", its correction range truncated) and cos, sin times the
    attention factor; with ("longrope", factor, original positions, attention factor, long factors,
    short factors), each pair's frequency divided by its factor (the long ones where seq_len exceeds
    the original positions) and cos, sin times the attention factor (rope_type "longrope")."""
    half = head_dim // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64) / half)
    amplitude = 1.0
    if scaling and scaling[0] == "longrope":
        _, _, original, amplitude, long_factors, short_factors = scaling
        inv = inv / torch.tensor(long_factors if seq_len > original else short_factors, dtype=torch.float64)
    elif scaling and scaling[0] == "yarn":
        _, factor, original, beta_fast, beta_slow, amplitude = scaling
        def correction(rotations):  # the pair index turning `rotations` times over the original context
            return head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))
        low, high = max(math.floor(correction(beta_fast)), 0), min(math.ceil(correction(beta_slow)), head_dim - 1)
        high = high + 0.001 if low == high else high
        ramp = ((torch.arange(half, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        inv = inv / factor * ramp + inv * (1 - ramp)
    elif len(scaling) == 1:
        inv = inv / scaling[0]
    elif scaling:
        factor, low, high, original = scaling
        wavelength = 2 * math.pi / inv
        smooth = (original / wavelength - low) / (high - low)
        blended = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelength < original / high, inv,
                          torch.where(wavelength > original / low, inv / factor, blended))
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv[None, :]
    return angle.cos() * amplitude, angle.sin() * amplitude


def rotary(x, cos, sin):
    """x (B, H, T, hd) turned by its positions as Trellis's rotary_embedding: dims (i, i + d/2) of
    each head by the angle whose cos and sin (>= T, d/2) rotary_table gives, the rotation in float32
    (float64 for a float64 x) and rounded to x's dtype; d = 2 x cos's columns, the dims past it (partial
    rotary) pass as they are."""
    if 2 * cos.shape[-1] < x.shape[-1]:
        d = 2 * cos.shape[-1]
        return torch.cat([rotary(x[..., :d], cos, sin), x[..., d:]], dim=-1)
    T, half = x.shape[-2], x.shape[-1] // 2
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin, y = cos[:T].to(work), sin[:T].to(work), x.to(work)
    y1, y2 = y[..., :half], y[..., half:]
    return torch.cat([y1 * cos - y2 * sin, y2 * cos + y1 * sin], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads, self.impl, self.p = cfg.n_heads, cfg.attn, cfg.dropout  # dropout on the probabilities too
        self.window = cfg.sliding_window
        self.n_kv = cfg.n_kv_heads or cfg.n_heads  # query head h reads key-value head h // (n_heads // n_kv)
        self.hd = cfg.head_dim or cfg.d_model // cfg.n_heads
        self.width, self.kv_width = cfg.n_heads * self.hd, self.n_kv * self.hd  # q's (d_model unless head_dim), k's
        if cfg.rope_theta > 0:  # the angles' cos and sin, once (float64; cast where used)
            cos, sin = rotary_table(cfg.seq_len, cfg.rope_dims or self.hd, cfg.rope_theta, cfg.rope_scaling)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.qkv = nn.Linear(cfg.d_model, self.width + 2 * self.kv_width,  # W: [q | k | v] along out
                             bias=cfg.bias or cfg.qkv_bias)
        if cfg.qk_norm:  # after qkv, as in Trellis's parameter order
            self.q_norm = nn.RMSNorm(self.hd, eps=cfg.norm_eps)
            self.k_norm = nn.RMSNorm(self.hd, eps=cfg.norm_eps)
        self.proj = nn.Linear(self.width, cfg.d_model, bias=cfg.bias)

    def forward(self, x, docs=None):  # x (B, T, C); docs: (B, T, T) True where query and key share a document
        B, T, C = x.shape
        q, k, v = self.qkv(x).split([self.width, self.kv_width, self.kv_width], dim=2)  # head h: cols h*hd..(h+1)*hd
        hd = self.hd
        q = q.view(B, T, self.n_heads, hd).transpose(1, 2)
        k, v = (t.view(B, T, self.n_kv, hd).transpose(1, 2) for t in (k, v))
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        if hasattr(self, "rope_cos"):
            q, k = rotary(q, self.rope_cos, self.rope_sin), rotary(k, self.rope_cos, self.rope_sin)
        if self.n_kv != self.n_heads:  # each key-value head serves its group of consecutive query heads
            k, v = (t.repeat_interleave(self.n_heads // self.n_kv, dim=1) for t in (k, v))
        # Causal, and within the sliding window where there is one: key s seen by query t if t - W < s <= t;
        # with document masking also only within the query's document.
        window = self.window if 0 < self.window < T else 0
        if self.impl == "manual" or window or docs is not None:  # (B, H, T, T) scores, masked, softmax
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            seen = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            if window:
                seen &= ~torch.ones(T, T, dtype=torch.bool, device=x.device).tril(-window)
            if docs is not None:
                seen = seen & docs[:, None]  # (B, 1, T, T)
            if self.impl == "manual":
                att = att.masked_fill(~seen, float("-inf")).softmax(dim=-1)
                y = F.dropout(att, self.p, self.training) @ v
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=seen, dropout_p=self.p if self.training else 0.0)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.p if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, self.width)  # (B, T, H hd)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg, width=0):  # hidden width: width experts' (experts, shared); 0: the dense F
        super().__init__()
        expert = cfg.moe_ffn_hidden or 4 * cfg.d_model
        hidden = width * expert if width else (cfg.ffn_hidden or 4 * cfg.d_model)
        # SwiGLU (dense, experts and shared alike): fc gives the gate and the up projection, F each, in
        # one matmul, as Trellis's one (2F, C) weight.
        self.swiglu = cfg.mlp == "swiglu"
        self.fc = nn.Linear(cfg.d_model, (2 if self.swiglu else 1) * hidden, bias=cfg.bias)
        self.proj = nn.Linear(hidden, cfg.d_model, bias=cfg.bias)

    def forward(self, x):
        if self.swiglu:  # silu(gate) * up, gate = fc's first F outputs
            gate, up = self.fc(x).chunk(2, dim=-1)
            return self.proj(F.silu(gate) * up)
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class MoE(nn.Module):
    """Top-k routing with a fixed capacity per expert (GShard, as Trellis's moe/moe_mlp.h): every
    token's first choice takes slots first, in token order, then the second choices; a choice past
    an expert's capacity is dropped. Returns the gated sum of the experts' outputs (plus the shared
    MLP's, which every token goes through), the balancing loss E * sum_e f_e P_e and the router
    z-loss mean_n logsumexp(logits_n)^2."""

    def __init__(self, cfg):
        super().__init__()
        self.E, self.K, self.cf = cfg.moe_experts, cfg.moe_top_k, cfg.moe_capacity_factor
        self.dropless = cfg.moe_dropless
        self.renormalize = cfg.moe_renormalize
        self.router = nn.Linear(cfg.d_model, self.E, bias=False)
        if cfg.moe_shared_experts > 0:  # registered before the experts: Trellis's parameter order
            self.shared = MLP(cfg, cfg.moe_shared_experts)
        if cfg.moe_shared_gate:
            self.shared_gate = nn.Linear(cfg.d_model, 1, bias=False)
        self.experts = nn.ModuleList(MLP(cfg, 1) for _ in range(self.E))

    def forward(self, x):
        B, T, C = x.shape
        N, E, K = B * T, self.E, self.K
        x2 = x.reshape(N, C)
        logits = F.linear(x2, self.router.weight).float()
        probs = logits.softmax(-1)
        choice = logits.topk(K, dim=-1).indices  # (N, K), largest first
        gate = probs.gather(1, choice)
        if K > 1 and self.renormalize:
            gate = gate / gate.sum(-1, keepdim=True)
        # Dropless: a slot for every token at every expert (the same sums as Trellis's packed rows).
        cap = N if self.dropless else min(N, max(1, math.ceil(self.cf * K * N / E)))
        flat = choice.t().reshape(-1)  # (K N): first choices of every token, then second choices
        onehot = F.one_hot(flat, E)
        pos = (onehot.cumsum(0) * onehot).sum(-1) - 1  # the choice's position at its expert
        keep = pos < cap
        slot = torch.where(keep, flat * cap + pos, torch.full_like(flat, E * cap))  # dropped: a spare row
        xe = x2.new_zeros(E * cap + 1, C)
        xe[slot] = x2[torch.arange(N, device=x.device).repeat(K)]
        ye = torch.cat([self.experts[e](xe[e * cap:(e + 1) * cap]) for e in range(E)])
        ye = torch.cat([ye, ye.new_zeros(1, C)])
        g = gate.t().reshape(-1) * keep
        out = (ye[slot].float() * g[:, None]).view(K, N, C).sum(0)
        if hasattr(self, "shared"):
            shared = self.shared(x2).float()
            if hasattr(self, "shared_gate"):
                shared = torch.sigmoid(F.linear(x2, self.shared_gate.weight).float()) * shared
            out = out + shared
        aux = E * (onehot.sum(0).float() / (N * K) * probs.mean(0)).sum()
        z = logits.logsumexp(-1).square().mean()
        return out.to(x.dtype).view(B, T, C), aux, z


def norm(cfg):
    """The normalization Trellis's model.norm names, with model.norm_eps."""
    eps = cfg.norm_eps
    return nn.RMSNorm(cfg.d_model, eps=eps) if cfg.norm == "rmsnorm" else nn.LayerNorm(cfg.d_model, eps=eps)


class Block(nn.Module):  # pre-LN; dropout on each residual branch output (and in attention)
    def __init__(self, cfg, moe=False):
        super().__init__()
        self.ln1 = norm(cfg)
        self.attn = Attention(cfg)
        self.ln2 = norm(cfg)
        if moe:
            self.moe = MoE(cfg)
        else:
            self.mlp = MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, docs=None):  # (output, the block's balancing loss and z-loss, or 0s)
        x = x + self.drop(self.attn(self.ln1(x), docs))
        if hasattr(self, "moe"):
            y, aux, z = self.moe(self.ln2(x))
            return x + self.drop(y), aux, z
        return x + self.drop(self.mlp(self.ln2(x))), 0.0, 0.0



class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.padded_vocab, cfg.d_model)  # (Vp, C), the head's weight if tied
        if cfg.rope_theta == 0:  # learned positions; rotary ones turn q and k in attention
            self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)  # (T, C)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg, cfg.moe_experts > 0 and l >= cfg.moe_first_dense and l % cfg.moe_layer_freq == 0)
                               for l in range(cfg.n_layers))
        self.lnf = norm(cfg)
        if not cfg.tie_embeddings:  # after lnf, as in Trellis's parameter order
            self.lm_head = nn.Linear(cfg.d_model, cfg.padded_vocab, bias=False)
        # Padded vocabulary columns get -inf before the softmax, as in Trellis.
        pad = torch.arange(cfg.padded_vocab) >= cfg.vocab_size
        self.register_buffer("pad_mask", pad, persistent=False)
        self.init_gpt2()

    def init_gpt2(self):
        """GPT-2 init: N(0, 0.02) for weights and both embeddings, N(0, 0.02/sqrt(2L)) for the
        residual projections (attn.proj, mlp.proj), zero biases, LayerNorm 1 / 0."""
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("lnf") or "_norm." in name:
                nn.init.ones_(p)
            elif name.endswith("proj.weight"):  # attn.proj, mlp.proj and the experts' proj
                nn.init.normal_(p, 0.0, resid_std)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def num_params(self):
        """All parameters, a tied embedding counted once, position embeddings included, vocabulary
        padding excluded (GPT-2 small: 124,439,808); tied, the N of MFU's 6N + 12*L*C*T."""
        n = sum(p.numel() for p in self.parameters())
        tables = 1 if self.cfg.tie_embeddings else 2  # wte and lm_head each hold the padding rows
        return n - tables * (self.cfg.padded_vocab - self.cfg.vocab_size) * self.cfg.d_model

    def forward(self, idx, targets=None, eod=None, reset_positions=False):  # idx, targets (B, T) int64
        """eod: document masking (data.document_mask): the token after each eod opens a new document,
        which attention does not see past; positions count from the sample's start, or with
        reset_positions (data.reset_positions) from each document's."""
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        docs = None
        if eod is not None:  # document index of each token: the end-of-document tokens before it
            ends = (idx == eod).long()
            doc = ends.cumsum(1) - ends
            docs = doc[:, :, None] == doc[:, None, :]
            if reset_positions:  # t minus its document's first position
                first = torch.where(ends.bool(), pos + 1, 0).cummax(1).values
                pos = pos - torch.cat([torch.zeros_like(first[:, :1]), first[:, :-1]], 1)
        x = self.wte(idx) + self.wpe(pos) if hasattr(self, "wpe") else self.wte(idx)
        x = self.drop(x)  # (B, T, C)
        aux = z = 0.0
        for block in self.h:
            x, a, zb = block(x, docs)
            aux, z = aux + a, z + zb
        head = self.wte.weight if self.cfg.tie_embeddings else self.lm_head.weight
        logits = F.linear(self.lnf(x), head)  # (B, T, Vp)
        if self.cfg.padded_vocab != self.cfg.vocab_size:
            logits = logits.masked_fill(self.pad_mask, float("-inf"))
        if targets is None:
            return logits
        # Mean over the targets; -1 marks none (data.eod_mask_loss leaves the one after an EOD out).
        loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T), ignore_index=-1)
        self.lm_loss = loss.detach()  # what Trellis reports; the objective adds the routers' losses
        return logits, loss + self.cfg.moe_aux_loss_coef * aux + self.cfg.moe_z_loss_coef * z


# ---- Trellis dumps ----------------------------------------------------------------------------

def torch_name(trellis_name):
    """`wte` -> `wte.weight`, `h.0.ln1.w` -> `h.0.ln1.weight`, `lnf.b` -> `lnf.bias`."""
    if trellis_name in ("wte", "wpe"):
        return trellis_name + ".weight"
    stem, _, last = trellis_name.rpartition(".")
    return stem + {"w": ".weight", "b": ".bias"}[last]


def _read(path, dtype):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype)


def load_trellis_dump(dump_dir, dtype=torch.float64, attn="sdpa"):
    """Builds the reference from DIR/model.json, loads params.f32 by name and offset. Returns
    (model, info): info has tokens, targets (B, T) int64 (None for an --export-weights directory,
    which holds the weights only), loss (float), grads {torch name: tensor} when grads.f32 exists,
    and trellis_names {torch name: Trellis name}.
    Raises ValueError when a name, shape or size does not fit."""
    with open(os.path.join(dump_dir, "model.json")) as f:
        meta = json.load(f)
    c = meta["config"]
    moe = c.get("moe", {})
    cfg = GPTConfig(c["vocab_size"], c["seq_len"], c["n_layers"], c["n_heads"], c["d_model"],
                    dropout=float(c.get("dropout", 0.0)), attn=attn, moe_experts=moe.get("experts", 0),
                    moe_top_k=moe.get("top_k", 2), moe_capacity_factor=moe.get("capacity_factor", 1.25),
                    moe_dropless=moe.get("dropless", False),
                    moe_aux_loss_coef=moe.get("aux_loss_coef", 0.01), moe_z_loss_coef=moe.get("z_loss_coef", 0.0),
                    moe_layer_freq=moe.get("layer_freq", 1), moe_first_dense=moe.get("first_dense_layers", 0),
                    moe_shared_experts=moe.get("shared_experts", 0), moe_shared_gate=moe.get("shared_gate", False),
                    moe_ffn_hidden=moe.get("ffn_hidden_size", 0), moe_renormalize=moe.get("renormalize", True), rope_theta=float(c["rope_theta"]) if c.get("position_embedding") == "rope" else 0.0,
                    rope_scaling=((float(c["rope_scaling_factor"]), float(c["rope_low_freq_factor"]),
                                   float(c["rope_high_freq_factor"]), float(c["rope_original_positions"]))
                                  if c.get("rope_scaling") == "llama3" else
                                  (float(c["rope_scaling_factor"]),) if c.get("rope_scaling") == "linear" else
                                  ("yarn", float(c["rope_scaling_factor"]), float(c["rope_original_positions"]),
                                   float(c["rope_beta_fast"]), float(c["rope_beta_slow"]),
                                   float(c["rope_attention_factor"])) if c.get("rope_scaling") == "yarn" else
                                  ("longrope", float(c["rope_scaling_factor"]), float(c["rope_original_positions"]),
                                   float(c["rope_attention_factor"]), list(c["rope_long_factors"]),
                                   list(c["rope_short_factors"])) if c.get("rope_scaling") == "longrope" else ()),
                    rope_dims=c.get("rope_dims", 0),
                    mlp=c.get("mlp", "gelu"), ffn_hidden=c.get("ffn_hidden_size", 0), norm=c.get("norm", "layernorm"),
                    tie_embeddings=c.get("tie_embeddings", True), n_kv_heads=c.get("n_kv_heads", 0),
                    norm_eps=float(c.get("norm_eps", 1e-5)), bias=c.get("bias", True),
                    qkv_bias=c.get("qkv_bias", False), head_dim=c.get("head_dim", 0),
                    qk_norm=c.get("qk_norm", False), sliding_window=c.get("sliding_window", 0))
    if "padded_vocab" in c and c["padded_vocab"] != cfg.padded_vocab:
        raise ValueError(f"padded_vocab {c['padded_vocab']} != expected {cfg.padded_vocab}")
    model = GPT(cfg).to(dtype)
    params = dict(model.named_parameters())
    flat = _read(os.path.join(dump_dir, "params.f32"), torch.float32)
    gpath = os.path.join(dump_dir, "grads.f32")
    gflat = _read(gpath, torch.float32) if os.path.exists(gpath) else None
    grads, seen, names = {}, set(), {}
    for entry in meta["params"]:
        name, shape, off = torch_name(entry["name"]), tuple(entry["shape"]), entry["offset"]
        if name not in params:
            raise ValueError(f"dump parameter {entry['name']} has no counterpart in the reference")
        if tuple(params[name].shape) != shape:
            raise ValueError(f"{entry['name']}: dump shape {shape} != reference "
                             f"{tuple(params[name].shape)}")
        n = math.prod(shape)
        if off + n > flat.numel() or (gflat is not None and off + n > gflat.numel()):
            raise ValueError(f"{entry['name']}: offset {off} + {n} is past the end of the file")
        with torch.no_grad():
            params[name].copy_(flat[off:off + n].view(shape))
        if gflat is not None:
            grads[name] = gflat[off:off + n].view(shape).to(dtype)
        seen.add(name)
        names[name] = entry["name"]
    missing = sorted(set(params) - seen)
    if missing:
        raise ValueError(f"reference parameters missing from the dump: {missing}")
    tokens = targets = None  # an --export-weights directory holds the weights only
    if "batch" in meta:
        B, T = meta["batch"]["B"], meta["batch"]["T"]
        tokens = _read(os.path.join(dump_dir, "tokens.i32"), torch.int32).long().view(B, T)
        targets = _read(os.path.join(dump_dir, "targets.i32"), torch.int32).long().view(B, T)
    return model, {"tokens": tokens, "targets": targets, "loss": meta.get("loss"),
                   "grads": grads if gflat is not None else None, "meta": meta,
                   "trellis_names": names}


def trellis_names(model):
    """{trellis name: parameter} in Trellis's order."""
    rev = {}
    for name, p in model.named_parameters():
        stem, _, last = name.rpartition(".")
        rev[stem if stem in ("wte", "wpe") else stem + "." + last[0]] = p
    return rev


def write_dump(model, tokens, targets, dump_dir):
    """Writes a dump in Trellis's format from this model (fp32): for tests of the tools."""
    os.makedirs(dump_dir, exist_ok=True)
    model.zero_grad()
    _, loss = model(tokens, targets)
    loss.backward()
    entries, off, ps, gs = [], 0, [], []
    for name, p in trellis_names(model).items():
        entries.append({"name": name, "shape": list(p.shape), "offset": off})
        off += p.numel()
        ps.append(p.detach().float().flatten())
        gs.append(p.grad.float().flatten())
    c = model.cfg
    meta = {"config": {"vocab_size": c.vocab_size, "padded_vocab": c.padded_vocab,
                       "seq_len": c.seq_len, "n_layers": c.n_layers, "n_heads": c.n_heads,
                       "d_model": c.d_model, "dropout": c.dropout,
                       **({"position_embedding": "rope", "rope_theta": c.rope_theta} if c.rope_theta > 0 else {}),
                       **({"rope_dims": c.rope_dims} if c.rope_dims else {}),
                       **({"sliding_window": c.sliding_window} if c.sliding_window else {}),
                       **(dict(zip(("rope_scaling_factor", "rope_original_positions", "rope_beta_fast",
                                    "rope_beta_slow", "rope_attention_factor"), c.rope_scaling[1:]), rope_scaling="yarn")
                          if c.rope_scaling and c.rope_scaling[0] == "yarn" else
                          dict(zip(("rope_scaling_factor", "rope_original_positions", "rope_attention_factor",
                                    "rope_long_factors", "rope_short_factors"), c.rope_scaling[1:]),
                               rope_scaling="longrope")
                          if c.rope_scaling and c.rope_scaling[0] == "longrope" else
                          dict(zip(("rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                                    "rope_original_positions"), c.rope_scaling),
                               rope_scaling="llama3" if len(c.rope_scaling) == 4 else "linear")
                          if c.rope_scaling else {}),
                       **({"mlp": c.mlp} if c.mlp != "gelu" else {}),
                       **({"ffn_hidden_size": c.ffn_hidden} if c.ffn_hidden not in (0, 4 * c.d_model) else {}),
                       **({"norm": c.norm} if c.norm != "layernorm" else {}),
                       **({"tie_embeddings": False} if not c.tie_embeddings else {}),
                       **({"n_kv_heads": c.n_kv_heads} if c.n_kv_heads not in (0, c.n_heads) else {}),
                       **({"norm_eps": c.norm_eps} if c.norm_eps != 1e-5 else {}),
                       **({"bias": False} if not c.bias else {}),
                       **({"qkv_bias": True} if not c.bias and c.qkv_bias else {}),
                       **({"head_dim": c.head_dim} if c.head_dim not in (0, c.d_model // c.n_heads) else {}),
                       **({"qk_norm": True} if c.qk_norm else {})},
            "params": entries, "batch": {"B": tokens.shape[0], "T": tokens.shape[1]},
            "loss": loss.item()}
    with open(os.path.join(dump_dir, "model.json"), "w") as f:
        json.dump(meta, f, indent=1)
    for fname, t in (("params.f32", torch.cat(ps)), ("grads.f32", torch.cat(gs)),
                     ("tokens.i32", tokens.int().flatten()),
                     ("targets.i32", targets.int().flatten())):
        with open(os.path.join(dump_dir, fname), "wb") as f:
            f.write(_to_bytes(t))


def _to_bytes(t):  # raw little-endian bytes, with or without numpy
    t = t.detach().cpu().contiguous()
    try:
        return t.numpy().tobytes()
    except (ImportError, RuntimeError):
        return bytes(t.view(torch.uint8).tolist())


def rope_selftest():
    """rotary() against Hugging Face's Llama rotation (rotate_half with its own frequencies), where
    transformers is installed: the same turn of q and k, so Trellis's RoPE is Llama's."""
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError:
        print("rope: transformers not installed, Llama's rotation not compared")
        return True
    B, H, T, hd, theta = 2, 3, 40, 16, 500.0
    q, k = torch.randn(B, H, T, hd, dtype=torch.float64), torch.randn(B, H, T, hd, dtype=torch.float64)
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))  # Llama's inv_freq
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    hq, hk = apply_rotary_pos_emb(q, k, emb.cos()[None], emb.sin()[None])
    cos, sin = rotary_table(T, hd, theta)
    err = max((rotary(q, cos, sin) - hq).abs().max().item(), (rotary(k, cos, sin) - hk).abs().max().item())
    good = err < 1e-12
    print(f"rope against transformers' Llama rotation: max abs diff {err:.1e}: {'ok' if good else 'FAIL'}")
    # Llama 3's scaled frequencies against transformers' own (its float32 inv_freq; all three bands).
    try:
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError:
        print("rope: transformers has no ROPE_INIT_FUNCTIONS, Llama 3's scaling not compared")
        return good
    scaling = (32.0, 1.0, 4.0, 8192.0)
    parameters = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    config = LlamaConfig(hidden_size=128 * 4, num_attention_heads=4, max_position_embeddings=131072,
                         rope_theta=500000.0, rope_scaling=parameters)
    if hasattr(config, "rope_parameters"):
        config.rope_parameters = parameters
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    cos, sin = rotary_table(2, 128, 500000.0, scaling)
    got = torch.atan2(sin[1], cos[1])  # position 1's angles are the frequencies (all below pi here)
    rel = ((got - want.double()) / want.double()).abs().max().item()
    scaled_ok = rel < 1e-5  # transformers computes in float32
    print(f"rope llama3 scaling against transformers': max rel diff {rel:.1e}: {'ok' if scaled_ok else 'FAIL'}")
    return good and scaled_ok


def swiglu_selftest():
    """The SwiGLU MLP against the formula written out (fc's rows [0, 4C) the gate, [4C, 8C) the up
    projection, silu(z) = z sigmoid(z)), and Mixtral's experts: SwiGLU of moe_ffn_hidden without biases."""
    torch.manual_seed(0)
    C = 8
    mlp = MLP(GPTConfig(d_model=C, mlp="swiglu")).double()
    x = torch.randn(2, 3, C, dtype=torch.float64)
    a = x @ mlp.fc.weight.T + mlp.fc.bias
    gate, up = a[..., :4 * C], a[..., 4 * C:]
    want = (gate * torch.sigmoid(gate) * up) @ mlp.proj.weight.T + mlp.proj.bias
    err = (mlp(x) - want).abs().max().item()
    good = tuple(mlp.fc.weight.shape) == (8 * C, C) and tuple(mlp.proj.weight.shape) == (C, 4 * C) and err < 1e-12
    moe = MoE(GPTConfig(d_model=C, mlp="swiglu", bias=False, moe_experts=4, moe_ffn_hidden=12, moe_shared_experts=2))
    shapes = {n: tuple(p.shape) for n, p in moe.named_parameters()}
    good &= shapes == {"router.weight": (4, C), "shared.fc.weight": (48, C), "shared.proj.weight": (C, 24),
                       **{f"experts.{e}.fc.weight": (24, C) for e in range(4)},
                       **{f"experts.{e}.proj.weight": (C, 12) for e in range(4)}}
    print(f"swiglu MLP against its formula: max abs diff {err:.1e}, fc {tuple(mlp.fc.weight.shape)}; "
          f"Mixtral's experts' shapes: {'ok' if good else 'FAIL'}")
    return good


def selftest():
    """Dumps of a tiny model with learned and with rotary positions and with the SwiGLU MLP loaded
    back (dump_selftest), the rotation against transformers' Llama one, SwiGLU against its formula,
    the 124M parameter count."""
    ok = True
    # learned, rotary, SwiGLU, and GELU and SwiGLU MLPs of another width than 4C
    for theta, mlp, ffn, norm_ in ((0.0, "gelu", 0, "layernorm"), (500.0, "gelu", 0, "layernorm"),
                                   (0.0, "swiglu", 0, "layernorm"), (0.0, "gelu", 40, "layernorm"),
                                   (0.0, "swiglu", 40, "layernorm"), (0.0, "gelu", 0, "rmsnorm"),
                                   (500.0, "swiglu", 40, "rmsnorm")):  # the last: Llama's block
        ok &= dump_selftest(theta, mlp, ffn, norm_)
    ok &= dump_selftest(500.0, "swiglu", 40, "rmsnorm", tie=False)  # and with Llama's untied head
    ok &= dump_selftest(500.0, "swiglu", 40, "rmsnorm", tie=False, kv_heads=2)  # and grouped-query attention
    ok &= dump_selftest(500.0, "swiglu", 40, "rmsnorm", tie=False, kv_heads=2, bias=False)  # and no linear biases
    ok &= rope_selftest()
    ok &= swiglu_selftest()
    n124 = GPT(GPTConfig()).num_params()
    print(f"124m num_params {n124:,} (GPT-2 small: 124,439,808): "
          f"{'ok' if n124 == 124439808 else 'FAIL'}")
    ok &= n124 == 124439808
    print("selftest", "passed" if ok else "FAILED")
    return 0 if ok else 1


def dump_selftest(rope_theta, mlp="gelu", ffn_hidden=0, norm_="layernorm", tie=True, kv_heads=0, bias=True):
    """One model's dump (rotary positions of this base, or learned ones with 0; this MLP and width) loaded back
    in float64 and float32 with both attention paths: loss and gradients agree."""
    import tempfile
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=100, seq_len=16, n_layers=2, n_heads=4, d_model=32, attn="manual", rope_theta=rope_theta,
                    mlp=mlp, ffn_hidden=ffn_hidden, norm=norm_, tie_embeddings=tie, n_kv_heads=kv_heads, bias=bias)
    ref = GPT(cfg).double()
    with torch.no_grad():  # non-trivial biases and LayerNorms, so that their gradients matter
        for name, p in ref.named_parameters():
            if not name.startswith(("wte", "wpe")) and p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    tokens = torch.randint(0, cfg.vocab_size, (3, 12))
    targets = torch.randint(0, cfg.vocab_size, (3, 12))
    positions = ((f"rope {rope_theta:g}" if rope_theta > 0 else "learned") + (f" {mlp}" if mlp != "gelu" else "") +
                 (f" F {ffn_hidden}" if ffn_hidden else "") + (" rms" if norm_ == "rmsnorm" else "") +
                 ("" if tie else " untied") + (f" kv {kv_heads}" if kv_heads else "") + ("" if bias else " nobias"))
    with tempfile.TemporaryDirectory() as d:
        write_dump(ref, tokens, targets, d)
        with open(os.path.join(d, "model.json")) as f:  # "mlp" written as Trellis does: for SwiGLU only
            written = json.load(f)["config"].get("mlp")
        ok = written == (mlp if mlp != "gelu" else None)
        if not ok:
            print(f"{positions}: model.json's config has mlp {written!r}: FAIL")
        for attn, dtype, tol in (("manual", torch.float64, 1e-6), ("sdpa", torch.float64, 1e-6),
                                 ("sdpa", torch.float32, 1e-4), ("manual", torch.float32, 1e-4)):
            model, info = load_trellis_dump(d, dtype=dtype, attn=attn)
            assert torch.equal(info["tokens"], tokens) and torch.equal(info["targets"], targets)
            _, loss = model(info["tokens"], info["targets"])
            loss.backward()
            lerr = abs(loss.item() - info["loss"]) / abs(info["loss"])
            g = info["grads"]
            worst = max((p.grad - g[n]).norm().item() / max(g[n].norm().item(), 1e-12)
                        for n, p in model.named_parameters())
            pad_grad = max(p.grad[cfg.vocab_size:].abs().max().item() for n, p in model.named_parameters()
                           if n in ("wte.weight", "lm_head.weight"))
            good = lerr <= tol and worst <= tol and pad_grad == 0.0
            ok &= good
            print(f"{positions:14s} {attn:6s} {str(dtype):13s} loss {loss.item():.8f} rel err {lerr:.2e}, "
                  f"worst grad rel err {worst:.2e}, padded vocabulary grad {pad_grad:.1e}: "
                  f"{'ok' if good else 'FAIL'}")
    return ok


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        sys.exit(selftest())
    print(__doc__)
    sys.exit(2)
