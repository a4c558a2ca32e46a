#!/usr/bin/env bash
# Session call 2 (2×H200): where the time goes now. Per-op profiles of 1.3B and 350M (one per GPU, at
# the same time), then data = 2 at 350M (ZeRO stages 0 and 1, Trellis only) and tensor = 2 at 1.3B,
# micro-batch 8, with and without sequence parallelism, against one GPU.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root=$(cd .. && pwd)
deps=$root/.device-deps; [[ -d $deps ]] || deps=$PWD/.device-deps
[[ -d third_party ]] || ln -sfn "$root/third_party" third_party
export CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
  cmake --build build -j32 >> "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -20; exit 1; }
prof() {  # gpu, name, then --set overrides on bench/profile_124m.toml
  local gpu=$1 name=$2; shift 2
  CUDA_VISIBLE_DEVICES=$gpu timeout 100 build/train_gpt bench/profile_124m.toml --set log.profile_ops=true --set train.steps=6 "$@" \
    > "$out/profile_$name.log" 2>&1; echo "profile $name exit $?"
}
echo "=== profiles $(date +%T)"
prof 0 1.3b --set model.n_layers=24 --set model.n_heads=16 --set model.d_model=2048 --set train.micro_batch=16 &
prof 1 350m --set model.n_layers=24 --set model.n_heads=16 --set model.d_model=1024 --set train.micro_batch=16
wait
for n in 1.3b 350m; do echo "--- $n"; grep -E "^step" "$out/profile_$n.log" | tail -1 | cut -c1-160; sed -n '/per-op device time/,$p' "$out/profile_$n.log" | head -36; done

res() { python3 -c "
import json,statistics as st
r=[json.loads(l) for l in open('$1')]; s=[x for x in r if 'tokens_per_s' in x and x['step']>3]
ph=lambda k: st.median(x.get('phase_ms',{}).get(k,0) for x in s)
print('%-24s' % '$2', 'tok/s %.0f' % st.median(x['tokens_per_s'] for x in s), 'step %.1f ms' % st.median(x['step_ms'] for x in s),
      'sched %.1f opt %.1f' % (ph('schedule'), ph('optimizer')), 'peak %.1f GiB' % (max(x['peak_mem_bytes'] for x in s)/2**30))" 2>&1 | tail -1; }
G="--set data.source=random --set log.every=1 --set log.val_every=0 --set train.precision=bf16 --set train.device=cuda"
one() { tag=$1; shift; CUDA_VISIBLE_DEVICES=0 timeout 80 build/train_gpt bench/profile_124m.toml $G --set log.metrics_file=$out/$tag.jsonl "$@" > $out/$tag.log 2>&1 || tail -3 $out/$tag.log; res $out/$tag.jsonl $tag; }
two() { tag=$1; shift; timeout 90 mpirun --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/train_gpt bench/profile_124m.toml $G --set log.metrics_file=$out/$tag.jsonl "$@" > $out/$tag.log 2>&1 || tail -3 $out/$tag.log; res $out/$tag.jsonl $tag; }
M350="--set model.n_layers=24 --set model.n_heads=16 --set model.d_model=1024 --set train.micro_batch=16 --set train.steps=20"
echo "=== 350M data = 2 $(date +%T)"
one dp1 $M350
two dp2_z0 $M350 --set zero.stage=0
two dp2_z1 $M350 --set zero.stage=1
M13="--set model.n_layers=24 --set model.n_heads=16 --set model.d_model=2048 --set train.micro_batch=8 --set train.steps=10"
echo "=== 1.3B tensor = 2 $(date +%T)"
one tp1 $M13
two tp2 $M13 --set parallel.tensor=2
two tp2_sp $M13 --set parallel.tensor=2 --set parallel.sequence_parallel=true
echo "=== done $(date +%T)"
