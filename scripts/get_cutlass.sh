#!/usr/bin/env bash
# Unpacks the header-only CUTLASS (NVIDIA's CUDA C++ GEMM templates; Trellis builds the MLP's
# GELU-fused GEMMs for Hopper from them) from its PyPI wheel (nvidia-cutlass, whose
# cutlass_library/source/include holds the C++ headers) into third_party/cutlass, where CMake finds it.
# Optional: without it those GEMMs use cuBLASLt's epilogues. Needs python3 with pip.
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.2.0.0
dest=third_party/cutlass
if [[ -f $dest/include/cutlass/cutlass.h ]]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps "nvidia-cutlass==$version" -d "$tmp"
python3 - "$tmp" "$dest" <<'PY'
import glob, os, shutil, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.startswith(prefix)]
    z.extractall(sys.argv[1], names)
shutil.rmtree(os.path.join(sys.argv[2], "include"), ignore_errors=True)
os.makedirs(sys.argv[2], exist_ok=True)
shutil.move(os.path.join(sys.argv[1], prefix), os.path.join(sys.argv[2], "include"))
PY
echo "CUTLASS $version headers in $dest/include"
