#!/usr/bin/env bash
# Unpacks the header-only cuDNN frontend (NVIDIA's C++ API for cuDNN graphs; Trellis uses it for
# cuDNN's fused attention) from its PyPI wheel into third_party/cudnn-frontend, where CMake finds it.
# Optional: without it a CUDA build uses its own attention kernels. Needs python3 with pip.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.32.0
dest=third_party/cudnn-frontend
if [[ -f $dest/include/cudnn_frontend.h ]]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$version" -d "$tmp"
python3 - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])
PY
echo "cuDNN frontend $version headers in $dest/include"
