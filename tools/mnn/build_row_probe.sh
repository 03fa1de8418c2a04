#!/usr/bin/env bash
# Build tools/mnn/row_probe.cpp against a libMNN and the MNN sources' headers.
#   tools/mnn/build_row_probe.sh LIBMNN_DIR OUT [MNN_SOURCE_DIR]
# CXX picks the compiler (aarch64-linux-gnu-g++ for the arm64 root); RPATH
# where the probe finds libMNN at run time (default LIBMNN_DIR).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
lib=${1:?the directory of libMNN.so}
out=${2:?where the probe goes}
src=${3:-$here/subprojects/MNN}
"${CXX:-g++}" -std=c++17 -O1 -I "$src/include" -I "$src/transformers/llm/engine/include" \
  "$here/tools/mnn/row_probe.cpp" -L "$lib" -lMNN -Wl,-rpath,"${RPATH:-$lib}" -o "$out"
echo "$out"
