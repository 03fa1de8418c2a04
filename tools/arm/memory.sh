#!/usr/bin/env bash
# Peak resident memory of the phone's path: one generation of the
# Qwen3-0.6B-shape model (int4) in the arm64 root under qemu-user, measured
# from inside the guest by tools/arm/memory_guest.py (the guest's pages apart
# from qemu's own).
#
# Usage (as root, from a checkout, after tools/arm/probe.sh installed the
# aarch64 wheel in /opt/venv-probe): tools/arm/memory.sh [KEY=JSON ...]
#   ARM_CPU      qemu CPU model (default cortex-a76: ARMv8.2 fp16, most phones)
#   MODEL        a test model's name (default qwen3-0.6b-shape)
#   the arguments: memory_guest.py's (--gen N, --prompt-tokens N) and MNN config
#                overrides passed to Llm (e.g. precision='"high"')
# Result: build/arm/memory/result-CPU[-overrides].json, and the run's entry in
# bench-results/arm_memory.json (docs/benchmarks.md's phone-memory table,
# tools/bench/report.py)
set -euo pipefail
cd "$(dirname "$0")/../.."
MODELS=${MNN_ENGINE_TEST_MODELS:-$HOME/.cache/mnn-engine/test-models/v1}
ARM_CPU=${ARM_CPU:-cortex-a76}
MODEL=${MODEL:-qwen3-0.6b-shape}
VENV=/opt/venv-probe
OUT=build/arm/memory
# shellcheck source=tools/arm/root.sh
. tools/arm/root.sh

arm_root
arm_qemu
trap arm_root_unmount EXIT
# shellcheck disable=SC2119  # no extra mounts
arm_root_mount
[ -x "$CHROOT$VENV/bin/python" ] || { echo "no $VENV in the root: run tools/arm/probe.sh first" >&2; exit 2; }
mkdir -p "$CHROOT/models" "$OUT"
[ -d "$CHROOT/models/$MODEL" ] || cp -r "$MODELS/$MODEL" "$CHROOT/models/"
cp tools/arm/memory_guest.py "$CHROOT/opt/memory_guest.py"
name=$ARM_CPU
[ "$MODEL" = qwen3-0.6b-shape ] || name+=-$MODEL
for arg in "$@"; do name+=-$(printf '%s' "$arg" | tr -c 'A-Za-z0-9_=.-' _); done
chroot "$CHROOT" /usr/bin/env -i HOME=/root PATH="$VENV/bin:/usr/bin:/bin" QEMU_CPU="$ARM_CPU" \
  "$VENV/bin/python" /opt/memory_guest.py "/models/$MODEL" "$@" | tee "$OUT/result-$name.json.tmp"
{ printf '{"qemu": "%s -cpu %s", "date": "%s", "commit": "%s",\n "result": ' "$QEMU_VERSION" "$ARM_CPU" \
  "$(date +%Y-%m-%d)" "$(git rev-parse --short HEAD)"; cat "$OUT/result-$name.json.tmp"; echo '}'; } >"$OUT/result-$name.json"
rm "$OUT/result-$name.json.tmp"
python3 - "$OUT/result-$name.json" "$name" <<'PY'
import json, os, platform, sys
from pathlib import Path
run, name = json.loads(Path(sys.argv[1]).read_text()), sys.argv[2]
path = Path("bench-results/arm_memory.json")
data = json.loads(path.read_text()) if path.exists() else {"runs": {}}
data["machine"] = {"cpu": "aarch64 under " + run["qemu"], "cores": os.cpu_count(), "system": platform.system(),
                   "python": run["result"]["python"], "date": run["date"]}
data["runs"][name] = run
path.write_text(json.dumps(data, indent=2) + "\n")
PY
