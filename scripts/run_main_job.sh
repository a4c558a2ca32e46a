#!/usr/bin/env bash
# Builds train_gpt and trains the tiny example model: on the GPU when there is one, else on the CPU
# (the config says train.device = "auto"). Extra arguments go to train_gpt, e.g. --set train.steps=50.
# TRELLIS_CUDA=AUTO|ON|OFF (default AUTO) and TRELLIS_BUILD_DIR (default build) as in test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cuda_env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

build=${TRELLIS_BUILD_DIR:-build}
cmake -S . -B "$build" -DTRELLIS_CUDA="${TRELLIS_CUDA:-AUTO}"
cmake --build "$build" -j"$(nproc)" --target train_gpt
"$build/train_gpt" examples/configs/tiny.toml "$@"
