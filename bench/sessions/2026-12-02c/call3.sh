#!/usr/bin/env bash
# Session call 3 (1×H200): export_hf against transformers. hf_export_test (the tiny model trained on
# the CPU; GPT2LMHeadModel's loss on the export, transformers being installed here); then GPT-2
# 124M's shape (vocabulary 50257, sequence 256) dumped on the GPU in fp32 (--dump-grads), exported,
# and its loss in transformers on the same tokens; generate on the GPU from a checkpoint.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt export_hf generate
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
echo "=== hf_export_test $(date +%T)"
timeout 200 python3 tests/e2e/hf_export_test.py build/train_gpt build/export_hf examples/configs/tiny.toml 2>&1 | tail -12
echo "=== 124M $(date +%T)"
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
steps = 1
[data]
source = "synthetic"
TOML
timeout 120 build/train_gpt "$out/m124.toml" --dump-grads /tmp/dump124 > "$out/dump124.log" 2>&1; echo "dump exit $?"
timeout 120 build/export_hf /tmp/dump124 /tmp/hf124; echo "export exit $?"
timeout 200 python3 - <<'PY'
import sys
sys.path.insert(0, "tests/e2e")
from hf_export_test import hf_loss
ref, trellis = hf_loss("/tmp/hf124", "/tmp/dump124")
print(f"124M shape: transformers loss {ref:.7f}, Trellis (CUDA, fp32) {trellis:.7f}, rel diff {abs(trellis - ref) / ref:.2e}")
PY
echo "=== generate $(date +%T)"
timeout 60 build/train_gpt examples/configs/tiny.toml --set train.steps=20 --set checkpoint.dir=/tmp/gen_ck > "$out/gen_train.log" 2>&1; echo "train exit $?"
timeout 60 build/generate /tmp/gen_ck --prompt "1 2 3" --tokens 8 --device cuda 2>&1 | tail -3; echo "generate exit $?"
echo "=== done $(date +%T)"
