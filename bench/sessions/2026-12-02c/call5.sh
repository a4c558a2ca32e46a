#!/usr/bin/env bash
# Session call 5 (1×H200): after the review mends of export_hf / model.init_from (the safetensors
# reader rewritten): call 4's check again (transformers' save_pretrained files started from on the
# GPU, loss against transformers), hf_export_test with its transformers part, generate_test, gpu_e2e.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt export_hf generate
python3 -c '
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
GPT2LMHeadModel(GPT2Config()).save_pretrained("/tmp/hf_gpt2")'
sed -n '/^cat > "\$out\/m124.toml"/,/^TOML$/p' bench/sessions/2026-12-02c/call4.sh | sed '1d;$d' > "$out/m124.toml"
timeout 120 build/train_gpt "$out/m124.toml" --set model.init_from=/tmp/hf_gpt2 --dump-grads /tmp/dump_hf > "$out/dump.log" 2>&1
echo "dump exit $?"
timeout 200 python3 -c '
import sys
sys.path.insert(0, "tests/e2e")
from hf_export_test import hf_loss
ref, trellis = hf_loss("/tmp/hf_gpt2", "/tmp/dump_hf")
print(f"save_pretrained GPT-2 124M: transformers {ref:.7f}, Trellis {trellis:.7f}, rel diff {abs(trellis - ref) / ref:.2e}")' 2>&1 | grep -v Loading
echo "=== hf_export_test $(date +%T)"
timeout 200 python3 tests/e2e/hf_export_test.py build/train_gpt build/export_hf examples/configs/tiny.toml mpiexec 2>&1 | grep -vE "^ok|Loading" | tail -5
timeout 100 bash tests/e2e/generate_test.sh build/train_gpt build/generate examples/configs/tiny.toml build/export_hf 2>&1 | tail -1
echo "=== gpu_e2e $(date +%T)"
timeout 200 python3 tests/e2e/gpu_e2e.py build/train_gpt mpiexec examples/configs/tiny.toml > "$out/gpu_e2e.log" 2>&1
echo "gpu_e2e exit $?"; grep -c "^ok" "$out/gpu_e2e.log"; grep -E "FAIL" "$out/gpu_e2e.log" | head -5
echo "=== done $(date +%T)"
