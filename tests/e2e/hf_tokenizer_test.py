#!/usr/bin/env python3
"""Hugging Face tokenizer.json files read by prepare_data and tokenize, against the tokenizers library.

Where the tokenizers package imports (else exit 77, skipped): seven BPE tokenizers are trained here on a
built-in multilingual text (plus tinyshakespeare where ../shared/data has it), shaped as the real ones
are: GPT-2's (byte-level, <|endoftext|>), Llama 3's (its Split regex, ignore_merges, <|begin_of_text|>
prepended), Qwen2's regex with a prefix space, and with the NFC normalizer (decomposed text composed),
Llama 2's (SentencePiece-style: Prepend and Replace normalizers, byte fallback, <s> prepended, its
decoder chain), a Metaspace one that splits (prepend
"first", unk tokens fused), and Digits + ByteLevel with added tokens that strip whitespace and
Roberta's <s> ... </s>. For each, prepare_data --tokenizer hf on texts with accents, CJK, emoji,
digit runs, contractions in both cases, odd whitespace and the added tokens in the text gives, per
line, exactly the ids tokenizer.encode(line) gives; tokenize --decode of those ids gives what
tokenizer.decode gives; the vocabulary file prepare_data wrote decodes the same and embeds a
tokenizer.json the library loads. Unsupported files (a WordPiece model, the NFKC normalizer, another
Split regex) get one error line naming the key. --append-eod ends each document with the token
tokenizer_config.json's eos_token or --eod-token names, and GPT-2's vocab.json and merges.txt (written
from the GPT-2-shaped one) give the library's ids and <|endoftext|>. With TRAIN_GPT, EXPORT_HF, GENERATE and CONFIG: a model
trained on data prepared with the Llama 3-shaped tokenizer samples text from prompts through it,
export_hf writes that tokenizer.json beside the weights (byte for byte), and generate on the export
reads it.
Usage: hf_tokenizer_test.py PREPARE_DATA TOKENIZE [TRAIN_GPT EXPORT_HF GENERATE CONFIG]"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers
except ImportError:
    print("skipped: the tokenizers package is not installed (pip install tokenizers)")
    sys.exit(77)

import equivalence

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")

CORPUS = """The quick brown fox jumps over the lazy dog. It's 2024; we'll see 12345 foxes.
Le café était très agréable, n'est-ce pas? Ça va très bien, merci!
Der Fluß ist größer als der Bach. Übermäßig schöne Straßen.
Быстрая коричневая лиса прыгает через ленивую собаку.
日本語のテキストも少し含めます。中文也有一些。한국어도 조금.
Emoji: 🦊🐶 and symbols like ±×÷ ≠ ∞ — “quotes” ‘single’ … done.
    indented code: def f(x): return x**2 + 3.14159
Numbers: 1, 22, 333, 4444, 55555, ٣٤٥, ²³.
Years 1999 2000 2023 2024 2025 12 123 1234 12345 123456 1234567 456 567 678 789 3456 4567.
"""

TEXTS = [
    "Hello world", " leading space", "  two leading spaces", "trailing space ", "it's THEY'RE We'LL I'D 'quote'",
    "The year 2024 and 1234567 and ٣٤٥٦ and ½ ²³", "tab\there\nnewline\r\nwindows  \n\n double",
    "café naïve Übermäßig Straße", "日本語のテキスト。中文，标点！", "🦊🐶👍🏽 emoji and ZWJ 👩‍👩‍👧",
    "mixed: (hello) [world] {x} <y> !!! ??? ...", "word\u00a0nbsp\u2003emspace\u3000ideographic",
    "unseen chars: ǅ ꙮ 𝔘𝔫𝔦 ᚠᛇᚻ", "   ", "x", "a<|endoftext|>b <|endoftext|> c", "<|begin_of_text|>Hi<|eot_id|>", "one turn<|eot_id|>the next",
    "before <mask>  after", "A <special> and <special>again", "x" * 300 + " long word",
    "ſ 's 'ſ", "line one\n\nline three\n",
    "decomposed: e\u0301 A\u030A \u212B \u1100\u1161\u11A8 a\u0301\u0323 q\u0307\u0323 caf\u00e9",
]


def corpus():
    text = CORPUS * 3 + "1234567 2024 123 456 789 12 34 56 " * 50  # digit merges, so that the digit split shows
    shakespeare = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "tinyshakespeare.txt")
    if os.path.exists(shakespeare):
        with open(shakespeare, encoding="utf-8") as f:
            text += f.read()[:200000]
    return text


def byte_level(split=None, prefix=False, ignore_merges=False, specials=("<|endoftext|>",), post=None, nfc=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    byte = pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=split is None)
    tok.pre_tokenizer = byte if split is None else pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(split), behavior="isolated"), byte])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = post or processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([corpus()], trainer)
    return tok


def llama3():
    tok = byte_level(LLAMA3, ignore_merges=True, specials=("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    return tok


def sentencepiece_style(metaspace):
    """Llama 2's shape (Prepend/Replace, byte fallback), or a Metaspace pre-tokenizer with unk only."""
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=90,
                                  show_progress=False)
    base.train_from_iterator([corpus()], trainer)
    model = json.loads(base.to_str())["model"]
    vocab, merges = model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    if not metaspace:
        for b in range(256):
            vocab[f"<0x{b:02X}>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=not metaspace))
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    return tok


def digits_roberta():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([corpus()], trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
    tok.add_tokens([AddedToken("<special>", normalized=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=False)
    return tok


def read_megatron(prefix):
    """The documents of a Megatron .bin/.idx pair, as lists of ids."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", idx[:9]
    dtype_code = idx[17]
    count = struct.unpack_from("<Q", idx, 18)[0]
    sizes = struct.unpack_from(f"<{count}i", idx, 34)
    pointers = struct.unpack_from(f"<{count}q", idx, 34 + 4 * count)
    fmt, width = {1: ("B", 1), 3: ("h", 2), 4: ("i", 4), 8: ("H", 2), 9: ("I", 4)}[dtype_code]
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    return [list(struct.unpack_from(f"<{n}{fmt}", data, p)) for n, p in zip(sizes, pointers)]


def run(cmd, stdin=None):
    """The command's exit status, standard output as bytes, standard error as text."""
    p = subprocess.run(cmd, input=None if stdin is None else stdin.encode(), capture_output=True)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace").strip()


def append_eod(prepare, inputs, lines, cases, tmp, check):
    """--append-eod: each document's ids and then the end-of-document token's, which comes from
    tokenizer_config.json's eos_token, from --eod-token, or for GPT-2's vocab.json and merges.txt
    (written from the GPT-2-shaped tokenizer, which then gives the library's ids too) <|endoftext|>."""
    llama3 = os.path.join(tmp, "llama3")
    with open(os.path.join(llama3, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": {"content": "<|end_of_text|>", "special": True}}, f)
    tok = cases["llama3"]
    gpt2 = os.path.join(tmp, "gpt2_files")
    os.makedirs(gpt2)
    model = json.loads(cases["gpt2"].to_str())["model"]
    with open(os.path.join(gpt2, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(model["vocab"], f, ensure_ascii=False)
    with open(os.path.join(gpt2, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join((m if isinstance(m, str) else " ".join(m)) + "\n" for m in model["merges"]))
    plain = [k for k, line in enumerate(lines) if "<|" not in line]  # GPT-2's files split no special tokens
    gpt2_inputs = sum((["--input", inputs[2 * k + 1]] for k in plain), [])
    runs = [("eos_token of tokenizer_config.json", ["--tokenizer", "hf", "--tokenizer-model", llama3], inputs,
             [tok.encode(x).ids + [tok.token_to_id("<|end_of_text|>")] for x in lines]),
            ("--eod-token <|eot_id|>", ["--tokenizer", "hf", "--tokenizer-model", llama3, "--eod-token", "<|eot_id|>"],
             inputs, [tok.encode(x).ids + [tok.token_to_id("<|eot_id|>")] for x in lines]),
            ("GPT-2's vocab.json and merges.txt, <|endoftext|>",
             ["--tokenizer", "gpt2", "--vocab", os.path.join(gpt2, "vocab.json"), "--merges", os.path.join(gpt2, "merges.txt")],
             gpt2_inputs, [cases["gpt2"].encode(lines[k]).ids + [cases["gpt2"].token_to_id("<|endoftext|>")] for k in plain])]
    for what, flags, ins, want in runs:
        prefix = os.path.join(tmp, "eod")
        status, out, err = run([prepare, *ins, "--output", prefix, *flags, "--append-eod", "--force"])
        check(status == 0 and read_megatron(prefix) == want, f"--append-eod, {what}: {len(want)} documents", err)
        # Documents holding the token inside them (Llama 3's <|eot_id|> ends turns within a chat) are
        # warned of: document masking would cut them there; so are those the tokenizer already ends with it.
        eod = want[0][-1]
        inside, ending = sum(eod in ids[:-2] for ids in want), sum(len(ids) > 1 and ids[-2] == eod for ids in want)
        warned = [ln for ln in out.decode().splitlines() if ln.startswith("warning:")]
        expect = ([f"warning: {ending} documents already end with the end-of-document token {eod}"] if ending else []) + \
            ([f"warning: {inside} documents hold the end-of-document token {eod} inside them"] if inside else [])
        check(len(warned) == len(expect) and all(w.startswith(e) for w, e in zip(warned, expect)) and inside + ending > 0
              if "eot_id" in what else not warned,
              f"--append-eod, {what}: {inside} documents with the token inside, {ending} ending with it, warned of", warned)
    # Refused in one line, and with --force the old dataset kept.
    for what, flags, message in [
            ("no tokenizer_config.json", ["--tokenizer", "hf", "--tokenizer-model", os.path.join(tmp, "qwen2_nfc")],
             "name the token with --eod-token"),
            ("a token not in the vocabulary", ["--tokenizer", "hf", "--tokenizer-model", llama3, "--eod-token", "</s>"],
             '"</s>" is not a token of the vocabulary'),
            ("a char vocabulary", ["--tokenizer", "char"], "--append-eod needs a vocabulary with an end-of-document token")]:
        status, _, err = run([prepare, *inputs[:2], "--output", os.path.join(tmp, "eod"), *flags, "--append-eod", "--force"])
        check(status == 1 and len(err.splitlines()) == 1 and message in err and
              os.path.exists(os.path.join(tmp, "eod.bin")), f"--append-eod refused: {what}; the old dataset kept", err)


def train_export_generate(binaries, tokenizer_dir, prefix, tmp, check):
    """The tokenizer through training, sampling and export_hf."""
    train, export, generate, config = binaries
    ck, out = os.path.join(tmp, "ck"), os.path.join(tmp, "export")
    status, _, err = run([train, config, "--set", "model.vocab_size=600", "--set", "data.source=file", "--set",
                          f"data.path={prefix}", "--set", "train.steps=3", "--set", "train.device=cpu", "--set",
                          "model.seq_len=64", "--set", f"checkpoint.dir={ck}"])
    if not check(status == 0, "trained on data prepared with tokenizer.json", err):
        return
    for source in (ck, out):
        if source == out:
            status, text, err = run([export, ck, out])
            with open(os.path.join(tokenizer_dir, "tokenizer.json"), "rb") as a, \
                    open(os.path.join(out, "tokenizer.json"), "rb") as b:
                check(status == 0 and a.read() == b.read(), "export_hf writes the tokenizer.json", err)
        status, text, err = run([generate, source, "--prompt", "Hello, wörld", "--tokens", "4", "--device", "cpu"])
        check(status == 0 and b"Hello, w\xc3\xb6rld" in text, f"generate samples through it ({os.path.basename(source)})",
              f"{text!r} {err}")


def main():
    prepare, tokenize = sys.argv[1], sys.argv[2]
    checks = equivalence.Checks(None, None, None)

    def check(ok, text, detail=""):  # the detail is printed only for a failure
        checks(ok, text if ok or not detail else f"{text}: {detail}")
        return ok
    cases = {"gpt2": byte_level(), "llama3": llama3(), "qwen2_prefix": byte_level(QWEN2, prefix=True),
             "qwen2_nfc": byte_level(QWEN2, nfc=True),
             "llama2": sentencepiece_style(False), "metaspace": sentencepiece_style(True),
             "digits_roberta": digits_roberta()}
    with tempfile.TemporaryDirectory() as tmp:
        # One input file a document, so that documents may hold newlines.
        lines = TEXTS + [line + "\n" for line in CORPUS.splitlines()]
        inputs = []
        for i, line in enumerate(lines):
            inputs += ["--input", os.path.join(tmp, f"text{i:02d}.txt")]
            with open(inputs[-1], "w", encoding="utf-8", newline="") as f:
                f.write(line)
        for name, tok in cases.items():
            d = os.path.join(tmp, name)
            os.makedirs(d)
            tok.save(os.path.join(d, "tokenizer.json"))
            prefix = os.path.join(tmp, name + "_data")
            status, _, err = run([prepare, *inputs, "--output", prefix, "--tokenizer", "hf", "--tokenizer-model", d])
            if not check(status == 0, f"{name}: prepare_data ran", err):
                continue
            docs = read_megatron(prefix)
            want = [tok.encode(line).ids for line in lines]
            bad = [(lines[i], docs[i], want[i]) for i in range(len(lines)) if i >= len(docs) or docs[i] != want[i]]
            check(len(docs) == len(lines) and not bad, f"{name}: {len(lines)} documents encode as the library's",
                  f"first difference: {bad[0]!r}" if bad else f"{len(docs)} documents")
            # Decoding: each document's ids, and a stretch that cuts a multi-byte character.
            vocab_file = prefix + ".vocab.json"
            wrong = []
            for ids in want + [want[9][1:4], want[9][2:]]:
                for flag in (["--tokenizer-model", d], ["--vocab", vocab_file]):
                    status, out, err = run([tokenize, *flag, "--decode"], stdin=" ".join(map(str, ids)))
                    want_text = tok.decode(ids, skip_special_tokens=False).encode()
                    if status != 0 or out != want_text:
                        wrong.append((flag[0], ids, out, err, want_text))
            check(not wrong, f"{name}: tokenize --decode gives the library's text", repr(wrong[:1]))
            _, out, err = run([tokenize, "--tokenizer-model", d, TEXTS[8]])
            check(out.split() == [str(i).encode() for i in tok.encode(TEXTS[8]).ids], f"{name}: tokenize encodes TEXT",
                  f"{out!r} {err}")
            with open(vocab_file, encoding="utf-8") as f:
                embedded = json.load(f)["tokenizer"]
            back = Tokenizer.from_str(json.dumps(embedded))
            check(back.encode(TEXTS[9]).ids == tok.encode(TEXTS[9]).ids, f"{name}: the vocabulary file embeds the tokenizer")

        # Refusals: one line naming the key.
        base = json.loads(cases["gpt2"].to_str())
        refusals = {
            "WordPiece": (lambda j: j["model"].update(type="WordPiece"), "model.type: \"WordPiece\" is not supported"),
            "NFKC": (lambda j: j.update(normalizer={"type": "NFKC"}), "normalizer.type: \"NFKC\" is not supported"),
            "regex": (lambda j: j.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "\\w+"},
                                                        "behavior": "Isolated", "invert": False}),
                      "pre_tokenizer.pattern: only GPT-2's, Llama 3's and Qwen2's regex are supported"),
            "dropout": (lambda j: j["model"].update(dropout=0.1), "model.dropout: BPE dropout is not supported"),
        }
        for name, (change, message) in refusals.items():
            j = json.loads(json.dumps(base))
            change(j)
            path = os.path.join(tmp, name + ".json")
            with open(path, "w") as f:
                json.dump(j, f)
            status, _, err = run([prepare, *inputs[:2], "--output", os.path.join(tmp, "refused"), "--tokenizer", "hf",
                                  "--tokenizer-model", path])
            check(status == 1 and len(err.splitlines()) == 1 and message in err and
                  not os.path.exists(os.path.join(tmp, "refused.bin")), f"refused: {name}", err)
        append_eod(prepare, inputs, lines, cases, tmp, check)
        if len(sys.argv) > 3:
            train_export_generate(sys.argv[3:], os.path.join(tmp, "llama3"), os.path.join(tmp, "llama3_data"), tmp, check)
        empty = os.path.join(tmp, "empty_dir")
        os.makedirs(empty)
        status, _, err = run([prepare, *inputs[:2], "--output", os.path.join(tmp, "x"), "--tokenizer", "hf",
                              "--tokenizer-model", empty])
        check(status == 1 and "has no tokenizer.json" in err, "refused: a directory without tokenizer.json", err)
    checks.finish()


if __name__ == "__main__":
    sys.exit(main())
