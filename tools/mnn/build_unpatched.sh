#!/usr/bin/env bash
# Build libMNN as our default build does, but without some of our patches: the
# baseline a patch's cost is measured against (tools/bench/patch_cost.py).
#   tools/mnn/build_unpatched.sh PATCH_PREFIX [BUILD_DIR] [OUT]
# PATCH_PREFIX: the patches to leave out (e.g. 0002; with it every patch whose
# description says "Needs: 0002"); BUILD_DIR: a configured
# default build whose MNN CMake options are reused, so both libraries differ
# by those patches only (default build/ci-default); OUT: where the tree, the build
# and OUT/lib/libMNN.so go (default build/unpatched-PATCH_PREFIX). MNN comes
# from the vendored tarball ($MNN_TARBALL, default ../shared/vendor/MNN-3.6.1.tar.gz).
# $MNN_EXTRA_DEFINES (e.g. "-DMNN_AVX512=OFF") is passed to CMake after the
# default build's options, so it overrides them: a PATCH_PREFIX that names no
# patch (e.g. none) then builds the patched library with other kernels.
# Run the patched engine against it with LD_LIBRARY_PATH=OUT/lib (the
# extension finds libMNN through its RUNPATH, which that overrides).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
leave_out=${1:?the patch prefix to leave out, e.g. 0002}
build_dir=${2:-$here/build/ci-default}
out=${3:-$here/build/unpatched-$leave_out}
tarball=${MNN_TARBALL:-$here/../shared/vendor/MNN-3.6.1.tar.gz}
cache=$(find "$build_dir" -path '*MNN/__CMake_build/CMakeCache.txt' | head -1)
[ -n "$cache" ] || { echo "no configured MNN build under $build_dir (pip install -e . -Cbuild-dir=$build_dir first)" >&2; exit 1; }

rm -rf "$out/src"
mkdir -p "$out/src" "$out/build" "$out/lib"
tar -xzf "$tarball" -C "$out/src" --strip-components=1
# a patch built on another names it in its description ("Needs: 0002 ..."): it is left out with it
for p in "$here"/subprojects/packagefiles/MNN/*.patch; do
  name=$(basename "$p")
  if [[ "$name" == "$leave_out"* ]]; then
    echo "left out: $name"
  elif sed '/^--- /q' "$p" | grep -qE "^Needs: (.* )?$leave_out( |$)"; then
    echo "left out: $name (it needs $leave_out)"
  else
    patch -p1 -s -f -d "$out/src" <"$p" && echo "applied: $name"
  fi
done
# the default build's own MNN_* / LLM_* options, as meson's CMake module set them
mapfile -t defines < <(grep -E '^(MNN|LLM)_[A-Z0-9_]+:(BOOL|STRING)=' "$cache" | sed -E 's/^([^:]+):[A-Z]+=(.*)$/-D\1=\2/')
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
read -r -a extra <<<"${MNN_EXTRA_DEFINES:-}"  # words, after the defaults: they override them
cmake -S "$out/src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${defines[@]}" "${extra[@]}" >"$out/cmake.log"
ninja -C "$out/build" MNN >"$out/build.log"
cp "$out/build/libMNN.so" "$out/lib/"
echo "$out/lib/libMNN.so"
