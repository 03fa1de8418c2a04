#!/usr/bin/env bash
# Apply mnn-engine's patches to an MNN 3.6.1 source tree (idempotent: a patch
# already applied is skipped). Used by .ci/run and after unpacking MNN by hand;
# the Termux recipe's mnn package carries the same files (termux-packages
# applies a package folder's *.patch itself).
#   tools/mnn/apply_patches.sh [MNN_SOURCE_DIR]   (default subprojects/MNN)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:-$here/subprojects/MNN}
# The tree remembers what this script applied: a reverse dry run alone cannot
# tell, since a later patch that edits the same lines (0009 after 0002 in
# CPUAttention.cpp) makes an applied patch's reverse fail too.
stamp=$src/.mnn-engine-patches
touch "$stamp"
for p in "$here"/subprojects/packagefiles/MNN/*.patch; do
  name=$(basename "$p")
  if grep -qxF "$name" "$stamp"; then
    echo "already applied: $name"
  elif [ ! -s "$stamp" ] && patch -p1 -R --dry-run -s -f -d "$src" <"$p" >/dev/null 2>&1; then
    echo "already applied: $name"  # a tree patched before the stamp (or by hand)
    echo "$name" >>"$stamp"
  elif patch -p1 --dry-run -s -f -d "$src" <"$p" >/dev/null 2>&1; then
    patch -p1 -s -f -d "$src" <"$p"
    echo "$name" >>"$stamp"
    echo "applied: $name"
  else
    echo "$name does not apply to $src (and it was not applied here): unpack MNN again and rerun" >&2
    exit 1
  fi
done
