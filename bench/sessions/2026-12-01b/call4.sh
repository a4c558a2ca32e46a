#!/usr/bin/env bash
# Session call 4 (1×H200): fp16 with f16 gradients (train.grad_dtype = auto) against f32 gradients at
# GPT-2 1.3B, micro-batch 16, 40 steps of random tokens: the loss scaler's skipped steps, the scale,
# the losses and the step time of each.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
source bench/gpt_toml.sh
build_targets train_gpt
gpt_toml call4 24 2048 16 16 40 'precision = "fp16"' | sed '0,/precision = "bf16"/{/precision = "bf16"/d}' > "$out/fp16.toml"
grep -n precision "$out/fp16.toml"
for g in auto f32; do
  echo "=== grad_dtype $g $(date +%T)"
  timeout 150 build/train_gpt "$out/fp16.toml" --set train.grad_dtype=$g --set log.metrics_file="$out/$g.jsonl" \
    > "$out/$g.log" 2>&1; echo "exit $?"
  python3 - "$out/$g.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
s = [x for x in r if "step" in x and x.get("split") != "val"]
print(r[0]["grad_dtype"], "skipped", [x["step"] for x in s if x.get("skipped")], "scale", s[-1]["loss_scale"],
      "loss 1/10/20/40", [round(s[i]["loss"], 4) for i in (0, 9, 19, len(s) - 1)],
      "median step ms", sorted(x["step_ms"] for x in s[5:])[len(s[5:]) // 2])
PY
done
tar czf /tmp/call4.tgz -C "$out" . 2>/dev/null && rm -rf "${out:?}"/* && mv /tmp/call4.tgz "$out/"
echo "=== done $(date +%T)"
