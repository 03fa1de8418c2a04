#!/usr/bin/env bash
# Replay the Termux recipes (packaging/termux/mnn, then python-mnn-engine on
# top of it) for an aarch64 cross build, step by step as termux-packages'
# build-package.sh runs them, and check what they produce.
#
# Usage (as root, from a checkout): tools/termux/replay.sh
#
# What is the same as on Termux's builder: the recipes' own variables and step
# functions; termux-packages' cmake and meson invocations and its compiler and
# linker flags (-Oz, --as-needed, RUNPATH $PREFIX/lib ...); a meson cross file
# written the way termux_setup_meson writes it, with the recipe's python line;
# crossenv as the cross Python; $TERMUX_PREFIX at /data/data/com.termux/files/usr
# (a bind mount in a private mount namespace); subpackages split by their
# TERMUX_SUBPKG_INCLUDE.
# What differs: Debian's g++-aarch64-linux-gnu and glibc stand in for the NDK's
# clang and bionic (termux-packages' "glibc" package flavour, so CMake sees
# Linux, not Android); the arm64 Debian root of tools/arm/root.sh stands in for
# the target Python (3.11) that crossenv needs; sources come from the
# vendored MNN tarball (its git-archive header gives the commit the recipe
# checks) and from this checkout; downloads from ../shared/vendor or a local
# git mirror (MNN_ENGINE_KLEIDIAI_GIT), checked against the recipe's sha256.
#
# Afterwards the staged packages are installed into the arm64 root, where
# mnn-engine is imported and generates under qemu-aarch64 -cpu max with each
# backend subpackage present or absent. Results: build/termux-replay/result.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
if [ -z "${REPLAY_IN_NAMESPACE:-}" ]; then
	exec unshare --mount --propagation private env REPLAY_IN_NAMESPACE=1 "$0" "$@"
fi
# shellcheck source=tools/arm/root.sh
. tools/arm/root.sh
WORK=${MNN_ENGINE_REPLAY_WORK:-$HOME/.cache/mnn-engine/termux-replay}
OUT=$ROOT/build/termux-replay
COMMIT=$(git rev-parse HEAD) # the tree the run starts from (HEAD may move meanwhile)
VENDOR=${MNN_ENGINE_VENDOR:-$ROOT/../shared/vendor}
MODELS=${MNN_ENGINE_TEST_MODELS:-$HOME/.cache/mnn-engine/test-models/v1}
mkdir -p "$WORK" "$OUT"
step() { printf '\n== %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }

step "host tools: aarch64 cross compiler, cmake, ninja, crossenv"
command -v aarch64-linux-gnu-g++ >/dev/null ||
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q g++-aarch64-linux-gnu >/dev/null
command -v ccache >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q ccache >/dev/null
if [ ! -x "$WORK/tools/bin/python" ]; then
	python3 -m venv "$WORK/tools"
	"$WORK/tools/bin/pip" install -q crossenv==1.6.2 cmake ninja
fi
export PATH=$WORK/tools/bin:$PATH
arm_root
trap arm_root_unmount EXIT

# --- the Termux build environment (termux_setup_toolchain, glibc flavour) ---
export TERMUX_ARCH=aarch64 TERMUX_REAL_ARCH=aarch64 TERMUX_PACKAGE_LIBRARY=glibc
export TERMUX_PREFIX=/data/data/com.termux/files/usr TERMUX_PKG_API_LEVEL=24
export TERMUX_ANDROID_HOME=/data/data/com.termux/files/home  # scripts/properties.sh
export TERMUX_ON_DEVICE_BUILD=false TERMUX_DEBUG_BUILD=false TERMUX_CMAKE_BUILD=Ninja
export TERMUX_PYTHON_VERSION=3.11 TERMUX_HOST_PLATFORM=aarch64-linux-gnu
export TERMUX_MAKE_PROCESSES=${TERMUX_MAKE_PROCESSES:-$(nproc)}
export TERMUX_COMMON_CACHEDIR=$WORK/cache
export TERMUX_STANDALONE_TOOLCHAIN=/usr
export CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++ LD=aarch64-linux-gnu-ld AR=aarch64-linux-gnu-ar
export RANLIB=aarch64-linux-gnu-ranlib STRIP=aarch64-linux-gnu-strip PKG_CONFIG=pkg-config
export CFLAGS="-fstack-protector-strong -Oz" CXXFLAGS="-fstack-protector-strong -Oz"
export CPPFLAGS="-isystem$TERMUX_PREFIX/include"
export LDFLAGS="-L$TERMUX_PREFIX/lib -Wl,-rpath=$TERMUX_PREFIX/lib -Wl,--enable-new-dtags -Wl,--as-needed -Wl,-z,relro,-z,now"
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
export CCACHE_DIR=$HOME/.cache/mnn-engine/ccache-aarch64 CCACHE_BASEDIR=$WORK CCACHE_NOHASHDIR=1

# $TERMUX_PREFIX is a fresh directory bind-mounted at Termux's path (only in
# this mount namespace), so the RUNPATHs and the installed paths are Termux's.
rm -rf "$WORK/prefix" "$WORK/packages"
mkdir -p "$WORK/prefix" "$WORK/packages" "$TERMUX_COMMON_CACHEDIR" "$TERMUX_PREFIX"
mount --bind "$WORK/prefix" "$TERMUX_PREFIX"
mkdir -p "$TERMUX_PREFIX/lib" "$TERMUX_PREFIX/include/aarch64-linux-gnu" "$TERMUX_PREFIX/tmp"
# Debian's python3.11 headers are multiarch: pyconfig.h includes
# <aarch64-linux-gnu/python3.11/pyconfig.h> (Termux's python has a plain
# one), found through -isystem $PREFIX/include; not part of any package.
ln -s "$CHROOT/usr/include/aarch64-linux-gnu/python$TERMUX_PYTHON_VERSION" \
	"$TERMUX_PREFIX/include/aarch64-linux-gnu/python$TERMUX_PYTHON_VERSION"

# --- termux-packages' helpers, as far as the recipes use them ---
termux_error_exit() { echo "ERROR: $*" >&2; exit 1; }
termux_setup_cmake() { :; }  # host cmake
termux_setup_ninja() { :; }  # host ninja
termux_download() {  # URL DEST SHA256: from the local stores, checked like termux_download
	local url=$1 dest=$2 sum=$3 tag
	tag=$(basename "$url" .tar.gz)
	if [ ! -f "$dest" ]; then
		if [[ "$url" == */ARM-software/kleidiai/archive/refs/tags/* ]] && [ -n "${MNN_ENGINE_KLEIDIAI_GIT:-}" ]; then
			# GitHub's tag archives are `git archive | gzip -n`, byte for byte (the sha256 below checks it)
			git -C "$MNN_ENGINE_KLEIDIAI_GIT" archive --format=tar --prefix="kleidiai-${tag#v}/" "$tag" | gzip -n > "$dest"
		else
			curl -fsSL "$url" -o "$dest" || termux_error_exit "cannot download $url (offline: see MNN_ENGINE_KLEIDIAI_GIT)"
		fi
	fi
	[ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$sum" ] || termux_error_exit "checksum mismatch for $url"
}
termux_setup_meson() {
	TERMUX_MESON=${MESON:-meson}
	TERMUX_MESON_CROSSFILE=$TERMUX_PKG_TMPDIR/meson-crossfile-$TERMUX_ARCH.txt
	local word list
	{
		echo "[binaries]"
		echo "ar = '$AR'"
		echo "c = '$CC'"
		echo "cmake = 'cmake'"
		echo "cpp = '$CXX'"
		echo "ld = '$LD'"
		echo "pkgconfig = '$PKG_CONFIG'"
		echo "strip = '$STRIP'"
		echo ""
		echo "[properties]"
		echo "needs_exe_wrapper = true"
		echo ""
		echo "[built-in options]"
		list=""; for word in $CFLAGS $CPPFLAGS; do list+="${list:+, }'$word'"; done; echo "c_args = [$list]"
		list=""; for word in $CXXFLAGS $CPPFLAGS; do list+="${list:+, }'$word'"; done; echo "cpp_args = [$list]"
		list=""; for word in $LDFLAGS; do list+="${list:+, }'$word'"; done
		echo "c_link_args = [$list]"
		echo "cpp_link_args = [$list]"
		echo ""
		echo "[host_machine]"
		echo "cpu_family = 'aarch64'"
		echo "cpu = 'aarch64'"
		echo "endian = 'little'"
		echo "system = 'linux'"
	} > "$TERMUX_MESON_CROSSFILE"
}
termux_setup_python_pip() {  # crossenv over the arm64 root's python, as Termux's over its own
	local env=$WORK/crossenv
	if [ ! -x "$env/bin/cross-python" ]; then
		(cd / && python -m crossenv "$CHROOT/usr/bin/python$TERMUX_PYTHON_VERSION" "$env" >/dev/null)
	fi
	# shellcheck disable=SC1091
	. "$env/bin/activate"  # python is now the cross-python
	export PATH=$PATH:$env/build/bin MESON=$env/build/bin/meson  # the build tools, after it
	TERMUX_MESON=$MESON
	local deps
	deps=$(echo "$TERMUX_PKG_PYTHON_COMMON_BUILD_DEPS" | tr -d ',')
	# shellcheck disable=SC2086
	build-pip install -q $deps
}
# shellcheck disable=SC2086  # TERMUX_PKG_EXTRA_CONFIGURE_ARGS is a word list, as in termux-packages
termux_step_configure_cmake() {
	cmake -G "$TERMUX_CMAKE_BUILD" "$TERMUX_PKG_SRCDIR" \
		-DCMAKE_AR="$(command -v "$AR")" -DCMAKE_UNAME="$(command -v uname)" \
		-DCMAKE_RANLIB="$(command -v "$RANLIB")" -DCMAKE_STRIP="$(command -v "$STRIP")" \
		-DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_C_FLAGS="$CFLAGS $CPPFLAGS" -DCMAKE_CXX_FLAGS="$CXXFLAGS $CPPFLAGS" \
		-DCMAKE_FIND_ROOT_PATH="$TERMUX_PREFIX" -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER \
		-DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
		-DCMAKE_INSTALL_PREFIX="$TERMUX_PREFIX" -DCMAKE_INSTALL_LIBDIR="$TERMUX_PREFIX/lib" \
		-DCMAKE_MAKE_PROGRAM="$(command -v ninja)" -DCMAKE_SKIP_INSTALL_RPATH=ON \
		-DCMAKE_USE_SYSTEM_LIBRARIES=True -DDOXYGEN_EXECUTABLE= -DBUILD_TESTING=OFF \
		-DCMAKE_CROSSCOMPILING=True "-DCMAKE_LINKER=$(command -v "$LD") $LDFLAGS" \
		-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR="$TERMUX_ARCH" \
		$TERMUX_PKG_EXTRA_CONFIGURE_ARGS
}
# shellcheck disable=SC2086  # as above
termux_step_configure_meson() {
	termux_setup_meson
	CC=gcc CXX=g++ CFLAGS='' CXXFLAGS='' CPPFLAGS='' LDFLAGS='' $TERMUX_MESON setup \
		"$TERMUX_PKG_SRCDIR" "$TERMUX_PKG_BUILDDIR" --cross-file "$TERMUX_MESON_CROSSFILE" \
		--prefix "$TERMUX_PREFIX" --libdir lib --includedir include --buildtype minsize --strip \
		$TERMUX_PKG_EXTRA_CONFIGURE_ARGS
}
termux_step_configure() {
	if [ -f "$TERMUX_PKG_SRCDIR/meson.build" ]; then termux_step_configure_meson
	else termux_step_configure_cmake; fi
}
termux_step_make() { ninja -C "$TERMUX_PKG_BUILDDIR" -j "$TERMUX_MAKE_PROCESSES"; }
termux_step_make_install() { ninja -C "$TERMUX_PKG_BUILDDIR" install; }

# build-package.sh's own patch step: every *.patch of the package folder, -p1 in the source,
# @TERMUX_PREFIX@ replaced (scripts/build/termux_step_patch_package.sh)
termux_step_patch_package() {
	local patch
	for patch in "$TERMUX_PKG_BUILDER_DIR"/*.patch; do
		[ -f "$patch" ] || continue
		echo "Applying patch: $(basename "$patch")"
		sed "s%@TERMUX_PREFIX@%$TERMUX_PREFIX%g" "$patch" | patch --silent -p1 -d "$TERMUX_PKG_SRCDIR"
	done
}

# get_source NAME: a stand-in for termux_step_get_source
get_source() {
	case "$1" in
		mnn)
			local tarball=$VENDOR/MNN-$TERMUX_PKG_VERSION.tar.gz
			tar -xzf "$tarball" -C "$TERMUX_PKG_SRCDIR" --strip-components=1
			# what `git clone --branch $TERMUX_PKG_GIT_BRANCH` would give as HEAD
			gzip -dc "$tarball" | git get-tar-commit-id > "$TERMUX_PKG_SRCDIR/.replay-commit" ;;
		python-mnn-engine)
			git ls-files -co --exclude-standard -z | tar --null -T - -c | tar -x -C "$TERMUX_PKG_SRCDIR" ;;
	esac
}
git() {  # HEAD of a replayed "clone" is the commit its tarball was archived from
	if [ "$#" = 4 ] && [ "$1 $3 $4" = "-C rev-parse HEAD" ] && [ -f "$2/.replay-commit" ]; then
		cat "$2/.replay-commit"
	else
		command git "$@"
	fi
}

# build_package NAME: the recipe's steps in build-package.sh's order, then the
# subpackage split; the package's files end up in $WORK/packages/NAME*/.
build_package() {
	local name=$1
	(
		export TERMUX_PKG_NAME=$name TERMUX_PKG_BUILDER_DIR=$ROOT/packaging/termux/$name
		export TERMUX_PKG_SRCDIR=$WORK/$name/src TERMUX_PKG_BUILDDIR=$WORK/$name/build
		export TERMUX_PKG_TMPDIR=$WORK/$name/tmp TERMUX_PKG_CACHEDIR=$WORK/$name/cache
		export TERMUX_PKG_MASSAGEDIR=$WORK/$name/massage
		rm -rf "${WORK:?}/$name/src" "$WORK/$name/build" "$WORK/$name/tmp" "$WORK/$name/massage"
		mkdir -p "$TERMUX_PKG_SRCDIR" "$TERMUX_PKG_BUILDDIR" "$TERMUX_PKG_TMPDIR" "$TERMUX_PKG_CACHEDIR"
		# shellcheck source=/dev/null
		. "$TERMUX_PKG_BUILDER_DIR/build.sh"
		get_source "$name"
		if [ -n "${TERMUX_PKG_PYTHON_COMMON_BUILD_DEPS:-}" ]; then termux_setup_python_pip; fi
		(cd "$TERMUX_PREFIX" && find . \( -type f -o -type l \) | sort) > "$TERMUX_PKG_TMPDIR/before"
		local fn
		for fn in termux_step_post_get_source termux_step_patch_package termux_step_pre_configure termux_step_configure \
			termux_step_post_configure termux_step_make termux_step_make_install termux_step_post_make_install; do
			if declare -F "$fn" >/dev/null; then
				step "$name: $fn"
				cd "$TERMUX_PKG_BUILDDIR"  # in this shell, as build-package.sh: a step's variables reach the next
				"$fn"
			fi
		done
		# termux_step_massage: what the steps added to the prefix is the package
		(cd "$TERMUX_PREFIX" && find . \( -type f -o -type l \) | sort) > "$TERMUX_PKG_TMPDIR/after"
		comm -13 "$TERMUX_PKG_TMPDIR/before" "$TERMUX_PKG_TMPDIR/after" > "$TERMUX_PKG_TMPDIR/files"
		mkdir -p "$TERMUX_PKG_MASSAGEDIR"
		(cd "$TERMUX_PREFIX" && tar -c -T "$TERMUX_PKG_TMPDIR/files") | tar -x -C "$TERMUX_PKG_MASSAGEDIR"
		# Termux's crossenv is patched to write $PREFIX/bin/python into scripts' shebangs
		if [ -d "$TERMUX_PKG_MASSAGEDIR/bin" ]; then
			grep -rlF "$WORK/crossenv/cross/bin/python" "$TERMUX_PKG_MASSAGEDIR/bin" | xargs -r sed -i \
				"s|$WORK/crossenv/cross/bin/python[0-9.]*|$TERMUX_PREFIX/bin/python|g"
		fi
		if declare -F termux_step_post_massage >/dev/null; then
			step "$name: termux_step_post_massage"
			cd "$TERMUX_PKG_MASSAGEDIR"
			termux_step_post_massage
			cd "$ROOT"
		fi
		split_subpackages "$name" "$TERMUX_PKG_BUILDER_DIR" "$TERMUX_PKG_MASSAGEDIR"
	)
}

# split_subpackages NAME BUILDER_DIR MASSAGE_DIR: termux_create_subpackages,
# failing when a TERMUX_SUBPKG_INCLUDE entry matches nothing.
split_subpackages() {
	local name=$1 builder=$2 massage=$3 sub subname pattern path matched
	mkdir -p "$WORK/packages/$name"
	cp -a "$massage/." "$WORK/packages/$name/"
	for sub in "$builder"/*.subpackage.sh; do
		[ -e "$sub" ] || continue
		subname=$(basename "$sub" .subpackage.sh)
		(
			# shellcheck source=/dev/null
			. "$sub"
			mkdir -p "$WORK/packages/$subname"
			for pattern in $TERMUX_SUBPKG_INCLUDE; do
				matched=0
				for path in "$WORK/packages/$name"/$pattern; do
					[ -e "$path" ] || continue
					mkdir -p "$WORK/packages/$subname/$(dirname "$pattern")"
					mv "$path" "$WORK/packages/$subname/$(dirname "$pattern")/"
					matched=1
				done
				[ "$matched" = 1 ] || termux_error_exit "$subname: TERMUX_SUBPKG_INCLUDE entry $pattern matched nothing"
			done
			echo "$subname: $(cd "$WORK/packages/$subname" && find . -type f | sed 's|^\./||' | tr '\n' ' ')"
		)
	done
}

step "mnn: the recipe, cross-built"
build_package mnn 2>&1 | tee "$OUT/mnn.log" | grep -E '^(==|ERROR|mnn-|CMake Error)' || true
[ "${PIPESTATUS[0]}" = 0 ] || { echo "mnn failed: see $OUT/mnn.log"; exit 1; }

step "python-mnn-engine: the recipe, against the staged mnn (-Dmnn=system)"
build_package python-mnn-engine 2>&1 | tee "$OUT/python-mnn-engine.log" | grep -E '^(==|ERROR|Successfully)' || true
[ "${PIPESTATUS[0]}" = 0 ] || { echo "python-mnn-engine failed: see $OUT/python-mnn-engine.log"; exit 1; }

step "what the packages hold"
if ! python3 tools/termux/inspect_packages.py "$WORK/packages" "$TERMUX_PREFIX" "$WORK" "$ROOT" "$HOME/" >"$OUT/packages.json"; then
	cat "$OUT/packages.json"
	exit 1
fi
python3 -c '
import json, sys
for name, entry in json.load(open(sys.argv[1])).items():
    if name != "problems":
        print(name + ":", entry["files"], "files", entry.get("kernels", ""))
' "$OUT/packages.json"

step "the packages at work: installed into the arm64 root, under qemu-aarch64 -cpu max"
device=$WORK/device
run_on_device() {  # PACKAGES...: a prefix holding just these packages, at Termux's path inside the root
	local package
	rm -rf "${device:?}"
	mkdir -p "$device/bin"
	for package in "$@"; do cp -a "$WORK/packages/$package/." "$device/"; done
	# what Termux's base system and python package provide
	printf '#!/bin/sh\nexec /opt/venv-termux/bin/python "$@"\n' >"$device/bin/python"  # with tornado etc.
	chmod +x "$device/bin/python"
	ln -s /bin/sh "$device/bin/sh"
	mkdir -p "$CHROOT$TERMUX_PREFIX" "$CHROOT${TERMUX_PREFIX%/usr}/home"
	if mountpoint -q "$CHROOT$TERMUX_PREFIX"; then umount "$CHROOT$TERMUX_PREFIX"; fi
	mount --bind "$device" "$CHROOT$TERMUX_PREFIX"
	cp tools/termux/device_probe.py "$CHROOT/tmp/device_probe.py"
	chroot "$CHROOT" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin QEMU_CPU=max \
		PYTHONPATH="$TERMUX_PREFIX/lib/python$TERMUX_PYTHON_VERSION/site-packages" \
		/opt/venv-termux/bin/python /tmp/device_probe.py "$TERMUX_PREFIX" /models/tiny-scripted "$@"
}
arm_root_mount "$MODELS:/models"
# the package's runtime dependencies (Termux's python-* packages on a phone), from pyproject.toml
runtime_deps=$(python3 -c 'import shlex, tomllib; print(shlex.join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
chroot "$CHROOT" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin PIP_DISABLE_PIP_VERSION_CHECK=1 \
	PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt /bin/sh -c \
	"test -x /opt/venv-termux/bin/python || python3 -m venv /opt/venv-termux
	/opt/venv-termux/bin/pip install -q $runtime_deps"
{
	run_on_device mnn python-mnn-engine
	run_on_device mnn mnn-backend-opencl mnn-backend-vulkan python-mnn-engine
} | tee "$OUT/device.jsonl"
umount "$CHROOT$TERMUX_PREFIX"
python3 -c '
import json, sys, time
out, commit = sys.argv[1:]
runs = [json.loads(line) for line in open(f"{out}/device.jsonl") if line.startswith("{")]
result = {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit,
          "packages": json.load(open(f"{out}/packages.json")), "device": runs}
json.dump(result, open(f"{out}/result.json", "w"), indent=1)
failed = [r for r in runs if r.get("problems")]
print(f"{len(runs)} runs on the emulated device, {len(failed)} with problems")
sys.exit(1 if failed or len(runs) != 2 else 0)
' "$OUT" "$COMMIT"
