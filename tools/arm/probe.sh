#!/usr/bin/env bash
# Per ARM kernel family MNN dispatches to on phones: which of MNN's kernels a
# generation runs (qemu's gdb stub), and which ops give a token another result
# alone than inside a batch (tools/mnn/row_probe.cpp), under qemu-user.
#
# Usage (as root, from a checkout): tools/arm/probe.sh [FAMILY ...]
#   neon    cortex-a53   ARMv8.0: NEON only (no fp16 arithmetic, no sdot)
#   armv82  cortex-a76   ARMv8.2: fp16 arithmetic and sdot (most phones since 2019)
#   i8mm    cortex-a710  ARMv9.0 with i8mm (MNN's ARMv8.6 kernels; recent big cores)
#   sme2    max,sme-default-vector-length=64
#                        SME2 at a 512-bit streaming vector length (2024+ flagships;
#                        qemu emulates SME2 from 10.1 on), the only length MNN's
#                        SME2 kernels are written for
#   sme2-256 max         SME2 at qemu's and Linux's default 256 bits: patch 0003
#                        leaves MNN's SME2 kernels off there (they compute garbage)
# For each family, model (tiny, smollm2-135m: int4; tiny-int8: int8) and precision (low: fp16
# where the CPU has it, MNN's default; high: fp32), with the switch on as
# mnn-engine loads models (PROBE_CONFIG adds MNN config keys). Uses the
# aarch64 wheel tools/arm/check.sh builds (arm_cross_wheel; built when
# missing). Results: build/arm/probe/FAMILY/ (MODEL-PRECISION.txt: one line
# per op, "first_diff ..." last; kernels.txt; cpu.txt; pytest.log) and their
# summary, build/arm/probe/summary.json.
# Then, per family, the exactness tests under that CPU (PROBE_TESTS, default
# below: rows alone against every batch split, the load-time checks, int4
# speculation against plain decoding, the prompt cache against fresh
# prefills), bounded by PROBE_TEST_TIMEOUT seconds; PROBE_TESTS= skips them,
# PROBE_ONLY_TESTS=1 runs only them, into pytest-only.log (the probe's and the stub's
# results and the full run's pytest.log kept).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
MODELS=${MNN_ENGINE_TEST_MODELS:-$HOME/.cache/mnn-engine/test-models/v1}
GDB_PORT=${ARM_GDB_PORT:-1236}
PROBE_CONFIG=${PROBE_CONFIG:-}
PROBE_TESTS=${PROBE_TESTS-"tests/runtime/test_batch_exactness.py::test_rows_are_batch_independent[tiny-low] \
tests/runtime/test_batch_exactness.py::test_rows_are_batch_independent_past_an_attention_block \
tests/runtime/test_load_checks.py \
tests/runtime/test_speculative.py::test_batched_verification_in_int4_is_plain_decoding \
tests/runtime/test_prompt_cache.py::test_greedy_outputs_with_the_cache_equal_those_without[tiny] \
tests/runtime/test_prompt_cache.py::test_turns_reuse_the_history"}
PROBE_TEST_TIMEOUT=${PROBE_TEST_TIMEOUT:-3600}
declare -A CPU=([neon]=cortex-a53 [armv82]=cortex-a76 [i8mm]=cortex-a710 [sme2]="max,sme-default-vector-length=64"
  [sme2-256]=max)
if [ "$#" -gt 0 ]; then FAMILIES=("$@"); else FAMILIES=(neon armv82 i8mm sme2 sme2-256); fi
OUT=$ROOT/build/arm/probe
VENV=${PROBE_VENV:-/opt/venv-probe} # another venv (and row_probe) per concurrent run
PROBE=/opt/row_probe-${VENV##*/}
# shellcheck source=tools/arm/root.sh
. tools/arm/root.sh

arm_root
arm_qemu
trap arm_root_unmount EXIT
# shellcheck disable=SC2119  # no extra mounts
arm_root_mount
# QEMU_CPU goes inside env -i: each exec starts a new qemu, which reads it from the environment;
# PROBE_GDB becomes the program's QEMU_GDB (not env's: env would wait for the debugger itself)
in_root() { chroot "$CHROOT" /usr/bin/env -i HOME=/root PATH="$VENV/bin:/usr/bin:/bin" ${QEMU_CPU:+QEMU_CPU=$QEMU_CPU} \
  MNN_ENGINE_TEST_MODELS=/models PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt \
  ${PROBE_GDB:+QEMU_GDB=$PROBE_GDB} "$@"; }

wheel=$(ls "$CACHE"/cross-source/dist/mnn_engine-*linux_aarch64.whl 2>/dev/null || true)
[ -n "$wheel" ] || { mkdir -p "$OUT"; wheel=$(arm_cross_wheel "$OUT/cross-build.log"); }
in_root /bin/sh -c "test -x $VENV/bin/python || python3 -m venv $VENV"
cp "$wheel" "$CHROOT/tmp/"
in_root "$VENV/bin/pip" install -q --no-deps --force-reinstall "/tmp/$(basename "$wheel")"
if [ -n "$PROBE_TESTS" ]; then # the tests' dependencies (the wheel's [test] extra) and the checkout's tests
  in_root "$VENV/bin/pip" install -q "/tmp/$(basename "$wheel")[test]"
  rm -rf "$CHROOT/work/mnn-engine-${VENV##*/}" && mkdir -p "$CHROOT/work/mnn-engine-${VENV##*/}"
  git ls-files -co --exclude-standard -z | tar --null -T - -c | tar -x -C "$CHROOT/work/mnn-engine-${VENV##*/}"
fi
libdir=$(dirname "$(ls "$CHROOT$VENV"/lib/python3*/site-packages/.mnn_engine.mesonpy.libs/libMNN.so)")
CXX=aarch64-linux-gnu-g++ RPATH=${libdir#"$CHROOT"} tools/mnn/build_row_probe.sh "$libdir" "$CHROOT$PROBE" \
  "$CACHE/cross-source/src/subprojects/MNN" >/dev/null
mkdir -p "$CHROOT/models"
for model in tiny tiny-int8 tiny-scripted smollm2-135m; do
  # tiny-int8 is built with the default models; built here when it is missing
  [ -d "$MODELS/$model" ] || python3 tools/models/build_test_models.py "$model"
  [ -d "$CHROOT/models/$model" ] || cp -r "$MODELS/$model" "$CHROOT/models/"
done
command -v gdb-multiarch >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q gdb-multiarch >/dev/null
mkdir -p "$OUT"
mapfile -t KERNELS < <(nm --defined-only "$libdir/libMNN.so" | awk '$2 ~ /^[tT]$/ {print $3}' |
  grep -E '^(MNN|_MNN|Arm82|ARM82|DynamicQuan)[A-Za-z0-9_]*(Gemm|MatMul|Matmul|Quan)' | sort -u)
{
  printf 'break %s\n' "${KERNELS[@]}"
  # shellcheck disable=SC2016  # $pc and $_hit_bpnum are gdb's
  printf 'commands 2-%d\nsilent\ninfo symbol $pc\ndisable $_hit_bpnum\ncontinue\nend\ncontinue\nquit\n' \
    "$((${#KERNELS[@]} + 1))"
} >"$OUT/kernels.gdb"

for family in "${FAMILIES[@]}"; do
  cpu=${CPU[$family]:?unknown family $family (neon, armv82, i8mm, sme2, sme2-256)}
  dir=$OUT/$family
  mkdir -p "$dir"
  echo "$QEMU_VERSION -cpu $cpu" >"$dir/cpu.txt"
  QEMU_CPU=$cpu chroot "$CHROOT" grep -m1 Features /proc/cpuinfo >>"$dir/cpu.txt"
  if [ -z "${PROBE_ONLY_TESTS:-}" ]; then
    for model in tiny tiny-int8 smollm2-135m; do
      for precision in low high; do
        config="{\"batch_independent_rows\": true, \"precision\": \"$precision\", \"thread_num\": 1${PROBE_CONFIG:+, $PROBE_CONFIG}}"
        printf '%s %s %s: ' "$family" "$model" "$precision"
        QEMU_CPU=$cpu in_root "$PROBE" "/models/$model/config.json" "$config" 8 20 >"$dir/$model-$precision.txt" 2>&1 || true
        tail -1 "$dir/$model-$precision.txt"
      done
    done
    # the kernels a short generation runs (int4, precision low as mnn-engine's default), first use each:
    # a breakpoint on every MNN GEMM, matmul and dynamic-quantisation kernel of the library's .symtab (our
    # build does not strip it), each printing its name once and disabling itself
    QEMU_CPU=$cpu PROBE_GDB=$GDB_PORT in_root "$PROBE" /models/smollm2-135m/config.json \
      '{"batch_independent_rows": true, "thread_num": 1}' 4 8 >/dev/null 2>&1 &
    for _ in $(seq 120); do ss -ltn | grep -q ":$GDB_PORT " && break; sleep 1; done
    timeout 1800 gdb-multiarch -q -batch -ex "set sysroot $CHROOT" -ex "set pagination off" -ex "set confirm off" \
      -ex "target remote :$GDB_PORT" -ex "catch load libMNN.so" -ex continue -x "$OUT/kernels.gdb" \
      "$CHROOT$PROBE" 2>&1 | sed -nE 's/^([A-Za-z0-9_]+)( \+ [0-9]+)? in section .*/\1/p' >"$dir/kernels.txt" || true
    wait || true
    echo "$family kernels: $(tr '\n' ' ' <"$dir/kernels.txt")"
  fi
  if [ -n "$PROBE_TESTS" ]; then
    log=pytest${PROBE_ONLY_TESTS:+-only}.log # a tests-only run keeps the full run's log
    # shellcheck disable=SC2086  # PROBE_TESTS is a list of test ids
    QEMU_CPU=$cpu in_root /bin/sh -c "cd /work/mnn-engine-${VENV##*/} && timeout $PROBE_TEST_TIMEOUT $VENV/bin/pytest -q \
      -p no:cacheprovider $PROBE_TESTS" >"$dir/$log" 2>&1 || true
    echo "$family tests: $(grep -E 'passed|failed|skipped' "$dir/$log" | tail -1 ||
      echo "stopped by the ${PROBE_TEST_TIMEOUT}s bound after $(head -1 "$dir/$log")")"
  fi
done

python3 - "$OUT" "${FAMILIES[@]}" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
for family in sys.argv[2:]:  # the families of this run replace theirs; the others' stay
    d = out / family
    runs = {}
    for f in sorted(d.glob("*-*.txt")):
        lines = f.read_text().splitlines()
        runs[f.stem] = {"first_diff": next((l for l in reversed(lines) if l.startswith("first_diff")), "no result"),
                        "differing_ops": [l.split()[1] + " " + l.split()[2] for l in lines if " DIFF " in l]}
    tests, failed = {}, []
    for log in sorted(d.glob("pytest*.log")):  # pytest.log: the full run's; pytest-only.log: a tests-only run's
        lines = log.read_text().splitlines()
        tests[log.stem] = next((l for l in reversed(lines) if "passed" in l or "failed" in l),
                               f"stopped by the time bound: {lines[0]}" if lines else "no output")
        failed += [l for l in lines if l.startswith("FAILED")]
    summary[family] = {"cpu": (d / "cpu.txt").read_text().splitlines()[0], "runs": runs,
                       # a tests-only run of a family never probed in this tree has no kernels.txt
                       "kernels": (d / "kernels.txt").read_text().split() if (d / "kernels.txt").exists() else [],
                       "tests": tests,  # {} where none ran
                       "failed": failed}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps({f: {k: v["first_diff"] for k, v in s["runs"].items()} for f, s in summary.items()}, indent=1))
PY
