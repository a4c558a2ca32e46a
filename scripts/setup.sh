#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Trellis needs to build and test, if any are missing.
# Uses sudo only when not root. CUDA (nvcc, cuBLAS, NCCL, cuDNN) is optional and not installed
# here; where nvcc and cuDNN are present, the header-only cuDNN frontend is fetched from PyPI
# (scripts/get_cudnn_frontend.sh) for cuDNN's fused attention.
set -euo pipefail

packages=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libtomlplusplus-dev
          libgtest-dev libopenblas-dev python3 python3-pip)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
else
  sudo=()
  if [[ $(id -u) != 0 ]]; then sudo=(sudo); fi
  echo "setup: installing ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

cuda=/usr/local/cuda
if { command -v nvcc > /dev/null || [[ -x $cuda/bin/nvcc ]]; } && [[ -f $cuda/include/cudnn.h || -f /usr/include/cudnn.h ]]; then
  "$(dirname "$0")/get_cudnn_frontend.sh" ||
    echo "setup: could not fetch the cuDNN frontend headers; attention will use Trellis's own kernels"
fi
