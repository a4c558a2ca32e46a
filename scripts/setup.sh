#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages Trellis needs to build and test, if any are missing.
# Uses sudo only when not root. CUDA (nvcc, cuBLAS, NCCL) is optional and not installed here.
set -euo pipefail

packages=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libtomlplusplus-dev
          libgtest-dev libopenblas-dev python3)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
  exit 0
fi

sudo=()
if [[ $(id -u) != 0 ]]; then sudo=(sudo); fi
echo "setup: installing ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
