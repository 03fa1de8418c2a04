#!/usr/bin/env bash
# Replay the Termux recipes (packaging/termux/mnn, then python-mnn-engine on
# top of it) for an aarch64 cross build, step by step as termux-packages'
# build-package.sh runs them, and check what they produce.
#
# Usage (as root, from a checkout): tools/termux/replay.sh
#
# What is the same as on Termux's builder: the recipes' own variables and step
# functions, in build-package.sh's order; termux-packages' own scripts, run
# from a termux-packages tree (MNN_ENGINE_TERMUX_PACKAGES, a git directory;
# tools/termux/upstream_steps.sh): its meson 1.11.0 with its patches for the
# first configure and meson-python's reconfigure with build-pip's meson, the
# python setup (crossenv 1.6.1 with termux's patches, -lpython3.X, PYTHONPATH),
# the massage (strip, termux-elf-cleaner built from MNN_ENGINE_TERMUX_ELF_CLEANER,
# the shebang fix, the undefined-symbol check); its cmake invocation for its
# bionic (Android) flavour (tools/termux/build_steps.sh), with CMake's Android
# platform (CMAKE_SYSTEM_NAME=Android and a standalone toolchain, so MNN takes
# its Android branches), and its compiler and linker flags (-Oz, --as-needed,
# RUNPATH $PREFIX/lib ...); $TERMUX_PREFIX at /data/data/com.termux/files/usr
# (a bind mount in a private mount namespace); the service directory,
# subpackages, control files, maintainer scripts and .debs as termux-packages
# writes them (tools/termux/package_steps.sh); python-mnn-engine built from
# its release sdist (tools/termux/release_sdist.py, of the commit replayed).
# What differs: behind the standalone toolchain's compiler names is Debian's
# g++-aarch64-linux-gnu for glibc, not the NDK's clang for bionic
# (tools/termux/android_toolchain.sh says what that leaves out); the arm64
# Debian root of tools/arm/root.sh stands in for the device and for the target
# Python (bookworm's 3.11, or sid's 3.14), and this machine's python3.X for
# the build Python termux compiles; MNN's source is the vendored tarball (its
# git-archive header gives the commit the recipe checks); downloads come from
# PyPI (upstream_steps.sh says which).
#
# Afterwards the .debs are installed with dpkg into a Termux prefix inside the
# arm64 root (its own dpkg database, as Termux's), over stand-ins of Termux's
# python and termux-services, and run under qemu-aarch64 -cpu max: the
# engine imported and generating with each backend subpackage present or
# absent, the service started by runsv, an upgrade over an older
# python-mnn-engine whose conffile the user changed, and the removal
# (tools/termux/device_packages.py). Results: build/termux-replay/SUITE/result.json.
# MNN_ENGINE_ARM_SUITE=sid replays for Python 3.14 (tools/arm/root.sh).
#
# MNN_ENGINE_REPLAY_DEVICE_ONLY=1 reuses the .debs of the last run.
set -euo pipefail
[ -z "${REPLAY_TRACE:-}" ] || set -x
cd "$(dirname "$0")/../.."
ROOT=$PWD
if [ -z "${REPLAY_IN_NAMESPACE:-}" ]; then
	exec unshare --mount --propagation private env REPLAY_IN_NAMESPACE=1 "$0" "$@"
fi
# shellcheck source=tools/arm/root.sh
. tools/arm/root.sh
# shellcheck source=tools/termux/build_steps.sh
. tools/termux/build_steps.sh
# shellcheck source=tools/termux/package_steps.sh
. tools/termux/package_steps.sh
# shellcheck source=tools/termux/upstream_steps.sh
. tools/termux/upstream_steps.sh
WORK=${MNN_ENGINE_REPLAY_WORK:-$HOME/.cache/mnn-engine/termux-replay/$ARM_SUITE}
OUT=$ROOT/build/termux-replay/$ARM_SUITE
COMMIT=$(git rev-parse HEAD) # the tree the run starts from (HEAD may move meanwhile)
VENDOR=${MNN_ENGINE_VENDOR:-$ROOT/../shared/vendor}
MODELS=${MNN_ENGINE_TEST_MODELS:-$HOME/.cache/mnn-engine/test-models/v1}
mkdir -p "$WORK" "$OUT"
step() { printf '\n== %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }

step "host tools: aarch64 cross compiler, cmake, ninja"
command -v aarch64-linux-gnu-g++ >/dev/null ||
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q g++-aarch64-linux-gnu >/dev/null
command -v ccache >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q ccache >/dev/null
arm_root
trap arm_root_unmount EXIT
# the target Python is the arm64 root's (bookworm: 3.11; MNN_ENGINE_ARM_SUITE=sid: 3.14, as Termux's)
TERMUX_PYTHON_VERSION=$(readlink "$CHROOT/usr/bin/python3")
export TERMUX_PYTHON_VERSION=${TERMUX_PYTHON_VERSION#python}
# (crossenv's build Python must be the target's version: termux_setup_build_python in upstream_steps.sh)
if [ ! -x "$WORK/tools/bin/cmake" ]; then
	python3 -m venv "$WORK/tools"
	"$WORK/tools/bin/pip" install -q cmake ninja
fi
export PATH=$WORK/tools/bin:$PATH

# python-mnn-engine's source is its release sdist (tools/termux/release_sdist.py:
# meson-python's sdist of the committed tree), made once per run; the recipe's
# TERMUX_PKG_SHA256 is the last release's, so the two are compared and the
# result recorded, not required
SDIST_REPORT=$OUT/sdist.json
if [ -z "${MNN_ENGINE_REPLAY_DEVICE_ONLY:-}" ]; then  # before the Termux environment: an x86 build
	step "python-mnn-engine's release sdist, of commit $COMMIT"
	x86_mnn=$WORK/x86-mnn
	x86_lib=$(find build -path "*/subprojects/MNN/libMNN.so" -print -quit)
	[ -n "$x86_lib" ] ||
		{ echo "the sdist is configured against an x86 MNN: build one first (pip install -e .)"; exit 1; }
	rm -rf "$x86_mnn" && mkdir -p "$x86_mnn/lib" "$x86_mnn/include"
	cp -r subprojects/MNN/include/MNN "$x86_mnn/include/"
	cp -r subprojects/MNN/transformers/llm/engine/include/llm "$x86_mnn/include/"
	cp "$x86_lib" "$x86_mnn/lib/"
	rm -rf "$WORK/sdist"
	"${MNN_ENGINE_PYTHON:-$ROOT/.venv/bin/python}" tools/termux/release_sdist.py --mnn-prefix "$x86_mnn" \
		--out "$WORK/sdist" --no-write >"$SDIST_REPORT"
	python3 -c '
import json, re, sys
report = json.load(open(sys.argv[1]))
recipe = re.search(r"(?m)^TERMUX_PKG_SHA256=(\w+)", open(sys.argv[2]).read()).group(1)
report["recipe_sha256"] = recipe
report["matches_recipe"] = report["sha256"] == recipe
json.dump(report, open(sys.argv[1], "w"), indent=1)
print("sdist", report["sha256"], "is", "the recipe hash" if report["matches_recipe"] else "not the recipe hash (the last release)")
' "$SDIST_REPORT" packaging/termux/python-mnn-engine/build.sh
fi

# --- the Termux build environment ---
termux_setup_toolchain "$WORK"
export CCACHE_DIR=$HOME/.cache/mnn-engine/ccache-aarch64 CCACHE_BASEDIR=$WORK CCACHE_NOHASHDIR=1
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(command git log -1 --format=%ct)}

# $TERMUX_PREFIX is a fresh directory bind-mounted at Termux's path (only in
# this mount namespace), so the RUNPATHs and the installed paths are Termux's.
DEVICE_ONLY=${MNN_ENGINE_REPLAY_DEVICE_ONLY:-}
[ -n "$DEVICE_ONLY" ] || rm -rf "$WORK/prefix" "$WORK/packages" "$WORK/debs" "$WORK/debroot"
mkdir -p "$WORK/prefix" "$WORK/packages" "$TERMUX_COMMON_CACHEDIR" "$TERMUX_PREFIX"
mount --bind "$WORK/prefix" "$TERMUX_PREFIX"
mkdir -p "$TERMUX_PREFIX/lib" "$TERMUX_PREFIX/include/aarch64-linux-gnu" "$TERMUX_PREFIX/tmp"
# Debian's python3.X headers are multiarch: pyconfig.h includes
# <aarch64-linux-gnu/python3.X/pyconfig.h> (Termux's python has a plain
# one), found through -isystem $PREFIX/include; not part of any package.
ln -sfn "$CHROOT/usr/include/aarch64-linux-gnu/python$TERMUX_PYTHON_VERSION" \
	"$TERMUX_PREFIX/include/aarch64-linux-gnu/python$TERMUX_PYTHON_VERSION"

# --- termux-packages' own scripts (tools/termux/upstream_steps.sh), then the rest of its helpers ---
TERMUX_PACKAGES_SRC=${MNN_ENGINE_TERMUX_PACKAGES:-/work/.mirror/termux+termux-packages/repo}
MNN_ENGINE_TERMUX_ELF_CLEANER=${MNN_ENGINE_TERMUX_ELF_CLEANER:-/work/.mirror/termux+termux-elf-cleaner/repo}
termux_upstream_setup "$TERMUX_PACKAGES_SRC"
echo "termux-packages $TERMUX_PACKAGES_COMMIT, termux-elf-cleaner $(cat "$WORK/termux-elf-cleaner/version")"
# a fresh builder: termux's meson and crossenv are set up (and patched) anew
[ -n "$DEVICE_ONLY" ] || rm -rf "$TERMUX_COMMON_CACHEDIR/meson-"* "$TERMUX_COMMON_CACHEDIR/crossenv-"* \
	"$TERMUX_PYTHON_CROSSENV_PREFIX"
termux_python_in_prefix
# crossenv (1.6.1 as 1.6.2) takes any pip without pip/_vendor/six.py (every
# pip since 24.1) for a distribution's unbundled one and reinstalls that
# version from PyPI; where the build python is a distribution's (sid's), its
# own wheel of pip (python3-pip-whl) is stock, and may be newer than the index
[ ! -d /usr/share/python-wheels ] || export PIP_FIND_LINKS=/usr/share/python-wheels

# get_source NAME: a stand-in for termux_step_get_source
get_source() {
	case "$1" in
		mnn)
			local tarball=$VENDOR/MNN-$TERMUX_PKG_VERSION.tar.gz
			tar -xzf "$tarball" -C "$TERMUX_PKG_SRCDIR" --strip-components=1
			# what `git clone --branch $TERMUX_PKG_GIT_BRANCH` would give as HEAD
			# (git stops reading after the header: no pipe, whose gzip would die of SIGPIPE under pipefail)
			git get-tar-commit-id < <(gzip -dc "$tarball") > "$TERMUX_PKG_SRCDIR/.replay-commit" ;;
		python-mnn-engine)
			tar -xzf "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["sdist"])' "$SDIST_REPORT")" \
				-C "$TERMUX_PKG_SRCDIR" --strip-components=1 ;;
	esac
}
git() {  # HEAD of a replayed "clone" is the commit its tarball was archived from
	if [ "$#" = 4 ] && [ "$1 $3 $4" = "-C rev-parse HEAD" ] && [ -f "$2/.replay-commit" ]; then
		cat "$2/.replay-commit"
	else
		command git "$@"
	fi
}
# termux_create_debian_subpackages, called by termux_step_massage: the replay's split
termux_create_debian_subpackages() {
	split_subpackages "$TERMUX_PKG_NAME" "$TERMUX_PKG_BUILDER_DIR" "$TERMUX_PKG_MASSAGEDIR$TERMUX_PREFIX_CLASSICAL"
}

# build_package NAME: the recipe's steps in build-package.sh's order, then the
# subpackage split; the package's files end up in $WORK/packages/NAME*/.
# shellcheck disable=SC2030  # the package's variables stay in its subshell, where make_debs reads them
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
		termux_upstream_package_defaults
		termux_step_create_timestamp_file
		cd "$TERMUX_PKG_CACHEDIR"
		get_source "$name"
		local fn
		run_step() {  # a recipe's step where it has one, in this shell: a step's variables reach the next
			if declare -F "$1" >/dev/null; then
				step "$name: $1"
				"$1"
			fi
		}
		cd "$TERMUX_PKG_SRCDIR" && run_step termux_step_post_get_source
		step "$name: termux_step_get_dependencies_python (termux-packages')"
		termux_step_get_dependencies_python
		run_step termux_step_patch_package
		cd "$TERMUX_PKG_SRCDIR" && run_step termux_step_pre_configure
		for fn in termux_step_configure termux_step_post_configure termux_step_make termux_step_make_install \
			termux_step_post_make_install termux_step_install_service_scripts termux_step_install_license; do
			cd "$TERMUX_PKG_BUILDDIR" && run_step "$fn"
		done
		# what the steps added to the prefix, massaged as termux does (strip, termux-elf-cleaner,
		# shebangs, the undefined-symbol check, the subpackages split off)
		mkdir -p "$TERMUX_PKG_MASSAGEDIR"
		cd "$TERMUX_PKG_MASSAGEDIR" && termux_step_copy_into_massagedir
		step "$name: termux_step_massage (termux-packages')"
		cd "$TERMUX_PKG_MASSAGEDIR$TERMUX_PREFIX_CLASSICAL" && termux_step_massage
		cd "$TERMUX_PKG_MASSAGEDIR$TERMUX_PREFIX_CLASSICAL" && run_step termux_step_post_massage
		mkdir -p "$WORK/packages/$name"
		cp -a "$TERMUX_PKG_MASSAGEDIR$TERMUX_PREFIX_CLASSICAL/." "$WORK/packages/$name/"
		cd "$ROOT"
		make_debs "$name"
	)
}

# make_debs NAME: the .debs of NAME and its subpackages (in $WORK/debs), as
# termux_step_create_debian_package and termux_create_debian_subpackages
# write them, from the split files in $WORK/packages/.
# shellcheck disable=SC2031  # called in build_package's subshell
make_debs() {
	local name=$1 version=$TERMUX_PKG_VERSION root sub fields=()
	if [ "${TERMUX_PKG_REVISION:-0}" != 0 ]; then version+="-$TERMUX_PKG_REVISION"; fi
	root=$WORK/debroot/$name
	rm -rf "$root"
	mkdir -p "$root$TERMUX_PREFIX"
	cp -a "$WORK/packages/$name/." "$root$TERMUX_PREFIX/"
	[ -z "${TERMUX_PKG_DEPENDS:-}" ] || fields+=("Depends: $TERMUX_PKG_DEPENDS")
	[ -z "${TERMUX_PKG_RECOMMENDS:-}" ] || fields+=("Recommends: $TERMUX_PKG_RECOMMENDS")
	[ -z "${TERMUX_PKG_SUGGESTS:-}" ] || fields+=("Suggests: $TERMUX_PKG_SUGGESTS")
	fields+=("Description: $TERMUX_PKG_DESCRIPTION")
	# termux_step_create_debian_package: the recipe's debscripts, then the python ones (which continue its postinst)
	mkdir -p "$root/DEBIAN"
	if declare -F termux_step_create_debscripts >/dev/null; then
		(cd "$root/DEBIAN" && termux_step_create_debscripts)
	fi
	if [ -d "$root$TERMUX_PREFIX/lib/python$TERMUX_PYTHON_VERSION" ] || [ -n "${TERMUX_PKG_PYTHON_RUNTIME_DEPS:-}" ]; then
		python_debscripts "$name" "$root/DEBIAN" "$root$TERMUX_PREFIX/lib/python$TERMUX_PYTHON_VERSION/site-packages"
		# termux_step_create_python_debscripts refuses a package that runs pip without depending on it
		[[ ", $TERMUX_PKG_DEPENDS," == *", python-pip,"* ]] ||
			termux_error_exit "$name runs pip in its postinst but does not depend on python-pip"
	fi
	CONFFILES=${TERMUX_PKG_CONFFILES:-} create_deb "$name" "$version" "$root" "$WORK/debs" "${fields[@]}"
	for sub in "$TERMUX_PKG_BUILDER_DIR"/*.subpackage.sh; do
		[ -e "$sub" ] || continue
		(
			TERMUX_SUBPKG_DEPENDS="" TERMUX_SUBPKG_RECOMMENDS="" TERMUX_SUBPKG_SUGGESTS="" TERMUX_SUBPKG_CONFFILES=""
			# shellcheck source=/dev/null
			. "$sub"
			name=$(basename "$sub" .subpackage.sh)
			root=$WORK/debroot/$name
			rm -rf "$root"
			mkdir -p "$root$TERMUX_PREFIX"
			cp -a "$WORK/packages/$name/." "$root$TERMUX_PREFIX/"
			# not among the parent's Depends, so it depends on the parent's exact version
			fields=("Depends: ${TERMUX_SUBPKG_DEPENDS:+$TERMUX_SUBPKG_DEPENDS, }$TERMUX_PKG_NAME (= $version)")
			[ -z "$TERMUX_SUBPKG_RECOMMENDS" ] || fields+=("Recommends: $TERMUX_SUBPKG_RECOMMENDS")
			[ -z "$TERMUX_SUBPKG_SUGGESTS" ] || fields+=("Suggests: $TERMUX_SUBPKG_SUGGESTS")
			fields+=("Description: $TERMUX_SUBPKG_DESCRIPTION")
			CONFFILES=$TERMUX_SUBPKG_CONFFILES create_deb "$name" "$version" "$root" "$WORK/debs" "${fields[@]}"
		)
	done
	echo "debs: $(cd "$WORK/debs" && ls)"
}

# split_subpackages NAME BUILDER_DIR MASSAGE_DIR: termux_create_debian_subpackages'
# split, each subpackage's TERMUX_SUBPKG_INCLUDE moved from MASSAGE_DIR to
# $WORK/packages/SUBPACKAGE/, failing when an entry matches nothing.
split_subpackages() {
	local name=$1 builder=$2 massage=$3 sub subname pattern path matched
	for sub in "$builder"/*.subpackage.sh; do
		[ -e "$sub" ] || continue
		subname=$(basename "$sub" .subpackage.sh)
		(
			# shellcheck source=/dev/null
			. "$sub"
			rm -rf "${WORK:?}/packages/$subname"
			mkdir -p "$WORK/packages/$subname"
			for pattern in $TERMUX_SUBPKG_INCLUDE; do
				matched=0
				for path in "$massage"/$pattern; do
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

# built_package NAME: build_package NAME with its output in $OUT/NAME.log, the
# steps shown; as an asynchronous command, so that set -e holds inside it
# (bash ignores -e in a function called from an if or || list)
built_package() {
	local name=$1
	build_package "$name" >"$OUT/$name.log" 2>&1 &
	if ! wait $!; then
		grep -E '^(==|ERROR|CMake Error)' "$OUT/$name.log" || true
		tail -n 40 "$OUT/$name.log"
		echo "$name failed: see $OUT/$name.log"
		exit 1
	fi
	grep -E '^(==|ERROR|mnn-|debs:|Successfully)' "$OUT/$name.log" || true
}
if [ -z "$DEVICE_ONLY" ]; then
	step "mnn: the recipe, cross-built"
	built_package mnn
	step "python-mnn-engine: the recipe, against the staged mnn (-Dmnn=system)"
	built_package python-mnn-engine
fi

step "what the packages hold"
if ! python3 tools/termux/inspect_packages.py "$WORK/packages" "$TERMUX_PREFIX" "$WORK" "$ROOT" "$HOME/" >"$OUT/packages.json"; then
	cat "$OUT/packages.json"
	exit 1
fi
python3 -c '
import json, sys
for name, entry in json.load(open(sys.argv[1])).items():
    if name != "problems":
        print(name + ":", entry["files"], "files")
' "$OUT/packages.json"

# libMNN.so is stripped (MNN's Android link flags add -s): its kernels are read from the link step
python3 tools/termux/linked_kernels.py "$WORK/mnn/build/build.ninja" | tee "$OUT/kernels.json" ||
	{ echo "a kernel family is not linked into libMNN.so"; exit 1; }

step "an older python-mnn-engine to upgrade from"
# synthesized from this build: version 0.0.9 in the package and in the code,
# and an older serve.env (without the MNN_ENGINE_HOME setting), so that dpkg
# meets a changed conffile and the service shows which code it runs
old=$WORK/debroot/python-mnn-engine-old
rm -rf "$old"
cp -a "$WORK/debroot/python-mnn-engine" "$old"
sed -i 's/^__version__ = .*/__version__ = "0.0.9"/' "$old$TERMUX_PREFIX"/lib/python*/site-packages/mnn_engine/version.py
sed -i '/^# Model store/,$d' "$old$TERMUX_PREFIX/etc/mnn-engine/serve.env"
(
	TERMUX_PKG_TMPDIR=$WORK/python-mnn-engine/tmp
	# shellcheck source=/dev/null
	. packaging/termux/python-mnn-engine/build.sh
	# the same conffiles and maintainer scripts as the new one
	CONFFILES=$(sed "s|^$TERMUX_PREFIX/||" "$old/DEBIAN/conffiles") create_deb python-mnn-engine 0.0.9 "$old" \
		"$WORK/debs" "Depends: $TERMUX_PKG_DEPENDS" "Suggests: $TERMUX_PKG_SUGGESTS" \
		"Description: $TERMUX_PKG_DESCRIPTION"
)
ls "$WORK/debs"

step "the .debs at work: dpkg in a Termux prefix in the arm64 root, under qemu-aarch64 -cpu max"
arm_root_mount "$MODELS:/models" "$WORK/debs:/debs"
device=$WORK/device
rm -rf "${device:?}"
mkdir -p "$device" "$CHROOT$TERMUX_PREFIX"
if mountpoint -q "$CHROOT$TERMUX_PREFIX"; then umount "$CHROOT$TERMUX_PREFIX"; fi
mount --bind "$device" "$CHROOT$TERMUX_PREFIX"
cp tools/termux/device_probe.py tools/termux/device_packages.py "$CHROOT/tmp/"
chroot "$CHROOT" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin:/usr/sbin:/sbin QEMU_CPU=max \
	/usr/bin/python3 /tmp/device_packages.py "$TERMUX_PREFIX" /debs /models/tiny-scripted /tmp/device_probe.py \
	| tee "$OUT/device.json"
umount "$CHROOT$TERMUX_PREFIX"
python3 -c '
import json, re, sys, time
out, commit, termux_packages, elf_cleaner = sys.argv[1:]
device = json.load(open(f"{out}/device.json"))
# what the steps of termux-packages said in each build log: the meson versions of the two
# configures, termux-elf-cleaner, the undefined-symbol and OpenMP checks
said = re.compile(r"^(The Meson build system|Version: |INFO: (Found|Total)|ERROR|termux-elf-cleaner|.*: Removing |"
                  r".*Changing TLS|Applying |\[termux_setup)")
steps = {name: [line.rstrip() for line in open(f"{out}/{name}.log", errors="replace") if said.match(line)]
         for name in ("mnn", "python-mnn-engine")}
result = {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit,
          "termux_packages": termux_packages, "termux_elf_cleaner": elf_cleaner,
          "sdist": json.load(open(f"{out}/sdist.json")), "termux_steps": steps,
          "packages": json.load(open(f"{out}/packages.json")),
          "kernels_linked": json.load(open(f"{out}/kernels.json")), "device": device}
json.dump(result, open(f"{out}/result.json", "w"), indent=1)
problems = device["problems"]
print(f"the device: {len(problems)} problems")
for problem in problems:
    print("  " + problem)
sys.exit(1 if problems else 0)
' "$OUT" "$COMMIT" "$TERMUX_PACKAGES_COMMIT" "$(cat "$WORK/termux-elf-cleaner/version")"
