#!/usr/bin/env python3
"""export_hf: a trained model as a Hugging Face GPT-2 directory (config.json, model.safetensors).

Everywhere (pure Python): the tiny model trained 3 steps on the CPU with a checkpoint and
--export-weights; export_hf of the checkpoint and of the weight export give the same bytes; the
safetensors header lists GPT-2's tensors with their shapes, and every value equals Trellis's
parameter under the mapping (Conv1D weights transposed, the token embedding without its padding
rows); a bf16 checkpoint's values are its bf16 parameters widened exactly; config.json describes the
model. Bad input ends with one "error:" line and exit 1, writing nothing: an OUT_DIR that holds
files, a SOURCE that is neither a checkpoint nor an export, a wrong argument count.
Where torch and transformers import (the GPU machine), GPT2LMHeadModel.from_pretrained(OUT_DIR)
computes the loss Trellis computed (a --dump-grads dump, exported) on the same tokens, within 1e-5;
elsewhere that part says it is skipped. model.init_from starts a run from the Hugging Face directory,
the weight export or the checkpoint with exactly their parameters (a shorter model.seq_len takes
the first positions); another shape is one error line. A model of MLP width 96 (model.ffn_hidden_size)
exports with n_inner 96 and starts a run of that width; transformers computes its loss too. A model
with a head of its own (model.tie_embeddings = false) exports with tie_word_embeddings false and an
lm_head.weight of its unpadded rows, starts an untied run exactly, and a tied run from it gets one
error line; transformers computes its loss. So does a model with model.norm_eps = 0.01, exported with
layer_norm_epsilon 0.01, which starts a run of that eps and no other.
Training from it (learning rate 0, so the exported weights are the start's): on one rank, at data 2
with ZeRO stage 1 (each rank its pieces) and at pipeline 2 (each stage reads its own tensors from the
files, the last one the tied token embedding), exactly the source's; in bf16 the source rounded.
Usage: hf_export_test.py TRAIN_GPT EXPORT_HF CONFIG MPIEXEC"""
import json
import os
import struct
import subprocess
import sys
import tempfile

failed = False


def check(ok, what):
    global failed
    failed |= not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def train(binary, config, *sets, extra=()):
    cmd = [binary, config, "--set", "train.device=cpu", "--set", "train.steps=3", "--set", "model.dropout=0"]
    for s in sets:
        cmd += ["--set", s]
    p = run(cmd + list(extra))
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        tensors[name] = (t["dtype"], t["shape"], struct.unpack(f"<{(b - a) // 4}f", data[a:b]))
    return n, tensors, len(data)


def expected(weights_dir):
    """GPT-2's tensors from a Trellis weight export: {name: (shape, values)}."""
    meta = json.load(open(os.path.join(weights_dir, "model.json")))
    raw = open(os.path.join(weights_dir, "params.f32"), "rb").read()
    flat = struct.unpack(f"<{len(raw) // 4}f", raw)
    V = meta["config"]["vocab_size"]
    renames = [("ln1", "ln_1"), ("ln2", "ln_2"), ("attn.qkv", "attn.c_attn"), ("attn.proj", "attn.c_proj"),
               ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj"), ("lnf", "ln_f")]
    out = {}
    for p in meta["params"]:
        name, shape, off = p["name"], p["shape"], p["offset"]
        n = 1
        for d in shape:
            n *= d
        v = flat[off:off + n]
        if name in ("wte", "wpe"):
            if name == "wte":
                shape, v = [V, shape[1]], v[:V * shape[1]]
            out[f"transformer.{name}.weight"] = (shape, v)
            continue
        stem, last = name.rsplit(".", 1)
        for a, b in renames:
            if stem.endswith(a):
                stem = stem[:-len(a)] + b
                break
        if len(shape) == 2:  # (out, in) -> (in, out)
            o, i = shape
            v = tuple(v[r * i + c] for c in range(i) for r in range(o))
            shape = [i, o]
        out[f"transformer.{stem}.{'weight' if last == 'w' else 'bias'}"] = (shape, v)
    return out


def hf_loss(hf_dir, dump_dir, model_class="GPT2LMHeadModel"):
    """Loss of transformers' model_class (loaded from hf_dir) on a dump's tokens, and the dump's loss;
    None where torch or transformers is missing."""
    try:
        import torch
        import torch.nn.functional as F
        import transformers
    except ImportError:
        return None
    meta = json.load(open(os.path.join(dump_dir, "model.json")))
    B, T = meta["batch"]["B"], meta["batch"]["T"]
    read = lambda f: torch.frombuffer(bytearray(open(os.path.join(dump_dir, f), "rb").read()), dtype=torch.int32)  # noqa: E731
    tokens, targets = read("tokens.i32").long().view(B, T), read("targets.i32").long().view(B, T)
    model = getattr(transformers, model_class).from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(tokens).logits
    return F.cross_entropy(logits.reshape(B * T, -1).double(), targets.reshape(-1)).item(), float(meta["loss"])


def check_hf_loss(check_fn, hf_dir, dump_dir, what, written=True, model_class="GPT2LMHeadModel", tol=1e-5):
    """transformers' loss on the export within tol (relative) of Trellis's (a FAIL when the export was
    not written); says so and checks nothing where transformers is missing."""
    got = hf_loss(hf_dir, dump_dir, model_class) if written else (float("nan"), 0.0)
    if got is None:
        print(f"skip transformers' {model_class} on {what}: torch or transformers is not installed here")
        return
    ref, trellis = got
    rel = abs(trellis - ref) / abs(ref)
    check_fn(rel <= tol, f"transformers' {model_class} on {what}: loss {ref:.7f}, Trellis {trellis:.7f}, rel diff {rel:.1e}")


def main():
    binary, export_hf, config, mpiexec = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        ck, weights = os.path.join(tmp, "ck"), os.path.join(tmp, "weights")
        train(binary, config, "checkpoint.dir=" + ck, extra=["--export-weights", weights])
        hf_ck, hf_w = os.path.join(tmp, "hf_ck"), os.path.join(tmp, "hf_w")
        p1, p2 = run([export_hf, ck, hf_ck]), run([export_hf, weights, hf_w])
        check(p1.returncode == 0 and p2.returncode == 0, f"export_hf of a checkpoint.dir and of a weight export: exit "
              f"{p1.returncode}, {p2.returncode} {p1.stderr.strip()} {p2.stderr.strip()}")
        st_ck, st_w = os.path.join(hf_ck, "model.safetensors"), os.path.join(hf_w, "model.safetensors")
        check(open(st_ck, "rb").read() == open(st_w, "rb").read() and sorted(os.listdir(hf_ck)) ==
              ["config.json", "model.safetensors"], "both exports are the same bytes; the directory holds "
              "config.json and model.safetensors only")
        n, tensors, data_bytes = read_safetensors(st_ck)
        want = expected(weights)
        cfg = json.load(open(os.path.join(hf_ck, "config.json")))
        m = json.load(open(os.path.join(weights, "model.json")))["config"]
        same = set(tensors) == set(want) and all(
            tensors[k][0] == "F32" and tensors[k][1] == want[k][0] and tensors[k][2] == want[k][1] for k in want)
        check(same and n % 8 == 0 and data_bytes == sum(4 * len(v) for _, v in want.values()),
              f"{len(tensors)} tensors, each with GPT-2's name, shape and exactly Trellis's values "
              f"(transposed Conv1D weights, wte {tensors.get('transformer.wte.weight', ('', []))[1]} of padded "
              f"{m['padded_vocab']} rows)")
        check(cfg["model_type"] == "gpt2" and cfg["n_layer"] == m["n_layers"] and cfg["n_embd"] == m["d_model"] and
              cfg["n_head"] == m["n_heads"] and cfg["vocab_size"] == m["vocab_size"] and
              cfg["n_positions"] == m["seq_len"] and cfg["activation_function"] == "gelu_new" and
              cfg["layer_norm_epsilon"] == 1e-5 and cfg["tie_word_embeddings"] is True, "config.json: " + json.dumps(cfg))

        # bf16: the checkpoint's bf16 parameters, widened exactly.
        ck16, hf16 = os.path.join(tmp, "ck16"), os.path.join(tmp, "hf16")
        train(binary, config, "checkpoint.dir=" + ck16, "train.precision=bf16")
        p = run([export_hf, os.path.join(ck16, "step_00000003"), hf16])
        step = os.path.join(ck16, "step_00000003")
        manifest = json.load(open(os.path.join(step, "manifest.json")))
        blob = next(b for b in manifest["blobs"] if b["name"] == "params")
        bits = open(os.path.join(step, "params"), "rb").read()  # a blob's file is its name
        halves = struct.unpack(f"<{len(bits) // 2}H", bits)
        widened = struct.unpack(f"<{len(halves)}f", struct.pack(f"<{len(halves)}I", *(h << 16 for h in halves)))
        _, t16, _ = read_safetensors(os.path.join(hf16, "model.safetensors")) if p.returncode == 0 else (0, {}, 0)
        lnf = t16.get("transformer.ln_f.bias", ("", [], ()))[2]
        C = m["d_model"]
        check(p.returncode == 0 and blob["dtype"] == "bf16" and lnf == widened[-C:] and
              t16["transformer.wpe.weight"][2] == widened[m["padded_vocab"] * C:(m["padded_vocab"] + m["seq_len"]) * C],
              f"bf16 checkpoint: exit {p.returncode}, its values widened exactly (wpe, ln_f)")

        # Bad input: one error line, exit 1, nothing written.
        busy, empty = os.path.join(tmp, "busy"), os.path.join(tmp, "empty")
        os.makedirs(busy)
        os.makedirs(empty)
        open(os.path.join(busy, "notes.txt"), "w").write("mine")
        for args, want_text in [([weights, busy], "is not empty"), ([os.path.join(tmp, "nothing"), os.path.join(tmp, "o1")],
                                                                 "no such checkpoint or export directory"),
                                ([empty, os.path.join(tmp, "o2")], "no valid checkpoint"), ([ck], "expected SOURCE and OUT_DIR")]:
            p = run([export_hf] + args)
            lines = p.stderr.strip().splitlines()
            ok = (p.returncode == 1 and len(lines) == 1 and lines[0].startswith("error:") and want_text in lines[0]
                  and os.listdir(busy) == ["notes.txt"] and not os.path.exists(os.path.join(tmp, "o1")))
            check(ok, f"export_hf {' '.join(os.path.basename(a) for a in args)}: exit {p.returncode}, {lines}")

        # model.init_from: a fresh run starts from the Hugging Face directory, the weight export or the
        # checkpoint; its first step's parameters (a --dump-grads dump) are the source's exactly (from
        # Hugging Face the vocabulary padding rows are zero); a shorter model.seq_len takes the first
        # positions; another shape, or a path that holds no model, is one error line.
        V, P = m["vocab_size"], m["padded_vocab"]
        src = struct.unpack(f"<{os.path.getsize(os.path.join(weights, 'params.f32')) // 4}f",
                            open(os.path.join(weights, "params.f32"), "rb").read())
        for name, source in [("hf", hf_w), ("export", weights), ("checkpoint", ck)]:
            d = os.path.join(tmp, "init_" + name)
            train(binary, config, "model.init_from=" + source, "train.steps=1", extra=["--dump-grads", d])
            got = struct.unpack(f"<{len(src)}f", open(os.path.join(d, "params.f32"), "rb").read())
            want_init = src if name != "hf" else src[:V * C] + (0.0,) * ((P - V) * C) + src[P * C:]
            check(got == want_init, f"model.init_from = the {name}: the first step's parameters are the source's"
                  f"{' (padding rows zero)' if name == 'hf' else ''}")
        frozen = ["optimizer.lr=0", "optimizer.min_lr=0", "train.steps=2", "model.init_from=" + hf_w]
        hf_src = src[:V * C] + (0.0,) * ((P - V) * C) + src[P * C:]
        for tag, ranks, sets in [("one rank", 1, []), ("data 2, ZeRO stage 1", 2, ["zero.stage=1"]),
                                 ("pipeline 2", 2, ["parallel.pipeline=2"]), ("bf16", 1, ["train.precision=bf16"])]:
            out = os.path.join(tmp, "frozen_" + tag.split()[0])
            cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x", "OMP_NUM_THREADS=1",
                   binary, config, "--export-weights", out]
            for x in ["train.device=cpu", "model.dropout=0"] + frozen + sets:
                cmd += ["--set", x]
            p = run(cmd)
            got = struct.unpack(f"<{len(src)}f", open(os.path.join(out, "params.f32"), "rb").read()) \
                if p.returncode == 0 else ()
            if tag == "bf16":  # the source rounded to bf16: within half a bf16 step of it
                ok = len(got) == len(src) and all(abs(a - b) <= abs(b) * 2 ** -8 for a, b in zip(got, hf_src))
            else:
                ok = got == hf_src
            check(ok, f"training from the Hugging Face directory at learning rate 0, {tag}: the weights are the "
                  f"source's{' rounded to bf16' if tag == 'bf16' else ' exactly'} (exit {p.returncode})")
        d = os.path.join(tmp, "init_short")
        train(binary, config, "model.init_from=" + hf_w, "model.seq_len=16", "train.steps=1", extra=["--dump-grads", d])
        short = json.load(open(os.path.join(d, "model.json")))["params"]
        wpe = next(q for q in short if q["name"] == "wpe")
        got = struct.unpack(f"<{16 * C}f", open(os.path.join(d, "params.f32"), "rb").read()[4 * wpe["offset"]:][:64 * C])
        check(wpe["shape"] == [16, C] and got == src[P * C:P * C + 16 * C],
              "model.init_from with model.seq_len = 16 of 32: the first 16 positions")
        for sets, want_text in [(["model.n_layers=3"], "holds a model of vocab_size 64, n_layers 2"),
                                (["model.seq_len=64"], "model.seq_len may be shorter"),
                                ([], "no such checkpoint or export directory")]:
            source = os.path.join(tmp, "nothing") if not sets else hf_w
            cmd = [binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + source]
            for x in sets:
                cmd += ["--set", x]
            p = run(cmd)
            lines = [x for x in p.stderr.splitlines() if x.startswith("error")]
            check(p.returncode != 0 and len(lines) == 1 and "model.init_from" in lines[0] and want_text in lines[0],
                  f"model.init_from with {' '.join(sets) or 'a missing path'}: exit {p.returncode}, {lines}")

        # Files as others write them, and damaged ones. The safetensors library sorts the names, so a
        # tied head comes first ("lm_head.weight" < "transformer."); names without "transformer.".
        hdr_len, tensors_w, _ = read_safetensors(st_w)
        raw_w = open(st_w, "rb").read()
        header = json.loads(raw_w[8:8 + hdr_len])
        data = raw_w[8 + hdr_len:]

        def write_hf(name, hdr, body, config_text=None):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            text = json.dumps(hdr).encode()
            text += b" " * ((8 - len(text) % 8) % 8)
            open(os.path.join(d, "model.safetensors"), "wb").write(struct.pack("<Q", len(text)) + text + body)
            open(os.path.join(d, "config.json"), "w").write(config_text or open(os.path.join(hf_w, "config.json")).read())
            return d

        wte = header["transformer.wte.weight"]
        a, b = wte["data_offsets"]
        headed = dict(sorted({**header, "lm_head.weight": {**wte, "data_offsets": [len(data), len(data) + b - a]}}.items()))
        short = {k.replace("transformer.", "", 1): v for k, v in header.items()}
        overlap = {**header, "transformer.wpe.weight": {**header["transformer.wpe.weight"], "data_offsets":
                   [a, a + header["transformer.wpe.weight"]["data_offsets"][1] - header["transformer.wpe.weight"]["data_offsets"][0]]}}
        nan = bytearray(data)
        nan[a:a + 4] = struct.pack("<f", float("nan"))
        cases = [("sorted_with_head", headed, data + data[a:b], None),
                 ("no_prefix", short, data, None),
                 ("overlap", overlap, data, "overlap or leave gaps"),
                 ("tail", header, data + b"\0" * 8, "bytes after its last tensor"),
                 ("offsets_short", {**header, "transformer.wpe.weight": {**header["transformer.wpe.weight"],
                                                                         "data_offsets": [0]}}, data, "is not [begin, end]"),
                 ("nan", header, bytes(nan), "non-finite"),
                 ("too_big", header, data, "too few for the GPT-2 of config.json"),
                 ("n_inner_zero", header, data, "n_inner is 0 (allowed: null, or 1 to 2147483647)")]
        for name, hdr, body, want_text in cases:
            cfg_text = (json.dumps({**cfg, "n_layer": 40}) if name == "too_big" else
                        json.dumps({**cfg, "n_inner": 0}) if name == "n_inner_zero" else None)
            d = write_hf(name, hdr, body, cfg_text)
            o = os.path.join(tmp, name + "_out")
            p = run([export_hf, d, o])
            lines = p.stderr.strip().splitlines()
            if want_text is None:
                got_ok = p.returncode == 0 and read_safetensors(os.path.join(o, "model.safetensors"))[1] == tensors_w
                check(got_ok, f"a Hugging Face file {name.replace('_', ' ')}: read as the same model (exit {p.returncode})")
            else:
                ok = p.returncode == 1 and len(lines) == 1 and want_text in lines[0] and not os.path.exists(o)
                check(ok, f"a Hugging Face file {name.replace('_', ' ')}: one error line, no OUT_DIR: {lines}")
        # A damaged checkpoint leaves no OUT_DIR; an OUT_DIR inside the source is refused.
        bad = os.path.join(tmp, "ck_bad")
        subprocess.run(["cp", "-r", ck, bad], check=True)
        blob = os.path.join(bad, "step_00000003", "params")
        raw_p = bytearray(open(blob, "rb").read())
        raw_p[100] ^= 0xFF
        open(blob, "wb").write(raw_p)
        for args, want_text in [([os.path.join(bad, "step_00000003"), os.path.join(tmp, "bad_out")], "crc"),
                                ([ck, os.path.join(ck, "step_00000003", "hf")], "lies inside the checkpoint")]:
            p = run([export_hf] + args)
            lines = p.stderr.strip().splitlines()
            ok = (p.returncode == 1 and len(lines) == 1 and want_text in lines[0].lower() and not os.path.exists(args[1]))
            check(ok, f"export_hf {os.path.basename(args[0])} -> {os.path.relpath(args[1], tmp)}: one error line, "
                  f"nothing written: {lines}")

        # transformers' GPT-2 on the exported weights: the loss Trellis computed.
        dump, hf_dump = os.path.join(tmp, "dump"), os.path.join(tmp, "hf_dump")
        train(binary, config, "train.precision=fp32", extra=["--dump-grads", dump])
        p = run([export_hf, dump, hf_dump])
        check_hf_loss(check, hf_dump, dump, "the export", p.returncode == 0)

        # An MLP width other than 4 x n_embd (model.ffn_hidden_size) is GPT-2's n_inner, both ways: the
        # export's config.json and c_fc shape; the Hugging Face directory starts a run of that width
        # exactly, and one of another width gets one error line.
        wide, hf_wide = os.path.join(tmp, "wide"), os.path.join(tmp, "hf_wide")
        train(binary, config, "train.precision=fp32", "model.ffn_hidden_size=96", extra=["--dump-grads", wide])
        p = run([export_hf, wide, hf_wide])
        wcfg = json.load(open(os.path.join(hf_wide, "config.json"))) if p.returncode == 0 else {}
        _, wt, _ = read_safetensors(os.path.join(hf_wide, "model.safetensors")) if p.returncode == 0 else (0, {}, 0)
        check(wcfg.get("n_inner") == 96 and wt.get("transformer.h.0.mlp.c_fc.weight", ("", []))[1] == [C, 96] and
              "n_inner" not in cfg, f"model.ffn_hidden_size = 96: config.json n_inner {wcfg.get('n_inner')}, c_fc "
              f"{wt.get('transformer.h.0.mlp.c_fc.weight', ('', []))[1]} (the 4C model's config has no n_inner)")
        d = os.path.join(tmp, "init_wide")
        train(binary, config, "model.init_from=" + hf_wide, "model.ffn_hidden_size=96", "train.steps=1",
              extra=["--dump-grads", d])
        raw_wide = open(os.path.join(wide, "params.f32"), "rb").read()
        src_w = struct.unpack(f"<{len(raw_wide) // 4}f", raw_wide)
        got = struct.unpack(f"<{len(src_w)}f", open(os.path.join(d, "params.f32"), "rb").read())
        check(got == src_w[:V * C] + (0.0,) * ((P - V) * C) + src_w[P * C:],
              "model.init_from = the n_inner 96 directory with model.ffn_hidden_size = 96: the source's parameters")
        p = run([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_wide])
        lines = [x for x in p.stderr.splitlines() if x.startswith("error")]
        check(p.returncode != 0 and len(lines) == 1 and "model.ffn_hidden_size = 96" in lines[0] and
              "model.ffn_hidden_size = 256" in lines[0], f"model.init_from of it at width 4C: {lines}")
        check_hf_loss(check, hf_wide, wide, "the n_inner 96 export", bool(wcfg))

        # An untied head (model.tie_embeddings = false) is GPT-2's tie_word_embeddings = false, both ways.
        untied, hf_untied = os.path.join(tmp, "untied"), os.path.join(tmp, "hf_untied")
        train(binary, config, "train.precision=fp32", "model.tie_embeddings=false", extra=["--dump-grads", untied])
        p = run([export_hf, untied, hf_untied])
        ucfg = json.load(open(os.path.join(hf_untied, "config.json"))) if p.returncode == 0 else {}
        _, ut, _ = read_safetensors(os.path.join(hf_untied, "model.safetensors")) if p.returncode == 0 else (0, {}, 0)
        raw_u = open(os.path.join(untied, "params.f32"), "rb").read()
        src_u = struct.unpack(f"<{len(raw_u) // 4}f", raw_u)
        head_at = next(q["offset"] for q in json.load(open(os.path.join(untied, "model.json")))["params"]
                       if q["name"] == "lm_head.w")
        head = ut.get("lm_head.weight", ("", [], ()))
        check(ucfg.get("tie_word_embeddings") is False and head[1] == [V, C] and
              head[2] == src_u[head_at:head_at + V * C] and head[2] != ut["transformer.wte.weight"][2],
              f"model.tie_embeddings = false: config.json tie_word_embeddings {ucfg.get('tie_word_embeddings')}, "
              f"lm_head.weight {head[1]}, its values Trellis's lm_head.w (not the token embedding)")
        d = os.path.join(tmp, "init_untied")
        train(binary, config, "model.init_from=" + hf_untied, "model.tie_embeddings=false", "train.steps=1",
              extra=["--dump-grads", d])
        got = struct.unpack(f"<{len(src_u)}f", open(os.path.join(d, "params.f32"), "rb").read())
        pad = (0.0,) * ((P - V) * C)
        want_u = src_u[:V * C] + pad + src_u[P * C:head_at + V * C] + pad
        check(got == want_u, "model.init_from = the untied directory with model.tie_embeddings = false: the source's "
              "parameters (padding rows zero)")
        p = run([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_untied])
        lines = [x for x in p.stderr.splitlines() if x.startswith("error")]
        check(p.returncode != 0 and len(lines) == 1 and "model.tie_embeddings = false" in lines[0] and
              "model.tie_embeddings = true" in lines[0], f"model.init_from of it with a tied head: {lines}")
        check_hf_loss(check, hf_untied, untied, "the untied export", bool(ucfg))

        # The norms' epsilon (model.norm_eps) is GPT-2's layer_norm_epsilon, both ways.
        eps, hf_eps = os.path.join(tmp, "eps"), os.path.join(tmp, "hf_eps")
        train(binary, config, "train.precision=fp32", "model.norm_eps=0.01", extra=["--dump-grads", eps])
        p = run([export_hf, eps, hf_eps])
        ecfg = json.load(open(os.path.join(hf_eps, "config.json"))) if p.returncode == 0 else {}
        check(ecfg.get("layer_norm_epsilon") == 0.01, f"model.norm_eps = 0.01: config.json layer_norm_epsilon "
              f"{ecfg.get('layer_norm_epsilon')}")
        d = os.path.join(tmp, "init_eps")
        train(binary, config, "model.init_from=" + hf_eps, "model.norm_eps=0.01", "train.steps=1", extra=["--dump-grads", d])
        check(json.load(open(os.path.join(d, "model.json")))["config"].get("norm_eps") == 0.01,
              "model.init_from = the layer_norm_epsilon 0.01 directory with model.norm_eps = 0.01 starts")
        p = run([binary, config, "--set", "train.device=cpu", "--set", "model.init_from=" + hf_eps])
        lines = [x for x in p.stderr.splitlines() if x.startswith("error")]
        check(p.returncode != 0 and len(lines) == 1 and "model.norm_eps = 0.01" in lines[0],
              f"model.init_from of it at the default eps: {lines}")
        check_hf_loss(check, hf_eps, eps, "the eps 0.01 export", bool(ecfg))
    print("FAIL" if failed else "PASS")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
