#!/usr/bin/env bash
# Session call 1 (1×H200): the shared parity-test support (tests/cuda/parity_support.h) on a GPU for
# the first time; then the libraries: which cuBLAS/cuDNN the machine's toolkit has against the wheels
# PyTorch runs on, and 1.3B Trellis alone on each (LD_LIBRARY_PATH), alternating, on the same GPU.
set -uo pipefail
cd "$(dirname "$0")/../../.."
source bench/device_env.sh
build_targets train_gpt ops_parity_test vocab_parallel_parity_test
echo "=== parity $(date +%T)"
for t in ops_parity_test vocab_parallel_parity_test; do
  timeout 200 build/tests/$t > "$out/$t.log" 2>&1; echo "$t exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED|Failure" "$out/$t.log" | head -20
done
echo "=== versions $(date +%T)"
sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
python3 -m pip list 2>/dev/null | grep -iE "nvidia-(cublas|cudnn|nccl)"
grep -hE "define CUDNN_(MAJOR|MINOR|PATCHLEVEL) " /usr/local/cuda/include/cudnn_version*.h /usr/include/cudnn_version*.h 2>/dev/null
find "$sp/nvidia" -name "libcublas*.so*" -o -name "libcudnn.so*" 2>/dev/null
cublas_dir=$(dirname "$(find "$sp/nvidia" -name 'libcublasLt.so.13*' | head -1)")
cudnn_dir=$(dirname "$(find "$sp/nvidia" -name 'libcudnn.so.9*' | head -1)")
echo "cublas_dir=$cublas_dir cudnn_dir=$cudnn_dir"
declare -A LIBS=([base]="" [cudnn]="$cudnn_dir" [cublas]="$cublas_dir" [both]="$cublas_dir:$cudnn_dir")
for v in base cudnn cublas both; do
  echo "--- $v"; LD_LIBRARY_PATH=${LIBS[$v]}:$LD_LIBRARY_PATH ldd build/train_gpt | grep -E "cudnn|cublas"
done
echo "=== A/B $(date +%T)"
B="python3 bench/bench_gpt.py --steps 15 --warmup 5 --models 1.3b --micro-batch 16 --skip-torch"
for v in base both cudnn cublas base both; do
  LD_LIBRARY_PATH=${LIBS[$v]}:$LD_LIBRARY_PATH timeout 80 $B --trellis build/train_gpt --out "$out/ab_$v.md" > "$out/ab_$v.log" 2>&1
  echo "$v exit $?"; grep -hE "^\| [0-9]|rror" "$out/ab_$v.md" | head -2
done
echo "=== done $(date +%T)"
