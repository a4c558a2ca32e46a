#!/usr/bin/env bash
# Bad input to train_gpt ends in one clear line on stderr naming the file and the key, a non-zero
# exit, and no crash banner (terminate, abort, stack trace, MPI_ABORT) -- alone and under mpirun.
# Usage: bad_input_test.sh TRAIN_GPT [MPIEXEC]
set -uo pipefail

train_gpt=${1:?usage: bad_input_test.sh TRAIN_GPT [MPIEXEC]}
mpiexec=${2:-mpirun}
if [[ ! -x $train_gpt ]]; then
  echo "FAIL: $train_gpt is not built" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
failures=0

good='[model]
vocab_size = 64
seq_len = 16
n_layers = 1
n_heads = 2
d_model = 32
[train]
device = "cpu"
precision = "fp32"
micro_batch = 4
steps = 1'

crash_banner='terminate called|Aborted|core dumped|Segmentation|MPI_ABORT|backtrace|stack trace|\[rank '

# check NAME "EXPECTED..." -- ARGS: runs train_gpt ARGS and checks the exit status and stderr.
check() {
  local name=$1; shift
  local expected=()
  while [[ $1 != -- ]]; do expected+=("$1"); shift; done
  shift
  local rc=0
  "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || rc=$?
  local problems=()
  ((rc != 0)) || problems+=("exit status 0")
  local lines
  lines=$(wc -l <"$tmp/err")
  [[ $lines == 1 ]] || problems+=("stderr has $lines lines, want 1")
  for e in "${expected[@]}"; do
    grep -qF -- "$e" "$tmp/err" || problems+=("stderr lacks '$e'")
  done
  ! grep -qE "$crash_banner" "$tmp/err" "$tmp/out" || problems+=("crash banner in the output")
  report "$name" "${problems[@]+"${problems[@]}"}"
}

report() {
  local name=$1; shift
  if (($# == 0)); then
    echo "ok   $name: $(head -c 300 "$tmp/err")"
  else
    failures=$((failures + 1))
    echo "FAIL $name: $(IFS=';'; echo "$*")"
    echo "---- stderr:"; cat "$tmp/err"; echo "---- stdout (tail):"; tail -5 "$tmp/out"; echo "----"
  fi
}

# write NAME TEXT: a config file in the temp dir.
write() { printf '%s\n' "$2" >"$tmp/$1"; }

write unknown_key.toml "$good
[optimizer]
learning_rate = 1e-3"
write wrong_type.toml "${good/n_layers = 1/n_layers = \"1\"}"
write heads.toml "${good/n_heads = 2/n_heads = 5}"
write batch.toml "$good
global_batch = 6"
write zero.toml "$good
[zero]
stage = 2
reduce_dtype = \"bf16\""
write good.toml "$good"

check missing_file "nope.toml" "cannot read config file" -- "$train_gpt" "$tmp/nope.toml"
check unknown_key "unknown_key.toml" "optimizer.learning_rate" -- "$train_gpt" "$tmp/unknown_key.toml"
check wrong_type "wrong_type.toml" "model.n_layers must be an integer" -- "$train_gpt" "$tmp/wrong_type.toml"
check heads_divide "heads.toml" "model.n_heads = 5 does not divide model.d_model = 32" -- "$train_gpt" "$tmp/heads.toml"
check global_batch "batch.toml" "train.global_batch = 6 is not a multiple of train.micro_batch (4)" -- "$train_gpt" "$tmp/batch.toml"
check zero_reduce_dtype "zero.toml" "zero.reduce_dtype = bf16" "f32 only" -- "$train_gpt" "$tmp/zero.toml"
check bad_set "--set train.steps=abc" "train.steps must be an integer (allowed: 1 to 2147483647)" -- "$train_gpt" "$tmp/good.toml" --set train.steps=abc
check bad_option "unknown option --bogus" -- "$train_gpt" "$tmp/good.toml" --bogus
check set_value_named "train.global_batch = 6 is not a multiple" "(from --set train.global_batch=6)" -- \
  "$train_gpt" "$tmp/good.toml" --set train.global_batch=6
check path_without_file_source "data.path = \"x.tok\" is set, but data.source = \"synthetic\" does not read it" -- \
  "$train_gpt" "$tmp/good.toml" --set data.path=x.tok
check attention_dropout "model.attention_dropout = -0.5 (allowed: -1 = model.dropout, or [0, 1))" -- \
  "$train_gpt" "$tmp/good.toml" --set model.attention_dropout=-0.5
check absurd_batch "train.micro_batch x model.seq_len x" "beyond what a tensor can index" -- \
  "$train_gpt" "$tmp/good.toml" --set train.micro_batch=2147483647 --set model.seq_len=2147483647
# A model too large to count in bytes is refused by name (its memory plan used to wrap to a small
# figure); so are more micro-batches a step than the schedule can hold (an allocation failure before).
check absurd_width "parameters is beyond what the memory plan can count (allowed: below 2^50)" -- \
  "$train_gpt" "$tmp/good.toml" --set model.d_model=2147483646
check absurd_accumulation "makes 2147483647 micro-batches a step on each data rank" "allowed: at most 65536" -- \
  "$train_gpt" "$tmp/good.toml" --set train.global_batch=2147483647 --set train.micro_batch=1
# Integers past 2^31 - 1 would wrap where they are used as int; floats are used as f32.
check int_past_int32 "train.micro_batch = 9223372036854775807 is not allowed (allowed: 1 to 2147483647)" -- \
  "$train_gpt" "$tmp/good.toml" --set train.micro_batch=9223372036854775807
check n_layers_cap "model.n_layers = 100000000 is not allowed (allowed: 1 to 4096)" -- \
  "$train_gpt" "$tmp/good.toml" --set model.n_layers=100000000
check eps_as_f32 "optimizer.eps = 1e-300 is not allowed: it is used as an f32, where it would be 0" -- \
  "$train_gpt" "$tmp/good.toml" --set optimizer.eps=1e-300
# ~200 TB of model state: more than any machine has, refused before anything is allocated.
huge=(--set model.n_layers=1000 --set model.d_model=32768)
check too_big_for_memory "good.toml: the run needs at least" "per rank (model state" "lower train.micro_batch" -- \
  "$train_gpt" "$tmp/good.toml" "${huge[@]}"
: >"$tmp/a_file"
check checkpoint_dir_under_file "checkpoint.dir = $tmp/a_file/ck: cannot create it as a directory" -- \
  "$train_gpt" "$tmp/good.toml" --set checkpoint.dir="$tmp/a_file/ck"
ln -s "$tmp/loop_b" "$tmp/loop_a" && ln -s "$tmp/loop_a" "$tmp/loop_b"
check resume_symlink_loop "checkpoint.resume = $tmp/loop_a" "Too many levels of symbolic links" -- \
  "$train_gpt" "$tmp/good.toml" --set checkpoint.resume="$tmp/loop_a"
check dump_grads_with_export "--dump-grads writes the first step's gradients and exits without training" -- \
  "$train_gpt" "$tmp/good.toml" --dump-grads "$tmp/g" --export-weights "$tmp/w"
check nvme_without_dir "zero.offload = \"nvme\" needs zero.offload_dir" -- "$train_gpt" "$tmp/good.toml" --set zero.offload=nvme
check nvme_dir_under_file "zero.offload_dir = $tmp/a_file/nv: cannot create it as a directory" -- \
  "$train_gpt" "$tmp/good.toml" --set zero.offload=nvme --set zero.offload_dir="$tmp/a_file/nv"
# An existing export is never replaced: the first run writes it, the second is refused at the start.
"$train_gpt" "$tmp/good.toml" --export-weights "$tmp/export" >/dev/null 2>&1 </dev/null
check export_dir_holds_export "--export-weights $tmp/export: already holds an export (model.json)" -- \
  "$train_gpt" "$tmp/good.toml" --export-weights "$tmp/export"
check dump_dir_holds_export "--dump-grads $tmp/export: already holds an export (model.json)" -- \
  "$train_gpt" "$tmp/good.toml" --dump-grads "$tmp/export"
mkdir -p "$tmp/user_dir" && echo keep > "$tmp/user_dir/notes.txt"
check export_dir_not_empty "--export-weights $tmp/user_dir: is not empty (it holds notes.txt)" -- \
  "$train_gpt" "$tmp/good.toml" --export-weights "$tmp/user_dir"
[[ $(cat "$tmp/user_dir/notes.txt") == keep && $(ls "$tmp/user_dir") == notes.txt ]] ||
  { failures=$((failures + 1)); echo "FAIL export_dir_not_empty: the user's directory changed"; }
check export_dir_under_file "--export-weights $tmp/a_file/w: cannot create it as a directory" -- \
  "$train_gpt" "$tmp/good.toml" --export-weights "$tmp/a_file/w"
check export_is_checkpoint_dir "--export-weights $tmp/ck_and_export/: is checkpoint.dir" -- \
  "$train_gpt" "$tmp/good.toml" --set checkpoint.dir="$tmp/ck_and_export" --export-weights "$tmp/ck_and_export/"
check config_doc_with_file "--config-doc prints the configuration reference and takes no config file" -- \
  "$train_gpt" --config-doc "$tmp/good.toml"
# A trace file over a file that is not a trace (here the run's own config) is refused, the file kept.
cp "$tmp/good.toml" "$tmp/config_copy.toml"
check trace_over_config "log.trace_file = $tmp/config_copy.toml" "is not a Trellis trace; refusing to replace it" -- \
  "$train_gpt" "$tmp/config_copy.toml" --set log.trace_step=1 --set log.trace_file="$tmp/config_copy.toml"
cmp -s "$tmp/good.toml" "$tmp/config_copy.toml" ||
  { failures=$((failures + 1)); echo "FAIL trace_over_config: the config was changed"; }
# checkpoint.dir naming a checkpoint (a step_X directory) instead of a directory of them: refused,
# with the key that continues it; nothing is written into the checkpoint.
mkdir -p "$tmp/ck/step_00000002" && echo '{}' > "$tmp/ck/step_00000002/manifest.json"
check checkpoint_dir_is_a_checkpoint "checkpoint.dir = $tmp/ck/step_00000002 is itself a checkpoint" \
  "set checkpoint.resume = $tmp/ck/step_00000002 to continue from it" -- \
  "$train_gpt" "$tmp/good.toml" --set checkpoint.dir="$tmp/ck/step_00000002"
[[ $(ls "$tmp/ck/step_00000002") == manifest.json ]] ||
  { failures=$((failures + 1)); echo "FAIL checkpoint_dir_is_a_checkpoint: the checkpoint changed"; }
# Files of the user's inside a checkpoint (notes) are never removed: a checkpoint pruned or replaced
# (by a better validation's best/) loses its own files, and its directory with theirs is renamed to
# NAME.user-files, which the log names.
"$train_gpt" "$tmp/good.toml" --set checkpoint.dir="$tmp/ck_notes" >/dev/null 2>&1
mkdir -p "$tmp/ck_best/best"
echo mine > "$tmp/ck_notes/step_00000001/notes.txt"
echo mine > "$tmp/ck_best/best/notes.txt"
if "$train_gpt" "$tmp/good.toml" --set checkpoint.dir="$tmp/ck_notes" --set train.steps=3 --set checkpoint.every=1 \
  --set checkpoint.keep=1 >"$tmp/out" 2>"$tmp/err" &&
  grep -q "pruned $tmp/ck_notes/step_00000001 -> $tmp/ck_notes/step_00000001.user-files (notes.txt)" "$tmp/out" &&
  [[ ! -e $tmp/ck_notes/step_00000001 && $(cat "$tmp/ck_notes/step_00000001.user-files/notes.txt") == mine ]]
then echo "ok   prune_keeps_user_files"
else failures=$((failures + 1)); echo "FAIL prune_keeps_user_files: $(cat "$tmp/err") $(ls "$tmp/ck_notes"/*)"; fi
if "$train_gpt" "$tmp/good.toml" --set checkpoint.dir="$tmp/ck_best" --set checkpoint.keep_best=true \
  --set log.val_every=1 --set train.steps=2 >"$tmp/out" 2>"$tmp/err" &&
  grep -q "best validation loss .* at step 2" "$tmp/out" && [[ -f $tmp/ck_best/best/manifest.json ]] &&
  grep -q "moved to $tmp/ck_best/best.user-files (notes.txt)" "$tmp/out" &&
  [[ $(cat "$tmp/ck_best/best.user-files/notes.txt") == mine && ! -e $tmp/ck_best/best/notes.txt ]]
then echo "ok   best_keeps_user_files"
else failures=$((failures + 1)); echo "FAIL best_keeps_user_files: $(cat "$tmp/err") $(ls "$tmp/ck_best/best")"; fi
# An empty trace path, and a NUL in a string (which would cut the message short), get a whole line.
check trace_file_empty "good.toml: log.trace_file is empty; log.trace_step = 1 writes its trace there" -- \
  "$train_gpt" "$tmp/good.toml" --set log.trace_step=1 --set log.trace_file=
printf '%s\n[data]\npath = "a\\u0000b"\n' "$good" > "$tmp/nul.toml"
check string_with_nul "nul.toml: data.path holds a NUL character" -- "$train_gpt" "$tmp/nul.toml"
# A weight export whose model.json disagrees with itself (a shape, the padded vocabulary) is refused.
"$train_gpt" "$tmp/good.toml" --export-weights "$tmp/export_edited" >/dev/null 2>&1
python3 -c "import json,sys; p=sys.argv[1]; m=json.load(open(p)); m['params'][1]['shape']=[1,2]; json.dump(m,open(p,'w'))" \
  "$tmp/export_edited/model.json"
check export_shape_edited "export_edited/model.json: its parameter list is not the whole GPT model's" -- \
  "$train_gpt" "$tmp/good.toml" --set model.init_from="$tmp/export_edited"
# An option whose value is missing before the next option says so (not "more than one config file").
check dump_grads_no_dir "--dump-grads: missing value before --set" -- \
  "$train_gpt" "$tmp/good.toml" --dump-grads --set train.steps=2
# A --set replaces the file's value of its key, so a bad value there can be fixed from the command line.
write bad_lr.toml "$good
[optimizer]
lr = \"fast\""
check file_value_named_not_set "bad_lr.toml: optimizer.lr must be a float, got string" -- "$train_gpt" "$tmp/bad_lr.toml"
if "$train_gpt" "$tmp/bad_lr.toml" --set optimizer.lr=0.001 >"$tmp/out" 2>"$tmp/err"; then
  echo "ok   set_replaces_bad_file_value"
else
  failures=$((failures + 1)); echo "FAIL set_replaces_bad_file_value: $(cat "$tmp/err")"
fi

# Under mpirun every rank fails alike; the message comes once (rank 0). mpirun adds its own
# "exited with non-zero status" banner, so count the program's lines instead of all of stderr.
rc=0
timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$train_gpt" "$tmp/heads.toml" \
  >"$tmp/out" 2>"$tmp/err" </dev/null || rc=$?
problems=()
((rc != 0)) || problems+=("exit status 0")
((rc != 124)) || problems+=("timed out (hang)")
n=$(grep -c "^error: " "$tmp/err")
[[ $n == 1 ]] || problems+=("$n 'error:' lines, want 1")
grep -qF "heads.toml: model.n_heads = 5 does not divide model.d_model = 32" "$tmp/err" || problems+=("message missing")
! grep -qE "$crash_banner" "$tmp/err" "$tmp/out" || problems+=("crash banner in the output")
report "mpirun_np2_heads_divide" "${problems[@]+"${problems[@]}"}"

# Failures only some ranks meet must not hang the others: a config that differs between ranks
# (MPMD launch with different --set values), a file missing on one rank, and a combination of
# keys that is not allowed, under 3 ranks. One line, every rank exits non-zero, no hang.
mpi_case() {
  local name=$1 want=$2
  shift 2
  local rc=0
  timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || rc=$?
  problems=()
  ((rc != 0)) || problems+=("exit status 0")
  ((rc != 124)) || problems+=("timed out (hang)")
  n=$(grep -c "^error" "$tmp/err")
  [[ $n == 1 ]] || problems+=("$n 'error' lines, want 1")
  grep -qF "$want" "$tmp/err" || problems+=("message '$want' missing")
  ! grep -qE "$crash_banner" "$tmp/err" "$tmp/out" || problems+=("crash banner in the output")
  report "$name" "${problems[@]+"${problems[@]}"}"
}
mpi_case mpirun_config_differs "the resolved config differs between ranks" \
  -np 1 "$train_gpt" "$tmp/good.toml" --set train.steps=5 : -np 1 "$train_gpt" "$tmp/good.toml" --set train.steps=6
# One rank planning, dumping or exporting while the other trains would wait in its collectives.
mpi_case mpirun_plan_on_one_rank "the command-line options (--plan" \
  -np 1 "$train_gpt" "$tmp/good.toml" --plan : -np 1 "$train_gpt" "$tmp/good.toml"
mpi_case mpirun_export_on_one_rank "differ between ranks" \
  -np 1 "$train_gpt" "$tmp/good.toml" : -np 1 "$train_gpt" "$tmp/good.toml" --export-weights "$tmp/ew_one_rank"
mpi_case mpirun_file_missing_on_one_rank "cannot read config file" \
  -np 1 "$train_gpt" "$tmp/good.toml" : -np 1 "$train_gpt" "$tmp/nope.toml"
# ZeRO stage 1 over two data ranks: each rank writes into checkpoint.dir, so one that does not see
# it (here: another working directory for a relative path) fails at the start, in one line.
mkdir -p "$tmp/wd_a" "$tmp/wd_b"
mpi_case mpirun_checkpoint_dir_not_shared "rank 1 does not see it" \
  -np 1 -wdir "$tmp/wd_a" "$(realpath "$train_gpt")" "$tmp/good.toml" --set zero.stage=1 --set checkpoint.dir=ck : \
  -np 1 -wdir "$tmp/wd_b" "$(realpath "$train_gpt")" "$tmp/good.toml" --set zero.stage=1 --set checkpoint.dir=ck
mpi_case mpirun_np2_too_big_for_memory "this node's memory (2 ranks share" -np 2 "$train_gpt" "$tmp/good.toml" "${huge[@]}"
mpi_case mpirun_np3_zero_reduce_dtype "zero.reduce_dtype = bf16" -np 3 "$train_gpt" "$tmp/zero.toml"
mpi_case mpirun_np2_embedding_grad "zero.embedding_grad = gather_rows needs" \
  -np 2 "$train_gpt" "$tmp/good.toml" --set zero.embedding_grad=gather_rows --set zero.overlap=false
mpi_case mpirun_np2_embedding_grad_zero1 "zero.embedding_grad = gather_rows needs zero.stage = 0" \
  -np 2 "$train_gpt" "$tmp/good.toml" --set zero.embedding_grad=gather_rows --set zero.stage=1

if ((failures > 0)); then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all bad-input cases passed"
