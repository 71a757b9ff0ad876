#!/usr/bin/env bash
# Build llama.cpp's llama-server and llama-cli for the CPU, OUTSIDE the clone, once (memsight's live llama.cpp
# checks and tests/planner/test_llamacpp_run.py use them; they skip, saying why, where the binaries are absent).
#
# The source is the llama.cpp that llama-cpp-python 0.3.36 vendors (ggml-org/llama.cpp@0c1e57098, its
# CHANGELOG), taken from PyPI as an sdist: nothing is fetched from anywhere else and nothing lands in the repo.
#
#   bash scripts/llamacpp_build.sh            # -> $MEMSIGHT_LLAMACPP_DIR (default /work/cache/llamacpp)/bin
#
# Needs cmake, a C++17 compiler and pip. Runs under nice with 2 jobs (JOBS=N to change).
set -euo pipefail
VERSION=0.3.36
DEST=${MEMSIGHT_LLAMACPP_DIR:-/work/cache/llamacpp}
JOBS=${JOBS:-2}
PYTHON=${PYTHON:-python3}
mkdir -p "$DEST"
cd "$DEST"
if [ ! -f "llama_cpp_python-$VERSION.tar.gz" ]; then
    "$PYTHON" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d .
fi
[ -d "llama_cpp_python-$VERSION" ] || tar xzf "llama_cpp_python-$VERSION.tar.gz"
SRC="$DEST/llama_cpp_python-$VERSION/vendor/llama.cpp"
nice -n 19 cmake -S "$SRC" -B "$DEST/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=OFF -DGGML_CPU_ALL_VARIANTS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
time nice -n 19 cmake --build "$DEST/build" --target llama-server llama-cli -j "$JOBS"
mkdir -p "$DEST/bin"
cp "$DEST/build/bin/llama-server" "$DEST/build/bin/llama-cli" "$DEST/bin/"
"$DEST/bin/llama-cli" --version 2>&1 | tail -2
echo "llama.cpp binaries: $DEST/bin"
