#!/usr/bin/env bash
# generate on a freshly trained tiny checkpoint: exit 0 and 10 generated tokens per prompt (two
# prompts of different lengths), naming the checkpoint it took from a checkpoint.dir; the same run's
# weight export samples the same tokens (also for a model with experts, which export_hf refuses); a bad
# checkpoint path or temperature gives one "error:" line and exit 1; --help prints the usage, exit 0.
# The export's Hugging Face directory (export_hf) samples them too.
# Usage: generate_test.sh TRAIN_GPT GENERATE TINY_TOML EXPORT_HF
set -uo pipefail
train_gpt=${1:?usage: generate_test.sh TRAIN_GPT GENERATE TINY_TOML}
generate=${2:?usage: generate_test.sh TRAIN_GPT GENERATE TINY_TOML}
config=${3:?usage: generate_test.sh TRAIN_GPT GENERATE TINY_TOML EXPORT_HF}
export_hf=${4:?usage: generate_test.sh TRAIN_GPT GENERATE TINY_TOML EXPORT_HF}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*" >&2; exit 1; }

"$train_gpt" "$config" --set train.device=cpu --set train.steps=20 --set checkpoint.dir="$tmp/ckpt" \
  >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log" >&2; fail "train_gpt exited $?"; }

"$generate" "$tmp/ckpt" --prompt "1 2 3" --prompt "4 5" --tokens 10 --device cpu --seed 3 \
  >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/out" "$tmp/err" >&2; fail "generate exited non-zero"; }
cat "$tmp/out"
grep -q "^note: sampling from $tmp/ckpt/step_00000020, the newest valid checkpoint in $tmp/ckpt" "$tmp/err" ||
  { cat "$tmp/err" >&2; fail "no note naming the checkpoint taken"; }
[[ $(grep -c '^generated:' "$tmp/out") == 2 ]] || fail "expected 2 generated lines"
while read -r _ rest; do
  n=$(wc -w <<<"$rest")
  [[ $n == 10 ]] || fail "expected 10 generated tokens, got $n: $rest"
done < <(grep '^generated:' "$tmp/out")
# The same seed repeats.
"$generate" "$tmp/ckpt" --prompt "1 2 3" --prompt "4 5" --tokens 10 --device cpu --seed 3 >"$tmp/out2" 2>/dev/null
cmp -s "$tmp/out" "$tmp/out2" || fail "two runs with one seed differ"

# The same weights as a weight export (--export-weights of the same run) sample the same tokens.
"$train_gpt" "$config" --set train.device=cpu --set train.steps=20 --export-weights "$tmp/weights" \
  >"$tmp/train2.log" 2>&1 || { cat "$tmp/train2.log" >&2; fail "train_gpt --export-weights exited $?"; }
"$generate" "$tmp/weights" --prompt "1 2 3" --prompt "4 5" --tokens 10 --device cpu --seed 3 >"$tmp/out3" 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; fail "generate on a weight export exited non-zero"; }
cmp -s "$tmp/out" "$tmp/out3" || fail "the weight export of the same run samples other tokens than its checkpoint"
"$export_hf" "$tmp/weights" "$tmp/hf" >/dev/null || fail "export_hf exited non-zero"
"$generate" "$tmp/hf" --prompt "1 2 3" --prompt "4 5" --tokens 10 --device cpu --seed 3 >"$tmp/out4" 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; fail "generate on a Hugging Face directory exited non-zero"; }
cmp -s "$tmp/out" "$tmp/out4" || fail "the Hugging Face export samples other tokens than the checkpoint"

# A model with experts: its checkpoint and its weight export sample the same tokens; export_hf refuses it
# with one line (GPT-2 has no experts).
moe=(--set moe.experts=4 --set moe.top_k=2 --set moe.layer_freq=2)
"$train_gpt" "$config" --set train.device=cpu --set train.steps=20 "${moe[@]}" --set checkpoint.dir="$tmp/moe_ckpt" \
  --export-weights "$tmp/moe_weights" >"$tmp/train3.log" 2>&1 || { cat "$tmp/train3.log" >&2; fail "train_gpt with experts exited $?"; }
"$generate" "$tmp/moe_ckpt" --prompt "1 2 3" --prompt "4 5" --tokens 10 --device cpu --seed 3 >"$tmp/out5" 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; fail "generate from a checkpoint with experts exited non-zero"; }
[[ $(grep -c '^generated:' "$tmp/out5") == 2 ]] || fail "experts: expected 2 generated lines"
"$generate" "$tmp/moe_weights" --prompt "1 2 3" --prompt "4 5" --tokens 10 --device cpu --seed 3 >"$tmp/out6" 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; fail "generate from a weight export with experts exited non-zero"; }
cmp -s "$tmp/out5" "$tmp/out6" || fail "experts: the weight export samples other tokens than the checkpoint"
cmp -s "$tmp/out" "$tmp/out5" && fail "experts: the model with experts samples the dense model's tokens"
rc=0
"$export_hf" "$tmp/moe_weights" "$tmp/moe_hf" >/dev/null 2>"$tmp/err" || rc=$?
[[ $rc == 1 && $(wc -l <"$tmp/err") == 1 ]] && grep -q "mixture-of-experts" "$tmp/err" ||
  { cat "$tmp/err" >&2; fail "export_hf of a model with experts: exit $rc, expected 1 and one error line"; }

rc=0
"$generate" "$tmp/nonexistent" --prompt "1" --tokens 10 >"$tmp/out" 2>"$tmp/err" || rc=$?
[[ $rc == 1 ]] || fail "bad checkpoint path: exit $rc, expected 1"
[[ $(wc -l <"$tmp/err") == 1 ]] && grep -q '^error: ' "$tmp/err" || { cat "$tmp/err" >&2; fail "bad checkpoint path: expected one error: line"; }
for t in nan -1 inf; do
  rc=0
  "$generate" "$tmp/ckpt" --prompt "1" --temperature "$t" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [[ $rc == 1 && $(wc -l <"$tmp/err") == 1 ]] && grep -q "^error: --temperature $t: allowed is a finite number >= 0" "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "--temperature $t: exit $rc, expected 1 and one error line"; }
done
"$generate" --help >"$tmp/out" 2>"$tmp/err" || fail "--help exited non-zero"
grep -q "^usage: generate MODEL_DIR" "$tmp/out" && [[ ! -s $tmp/err ]] || fail "--help: no usage on stdout"
echo "generate e2e: OK"
