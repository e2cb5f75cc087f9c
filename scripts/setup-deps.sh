#!/usr/bin/env bash
# Installs every dependency Loom needs from Debian 12's packages. Idempotent and
# non-interactive; run as root (or through sudo) on a fresh machine.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools
  flatbuffers-compiler libflatbuffers-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libzip-dev zlib1g-dev libzstd-dev
  libgtest-dev libgmock-dev
  openmpi-bin libopenmpi-dev
  python3 python3-numpy python3-onnx
  clang-19 libclang-rt-19-dev  # fuzz/run.sh: libFuzzer, ASan, UBSan
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup-deps: all ${#packages[@]} packages already installed"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup-deps: CUDA toolkit found; the CUDA backend will be built"
else
  echo "setup-deps: no CUDA toolkit; building without the CUDA backend"
fi
