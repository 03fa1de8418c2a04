#!/usr/bin/env bash
# Apply mnn-engine's patches to an MNN 3.6.1 source tree (idempotent: a patch
# already applied is skipped). Used by .ci/run and after unpacking MNN by hand;
# the Termux recipe's mnn package carries the same files (termux-packages
# applies a package folder's *.patch itself).
#   tools/mnn/apply_patches.sh [MNN_SOURCE_DIR]   (default subprojects/MNN)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:-$here/subprojects/MNN}
for p in "$here"/subprojects/packagefiles/MNN/*.patch; do
  if patch -p1 -R --dry-run -s -f -d "$src" <"$p" >/dev/null 2>&1; then
    echo "already applied: $(basename "$p")"
  else
    patch -p1 -s -f -d "$src" <"$p"
    echo "applied: $(basename "$p")"
  fi
done
