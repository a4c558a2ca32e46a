#!/usr/bin/env python3
"""prepare_data --tokenizer hf against the tokenizers library on the CPU: time and equal ids.

Two tokenizers are trained on TEXT: Llama 3's shape (its split pattern, ignore_merges; 32000 asked)
and Llama 2's (Prepend/Replace normalizers, byte fallback, <s> first; 32000 asked). The text is
tokenized as one document and, for the first, as one document a line, by the library (`encode`,
`encode_batch` on its threads) and by prepare_data (its time includes loading the tokenizer).
Training the Llama 2-shaped one (no pre-tokenizer: the text is one word) takes the library ~10 min
on 2 cores for tinyshakespeare.
Usage: tokenizer_bench.py PREPARE_DATA TEXT"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")


def read_megatron(prefix):
    idx = open(prefix + ".idx", "rb").read()
    code, count = idx[17], struct.unpack_from("<Q", idx, 18)[0]
    sizes, pointers = struct.unpack_from(f"<{count}i", idx, 34), struct.unpack_from(f"<{count}q", idx, 34 + 4 * count)
    fmt = {3: "h", 4: "i", 8: "H", 9: "I"}[code]
    data = open(prefix + ".bin", "rb").read()
    return [list(struct.unpack_from(f"<{n}{fmt}", data, p)) for n, p in zip(sizes, pointers)]


def llama3(text):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|begin_of_text|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    return tok


def llama2(text):
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    base.train_from_iterator([text], trainers.BpeTrainer(vocab_size=32000, special_tokens=["<unk>", "<s>", "</s>"],
                                                         show_progress=False))
    m = json.loads(base.to_str())["model"]
    vocab, merges = m["vocab"], [tuple(x) if isinstance(x, list) else tuple(x.split(" ")) for x in m["merges"]]
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = base.normalizer
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def main():
    prepare, text_path = sys.argv[1:3]
    text = open(text_path, encoding="utf-8").read()
    lines = text.splitlines(keepends=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, splits in (("Llama 3-shaped", llama3, ("file", "lines")), ("Llama 2-shaped", llama2, ("file",))):
            tok = make(text)
            d = os.path.join(tmp, make.__name__)
            os.makedirs(d)
            tok.save(os.path.join(d, "tokenizer.json"))
            print(f"{name}: vocabulary {tok.get_vocab_size()}")
            for split in splits:
                t0 = time.perf_counter()
                want = [tok.encode(text).ids] if split == "file" else [e.ids for e in tok.encode_batch(lines)]
                lib = time.perf_counter() - t0
                prefix = os.path.join(tmp, f"{make.__name__}_{split}")
                t0 = time.perf_counter()
                subprocess.run([prepare, "--input", text_path, "--output", prefix, "--tokenizer", "hf", "--tokenizer-model", d,
                                "--documents-split", split], check=True, capture_output=True)
                ours = time.perf_counter() - t0
                got = read_megatron(prefix)
                print(f"  {len(want)} document(s), {sum(map(len, want))} tokens: tokenizers "
                      f"{'encode' if split == 'file' else f'encode_batch ({os.cpu_count()} cores)'} {lib:.2f} s, "
                      f"prepare_data {ours:.2f} s, ids equal: {got == want}")


if __name__ == "__main__":
    main()
