#!/usr/bin/env bash
# prepare_data end to end: a text becomes a token file and a vocabulary that train_gpt trains on;
# an empty input, a directory as input and an output that would replace an input each give one
# "error:" line and exit 1, and leave the input as it was; bytes that are not UTF-8 are warned of;
# existing outputs are refused unless --force, which replaces all of the prefix's; 1 and 3 threads
# write the same dataset, and of two bad JSON lines the first is reported.
# Usage: prepare_data_test.sh PREPARE_DATA TRAIN_GPT TINY_TOML
set -uo pipefail
prepare_data=${1:?usage: prepare_data_test.sh PREPARE_DATA TRAIN_GPT TINY_TOML}
train_gpt=${2:?usage: prepare_data_test.sh PREPARE_DATA TRAIN_GPT TINY_TOML}
config=${3:?usage: prepare_data_test.sh PREPARE_DATA TRAIN_GPT TINY_TOML}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done >"$tmp/text.txt"
"$prepare_data" --input "$tmp/text.txt" --output "$tmp/new_dir/text" --tokenizer char --format llmc >"$tmp/out" 2>&1 ||
  { cat "$tmp/out" >&2; fail "prepare_data exited non-zero"; }
[[ -s $tmp/new_dir/text.tok && -s $tmp/new_dir/text.vocab.json ]] || fail "no text.tok / text.vocab.json (in a new directory)"
mv "$tmp/new_dir/text.tok" "$tmp/new_dir/text.vocab.json" "$tmp/"
"$train_gpt" "$config" --set train.device=cpu --set train.steps=3 --set data.source=file \
  --set data.path="$tmp/text.tok" --set log.val_every=0 >"$tmp/train" 2>&1 || { tail -3 "$tmp/train" >&2; fail "train_gpt on it"; }
echo "ok   a text becomes a token file train_gpt trains on"
# Its file truncated during a run: the memory-mapped read faults (SIGBUS); one error line, exit 1.
cp "$tmp/text.tok" "$tmp/live.tok" && cp "$tmp/text.vocab.json" "$tmp/live.vocab.json"
"$train_gpt" "$config" --set train.device=cpu --set train.steps=1000000 --set data.source=file \
  --set data.path="$tmp/live.tok" --set log.val_every=0 --set log.every=1 >"$tmp/live.out" 2>"$tmp/live.err" </dev/null &
live=$!
for _ in $(seq 600); do grep -q "^step" "$tmp/live.out" && break; sleep 0.1; done
truncate -s 100 "$tmp/live.tok"
for _ in $(seq 600); do kill -0 $live 2>/dev/null || break; sleep 0.1; done
kill -9 $live 2>/dev/null && fail "a run whose dataset was truncated did not end within 60 s"
rc=0; wait $live || rc=$?
[[ $rc == 1 && $(wc -l <"$tmp/live.err") == 1 ]] && grep -qF "error: bus error (SIGBUS) on a memory-mapped file" "$tmp/live.err" ||
  { cat "$tmp/live.err" >&2; fail "truncated during the run: exit $rc, expected 1 and one error line"; }
echo "ok   a dataset truncated during the run ends it with one line: $(cat "$tmp/live.err")"

# bad NAME "EXPECTED" ARGS...: one error line naming the problem, exit 1.
bad() {
  local name=$1 want=$2
  shift 2
  local rc=0
  "$prepare_data" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [[ $rc == 1 && $(wc -l <"$tmp/err") == 1 ]] && grep -qF "error: $want" "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "$name: exit $rc, expected 1 and one line with '$want'"; }
  echo "ok   $name: $(cat "$tmp/err")"
}
: >"$tmp/empty.txt"
bad empty_input "$tmp/empty.txt: is empty" --input "$tmp/empty.txt" --output "$tmp/e" --tokenizer char
mkdir "$tmp/adir"
bad directory_input "$tmp/adir: is a directory" --input "$tmp/adir" --output "$tmp/d" --tokenizer char
{ head -c 3000 /dev/urandom; printf '\xf7\xbf\xbf\xbf\xf4\x90\x80\x80'; } >"$tmp/binary.bin"  # 4-byte forms past U+10FFFF too
"$prepare_data" --input "$tmp/binary.bin" --output "$tmp/bin" --tokenizer char >"$tmp/out" 2>&1 || fail "binary input: exit $?"
grep -q "warning: $tmp/binary.bin: [0-9]* bytes are not UTF-8 and become U+FFFD" "$tmp/out" || { cat "$tmp/out"; fail "binary input: no warning"; }
echo "ok   a binary input to the char tokenizer is warned of"
bad output_is_a_directory "--output $tmp/: a prefix, not a directory" --input "$tmp/text.txt" --output "$tmp/" --tokenizer char
cp "$tmp/text.txt" "$tmp/keep.tok"
bad output_over_input "--output $tmp/keep would overwrite the input $tmp/keep.tok" \
  --input "$tmp/keep.tok" --output "$tmp/keep" --tokenizer char --format llmc
cmp -s "$tmp/text.txt" "$tmp/keep.tok" || fail "the input was changed"
# Existing outputs: refused, or with --force all of the prefix's replaced (no stale .tok beside .bin/.idx).
bad output_exists "--output $tmp/text: $tmp/text.tok already exists" \
  --input "$tmp/text.txt" --output "$tmp/text" --tokenizer char --format llmc
"$prepare_data" --input "$tmp/text.txt" --output "$tmp/text" --tokenizer char --force >"$tmp/out" 2>&1 ||
  { cat "$tmp/out" >&2; fail "--force: exit $?"; }
[[ -f $tmp/text.bin && -f $tmp/text.idx && -f $tmp/text.vocab.json && ! -e $tmp/text.tok ]] ||
  fail "--force left $(ls "$tmp")"
echo "ok   existing outputs are refused, and --force replaces all of the prefix's"
# --force with an input that cannot be read keeps the old dataset (it used to be removed first).
bad force_missing_input "$tmp/missing.txt: cannot open" --input "$tmp/missing.txt" --output "$tmp/text" --tokenizer char --force
[[ -f $tmp/text.bin && -f $tmp/text.idx && -f $tmp/text.vocab.json ]] || fail "--force with a bad input removed $(ls "$tmp")"
bad unknown_flag "unknown option --bogus" --input "$tmp/text.txt" --bogus
# The output does not depend on the number of threads encoding the documents (JSON Lines, one
# document a line, in two inputs), and of two bad lines the first is the one reported.
for i in $(seq 3000); do echo "{\"text\": \"line $i: $(printf '%*s' $((i % 97)) '' | tr ' ' 'x')\"}"; done >"$tmp/a.jsonl"
head -700 "$tmp/a.jsonl" >"$tmp/b.jsonl"
# b.jsonl: a byte order mark, Windows line ends and blank lines, which every block size reads alike.
{ printf '\xef\xbb\xbf'; awk 'NR <= 700 { printf "%s\r\n", $0; if (NR == 100) print ""; if (NR == 300) print "   " }' "$tmp/a.jsonl"; } >"$tmp/b.jsonl"
for run in "1 67108864" "3 67108864" "3 1000" "2 5"; do
  set -- $run
  OMP_NUM_THREADS=$1 "$prepare_data" --input "$tmp/a.jsonl" --input "$tmp/b.jsonl" --output "$tmp/threads$1_$2" \
    --tokenizer byte --json-keys text --block-bytes $2 >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; fail "JSON Lines, $run: exit $?"; }
  grep -q "3700 documents" "$tmp/out" && cmp -s "$tmp/threads1_67108864.bin" "$tmp/threads$1_$2.bin" &&
    cmp -s "$tmp/threads1_67108864.idx" "$tmp/threads$1_$2.idx" || fail "threads and block bytes $run wrote another dataset: $(cat "$tmp/out")"
done
echo "ok   1, 2 and 3 threads and blocks of 5 bytes to 64 MiB write the same dataset"
# Lines longer than a block of reading (1 MiB and more), the last without a newline: every byte kept.
{ head -c 3000000 /dev/zero | tr '\0' a; echo; echo short; echo; head -c 1048575 /dev/zero | tr '\0' b; echo; printf 'end'; } >"$tmp/long.txt"
for block in 65536 7; do
  "$prepare_data" --input "$tmp/long.txt" --output "$tmp/long$block" --tokenizer byte --format llmc --documents-split lines \
    --block-bytes $block >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; fail "long lines, blocks of $block bytes: exit $?"; }
  python3 - "$tmp/long.txt" "$tmp/long$block.tok" <<'PY' || fail "long lines, blocks of $block bytes: the tokens are not the text's bytes"
import struct, sys
text, raw = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
n = struct.unpack("<3i", raw[:12])[2]
sys.exit(0 if bytes(struct.unpack(f"<{n}H", raw[1024:1024 + 2 * n])) == text else 1)
PY
  grep -q "5 documents" "$tmp/out" || fail "long lines: $(cat "$tmp/out")"
done
echo "ok   lines longer than a block of reading keep every byte"
sed -e '2500s/.*/{"text": 1}/' -e '2900s/.*/not json/' "$tmp/a.jsonl" >"$tmp/bad.jsonl"
# A partial file an interrupted run left: refused without --force, removed with it.
: >"$tmp/fresh.partial.bin"
bad partial_left "--output $tmp/fresh: $tmp/fresh.partial.bin exists (left by an interrupted prepare_data" \
  --input "$tmp/text.txt" --output "$tmp/fresh" --tokenizer char
"$prepare_data" --input "$tmp/text.txt" --output "$tmp/fresh" --tokenizer char --force >"$tmp/out" 2>&1 &&
  [[ ! -e $tmp/fresh.partial.bin && -s $tmp/fresh.bin ]] || fail "--force with a partial file left: $(cat "$tmp/out")"
OMP_NUM_THREADS=3 bad first_bad_line "$tmp/bad.jsonl:2500: the member \"text\" is not a string" \
  --input "$tmp/bad.jsonl" --output "$tmp/bad" --tokenizer byte --json-keys text
echo "prepare_data e2e: OK"
