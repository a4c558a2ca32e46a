#!/usr/bin/env bash
# Session call 4 (1×H200): model.init_from against transformers' own files. A random GPT-2 124M
# (GPT2Config's defaults, 1024 positions) saved by save_pretrained; Trellis starts from it at
# sequence 256 (the first positions), dumps its first step on the GPU in fp32, and transformers
# computes the loss on the same tokens; then a few bf16 steps from it on the GPU; hf_export_test.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt export_hf
python3 - <<'PY'
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config()).save_pretrained("/tmp/hf_gpt2")
import os, json, struct
raw = open("/tmp/hf_gpt2/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
keys = [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]
print("saved", len(keys), "tensors, e.g.", keys[:3], "lm_head" in " ".join(keys))
PY
cat > "$out/m124.toml" <<'TOML'
[model]
vocab_size = 50257
seq_len = 256
n_layers = 12
n_heads = 12
d_model = 768
[train]
device = "cuda"
precision = "fp32"
micro_batch = 2
steps = 5
[data]
source = "synthetic"
TOML
echo "=== dump $(date +%T)"
timeout 120 build/train_gpt "$out/m124.toml" --set model.init_from=/tmp/hf_gpt2 --dump-grads /tmp/dump_hf > "$out/dump.log" 2>&1
echo "dump exit $?"; grep -E "initialized|error" "$out/dump.log"
timeout 200 python3 - <<'PY'
import sys
sys.path.insert(0, "tests/e2e")
from hf_export_test import hf_loss
ref, trellis = hf_loss("/tmp/hf_gpt2", "/tmp/dump_hf")
print(f"GPT-2 124M saved by transformers, sequence 256: transformers loss {ref:.7f}, Trellis (CUDA, fp32, "
      f"model.init_from) {trellis:.7f}, rel diff {abs(trellis - ref) / ref:.2e}")
PY
echo "=== bf16 steps $(date +%T)"
timeout 120 build/train_gpt "$out/m124.toml" --set model.init_from=/tmp/hf_gpt2 --set train.precision=bf16 \
  --set log.every=1 > "$out/bf16.log" 2>&1; echo "bf16 exit $?"; grep -E "initialized|^step|error" "$out/bf16.log" | head -8
echo "=== hf_export_test $(date +%T)"
timeout 200 python3 tests/e2e/hf_export_test.py build/train_gpt build/export_hf examples/configs/tiny.toml mpiexec 2>&1 | grep -vE "^ok|Loading" | tail -5
echo "=== done $(date +%T)"
