#!/usr/bin/env bash
# Session call 6: where does a 2-GPU data-parallel step lose its ~6 ms? 350M, mb 16, bf16.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CMAKE_PREFIX_PATH=$PWD/.device-deps/usr LD_LIBRARY_PATH=$PWD/.device-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"; which nsys ncu 2>&1 | head -2; nproc
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/build.log 2>&1 && cmake --build build -j32 >> /tmp/build.log 2>&1 || { grep error /tmp/build.log | head; exit 1; }
M="--set model.n_layers=24 --set model.d_model=1024 --set model.n_heads=16 --set model.seq_len=1024 --set model.vocab_size=50257 --set data.source=synthetic --set train.micro_batch=16 --set train.steps=25 --set log.every=1 --set log.val_every=0 --set train.precision=bf16 --set train.device=cuda"
med() { python3 -c "
import json,sys,statistics as st
r=[json.loads(l) for l in open('$1')]; s=[x for x in r if 'tokens_per_s' in x and x['step']>5]
print('$2', 'tok/s per GPU %.0f' % (st.median(x['tokens_per_s'] for x in s)/${3:-1}), 'step ms %.1f' % st.median(x['step_ms'] for x in s))"; }
run1() { CUDA_VISIBLE_DEVICES=$1 build/train_gpt examples/configs/tiny.toml $M --set log.metrics_file=$2 "${@:3}" > $2.log 2>&1 || tail -3 $2.log; }
ph() { python3 -c "
import json,statistics as st
r=[json.loads(l) for l in open('$1')]; s=[x for x in r if 'phase_ms' in x and x['step']>5]
m=lambda f: st.median(f(x) for x in s)
print('$2', 'step %.1f' % m(lambda x: x['step_ms']), 'schedule %.1f' % m(lambda x: x['phase_ms']['schedule']), 'reductions %.2f' % m(lambda x: x['phase_ms']['reductions']), 'optimizer %.2f' % m(lambda x: x['phase_ms']['optimizer']))"; }
echo "=== solo GPU 0 $(date +%T)"; run1 0 /tmp/s0.jsonl; ph /tmp/s0.jsonl solo_gpu0
echo "=== solo GPU 1 $(date +%T)"; run1 1 /tmp/s1.jsonl; ph /tmp/s1.jsonl solo_gpu1
dp() { mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH "$@" build/train_gpt examples/configs/tiny.toml $M --set log.metrics_file=/tmp/dp.jsonl ${EXTRA:-} > /tmp/dp.log 2>&1 || tail -3 /tmp/dp.log; }
echo "=== DP 2 $(date +%T)"; dp; ph /tmp/dp.jsonl dp2
echo "=== DP 2 overlap off $(date +%T)"; EXTRA="--set zero.overlap=false" dp; ph /tmp/dp.jsonl dp2_nooverlap
echo "=== done $(date +%T)"
