# Sourced by a session script on the GPU machine (bench/sessions/*/callN.sh), from the repository
# root: sets $out (the device tool's $OUT, else ./gpu-out), the NCCL/MPI environment, the TOML++
# that ../shared/device/prepare-deps.sh put in .device-deps (beside the checkout, or in it), links
# third_party (the cuDNN frontend headers) from beside the checkout when it is not here, and defines
# build_trellis (CUDA build for Hopper into build/, log in $out/build.log; exits on failure) and
# build_targets (the same for some targets).
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
_root=$(cd .. && pwd)
_deps=$_root/.device-deps
[[ -d $_deps ]] || _deps=$PWD/.device-deps
[[ -d third_party ]] || ln -sfn "$_root/third_party" third_party
export CMAKE_PREFIX_PATH=$_deps/usr LD_LIBRARY_PATH=$_deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}

# build_targets TARGET...: the CUDA build of those targets (build_trellis: all of them; train_gpt
# alone takes ~1 minute).
build_targets() {
  echo "=== build $* $(date +%T)"
  cmake -S . -B build -G Ninja -DTRELLIS_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/build.log" 2>&1 &&
    cmake --build build -j32 --target "$@" >> "$out/build.log" 2>&1 || { grep -E "error|Error" "$out/build.log" | head -20; exit 1; }
}

build_trellis() { build_targets all; }
