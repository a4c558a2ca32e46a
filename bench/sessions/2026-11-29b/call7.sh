#!/usr/bin/env bash
# Session call 7: CUDA + NCCL tests of the new code, GPT-2 1.3B tensor = 2 and pipeline = 2 on two H200s.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export CMAKE_PREFIX_PATH=$PWD/.device-deps/usr LD_LIBRARY_PATH=$PWD/.device-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
echo "=== build $(date +%T)"
cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/build.log 2>&1 && cmake --build build -j32 >> /tmp/build.log 2>&1 || { grep error /tmp/build.log | head; exit 1; }
echo "=== tests $(date +%T)"
(cd build && timeout 100 ctest -j8 -L cuda 2>&1 | grep -E "tests passed|\(Failed\)|Timeout")
timeout 60 mpirun -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/tests/comm_test 2>&1 | grep -E "PASSED|FAILED|tests ran" | head -4
M="--set model.n_layers=24 --set model.d_model=2048 --set model.n_heads=16 --set model.seq_len=1024 --set model.vocab_size=50257 --set data.source=synthetic --set log.every=1 --set log.val_every=0 --set train.precision=bf16 --set train.device=cuda --set train.steps=8"
res() { python3 -c "
import json,statistics as st
r=[json.loads(l) for l in open('$1')]; s=[x for x in r if 'tokens_per_s' in x and x['step']>3]
print('%-28s' % '$2', 'tok/s %.0f' % st.median(x['tokens_per_s'] for x in s), 'step %.1f ms' % st.median(x['step_ms'] for x in s), 'peak rank0 %.1f GiB' % (max(x['peak_mem_bytes'] for x in s)/2**30), 'mfu %.1f%%' % (100*st.median(x.get('mfu',0) for x in s)))" 2>&1 | tail -1; }
one() { tag=$1; shift; CUDA_VISIBLE_DEVICES=0 timeout 70 build/train_gpt examples/configs/tiny.toml $M --set log.metrics_file=/tmp/$tag.jsonl "$@" > /tmp/$tag.log 2>&1 || tail -3 /tmp/$tag.log; res /tmp/$tag.jsonl $tag; }
two() { tag=$1; shift; timeout 80 mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH build/train_gpt examples/configs/tiny.toml $M --set log.metrics_file=/tmp/$tag.jsonl "$@" > /tmp/$tag.log 2>&1 || tail -3 /tmp/$tag.log; res /tmp/$tag.jsonl $tag; }
echo "=== 1.3B tensor parallel, micro-batch 8 $(date +%T)"
one tp1_mb8 --set train.micro_batch=8
two tp2_mb8 --set train.micro_batch=8 --set parallel.tensor=2
two tp2_sp_mb8 --set train.micro_batch=8 --set parallel.tensor=2 --set parallel.sequence_parallel=true
grep -E "tensor parallel|memory per rank" /tmp/tp2_sp_mb8.log | head -2
echo "=== 1.3B pipeline, micro-batch 4, global 32 (m = 8) $(date +%T)"
one pp1_m8 --set train.micro_batch=4 --set train.global_batch=32
two pp2_1f1b_m8 --set train.micro_batch=4 --set train.global_batch=32 --set parallel.pipeline=2 --set parallel.schedule=1f1b
two pp2_int_m8 --set train.micro_batch=4 --set train.global_batch=32 --set parallel.pipeline=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2
grep -E "^pipeline" /tmp/pp2_int_m8.log | head -2
echo "=== done $(date +%T)"
