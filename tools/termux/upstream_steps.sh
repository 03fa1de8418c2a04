# shellcheck shell=bash
# termux-packages' own build scripts, run as they are for the replay
# (tools/termux/replay.sh): sourced from a termux-packages tree, not rewritten.
# They are the steps where a port could hide a difference:
#   termux_setup_meson                    termux's meson 1.11.0 with its meson-*.patch files,
#                                         run by the builder's /usr/bin/python3 (the first configure)
#   termux_step_configure_meson           that meson's `setup`; meson-python then reconfigures
#                                         with the meson build-pip installed
#   termux_step_get_dependencies_python   termux_setup_python_pip (crossenv 1.6.1 with termux's
#                                         python-crossenv-*.patch files, setuptools/wheel pins,
#                                         the patched sysconfig), the recipe's build deps,
#                                         LDFLAGS' -lpython3.X, PYTHONPATH
#   termux_step_create_timestamp_file,
#   termux_step_copy_into_massagedir      what the build added to the prefix
#   termux_step_massage                   strip, termux-elf-cleaner, the shebang fix, the
#                                         undefined-symbol and OpenMP checks, the subpackages
# What stands in for the builder's environment, each only where this machine has no such thing:
#   termux_download             fetches from PyPI: meson's release tarball is the same file as its
#                               PyPI sdist (termux's SHA-256 is checked); crossenv's GitHub tag
#                               archive cannot be reached here, so the PyPI sdist of the same
#                               version (its own SHA-256 below; termux's patches apply to it as they are)
#   termux_setup_build_python   this machine's python3.X (termux builds the same version from source)
#   $TERMUX_PREFIX's python     the arm64 root's python, linked into the prefix as termux's python
#                               package is installed there before a python package builds
#   $TERMUX_ELF_CLEANER         termux-elf-cleaner built from its source at the version termux packages
#   termux_create_debian_subpackages  the replay's split (replay.sh)
# The caller sets WORK, CHROOT, the toolchain (build_steps.sh's termux_setup_toolchain) and
# TERMUX_PYTHON_VERSION, then calls termux_upstream_setup SRC with a termux-packages git directory.

# crossenv's PyPI sdists, by version (termux pins 1.6.1 and checks GitHub's tag archive instead)
declare -A TERMUX_REPLAY_PYPI_SHA256=(
	[crossenv-1.6.1]=5b7e2f231d9a3c6ea56ce3b7fd7acbe0f1e310e44a8f699909910f1334db1a31
)

# termux_upstream_setup SRC: termux-packages' scripts/ (and the termux-elf-cleaner recipe) from
# SRC, a termux-packages git directory (bare or a checkout), into $WORK/termux-packages; sources
# the scripts above and sets the variables termux's properties.sh and setup_variables.sh give
# them. TERMUX_PACKAGES_COMMIT says which commit ran.
# shellcheck disable=SC2034  # TERMUX_PACKAGES_COMMIT is the caller's
termux_upstream_setup() {
	local src=$1 gitdir
	if [ -d "$src/.git" ]; then gitdir=$src/.git; else gitdir=$src; fi
	TERMUX_PACKAGES_COMMIT=$(command git --git-dir="$gitdir" rev-parse HEAD) ||
		termux_error_exit "$src is not a termux-packages git directory"
	export TERMUX_SCRIPTDIR=$WORK/termux-packages
	rm -rf "$TERMUX_SCRIPTDIR"
	mkdir -p "$TERMUX_SCRIPTDIR"
	command git --git-dir="$gitdir" archive HEAD scripts packages/termux-elf-cleaner | tar -x -C "$TERMUX_SCRIPTDIR"
	local script
	for script in setup/termux_setup_meson.sh setup/termux_setup_python_pip.sh \
		configure/termux_step_configure_meson.sh termux_step_get_dependencies_python.sh \
		termux_step_create_timestamp_file.sh termux_step_copy_into_massagedir.sh termux_step_massage.sh \
		termux_step_strip_elf_symbols.sh termux_step_elf_cleaner.sh; do
		# shellcheck source=/dev/null
		. "$TERMUX_SCRIPTDIR/scripts/build/$script"
	done
	# scripts/properties.sh and termux_step_setup_variables.sh, for the bionic aarch64 build
	export TERMUX_PREFIX_CLASSICAL=$TERMUX_PREFIX TERMUX_PACKAGE_FORMAT=debian
	export TERMUX__PREFIX__LIB_SUBDIR=lib TERMUX__PREFIX__INCLUDE_SUBDIR=include
	export TERMUX__PREFIX__BASE_INCLUDE_DIR=$TERMUX_PREFIX/include TERMUX__PREFIX__MULTI_INCLUDE_SUBDIR=include32
	export TERMUX__PREFIX__MULTI_LIB_SUBDIR=lib32 TERMUX__PREFIX__MULTI_LIB_DIR=$TERMUX_PREFIX/lib32
	export TERMUX_TOPDIR=$WORK TERMUX_PKG_MESON_NATIVE=false TERMUX_QUIET_BUILD=false
	export TERMUX_FORCE_BUILD_DEPENDENCIES=false TERMUX_PACKAGES_OFFLINE=false
	export TERMUX_PYTHON_CROSSENV_PREFIX=$WORK/python$TERMUX_PYTHON_VERSION-crossenv-prefix-$TERMUX_PACKAGE_LIBRARY-$TERMUX_ARCH
	export TERMUX_PYTHON_CROSSENV_BUILDHOME=$TERMUX_PYTHON_CROSSENV_PREFIX/build/lib/python$TERMUX_PYTHON_VERSION
	export TERMUX_PYTHON_HOME=$TERMUX_PREFIX/lib/python$TERMUX_PYTHON_VERSION
	# termux's toolchain sets llvm-readelf; binutils' reads the same tables
	export READELF=${READELF:-aarch64-linux-gnu-readelf}
	termux_build_elf_cleaner "${MNN_ENGINE_TERMUX_ELF_CLEANER:-}"
}

# the per-package defaults of termux_step_setup_variables.sh the sourced steps read
# shellcheck disable=SC2034  # read by termux-packages' scripts
termux_upstream_package_defaults() {
	TERMUX_PKG_METAPACKAGE=false TERMUX_PKG_NO_STRIP=false TERMUX_PKG_NO_ELF_CLEANER=false
	TERMUX_PKG_NO_SHEBANG_FIX=false TERMUX_PKG_NO_SHEBANG_FIX_FILES="" TERMUX_PKG_RM_AFTER_INSTALL=""
	TERMUX_PKG_UNDEF_SYMBOLS_FILES="" TERMUX_PKG_EXTRA_UNDEF_SYMBOLS_TO_CHECK="" TERMUX_PKG_NO_OPENMP_CHECK=false
	TERMUX_PKG_PYTHON_COMMON_BUILD_DEPS=${TERMUX_PKG_PYTHON_COMMON_BUILD_DEPS:-}
	TERMUX_PKG_PYTHON_CROSS_BUILD_DEPS=${TERMUX_PKG_PYTHON_CROSS_BUILD_DEPS:-}
	TERMUX_PKG_PYTHON_TARGET_DEPS=${TERMUX_PKG_PYTHON_TARGET_DEPS:-}
	TERMUX_PKG_EXTRA_CONFIGURE_ARGS=${TERMUX_PKG_EXTRA_CONFIGURE_ARGS:-}
	TERMUX_BUILD_TS_FILE=$TERMUX_PKG_TMPDIR/timestamp_$TERMUX_PKG_NAME
	# termux_step_start_build: a recipe with python build deps gets the python setup
	TERMUX_PKG_SETUP_PYTHON=false
	[ -z "$TERMUX_PKG_PYTHON_COMMON_BUILD_DEPS$TERMUX_PKG_PYTHON_CROSS_BUILD_DEPS" ] || TERMUX_PKG_SETUP_PYTHON=true
}

# termux_build_elf_cleaner SRC: termux-elf-cleaner at the version termux-packages packages
# (packages/termux-elf-cleaner/build.sh), with that recipe's patch, built for this machine from
# SRC (a termux/termux-elf-cleaner git directory); sets TERMUX_ELF_CLEANER.
termux_build_elf_cleaner() {
	local src=$1 version dir=$WORK/termux-elf-cleaner gitdir
	# shellcheck source=/dev/null
	version=$(. "$TERMUX_SCRIPTDIR/packages/termux-elf-cleaner/build.sh" && echo "$TERMUX_PKG_VERSION")
	export TERMUX_ELF_CLEANER=$dir/build/termux-elf-cleaner
	[ ! -x "$TERMUX_ELF_CLEANER" ] || [ "$(cat "$dir/version" 2>/dev/null)" != "$version" ] || return 0
	[ -n "$src" ] || termux_error_exit "termux-elf-cleaner $version: set MNN_ENGINE_TERMUX_ELF_CLEANER to its git directory"
	if [ -d "$src/.git" ]; then gitdir=$src/.git; else gitdir=$src; fi
	rm -rf "$dir"
	mkdir -p "$dir/src"
	# (its tests/ hold binaries a partial mirror may lack: the tool needs none of them)
	command git --git-dir="$gitdir" archive "v$version" -- . ":(exclude)tests" | tar -x -C "$dir/src"
	sed "s%@TERMUX_PKG_API_LEVEL@%$TERMUX_PKG_API_LEVEL%g" \
		"$TERMUX_SCRIPTDIR/packages/termux-elf-cleaner/android-api-level.diff" | patch --silent -p1 -d "$dir/src"
	# the builder's own compilers, not the target's
	CC=gcc CXX=g++ CFLAGS="" CXXFLAGS="" CPPFLAGS="" LDFLAGS="" \
		cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	ninja -C "$dir/build" >/dev/null
	echo "$version" >"$dir/version"
}

# termux_download URL DEST SHA256 (termux's helper): from PyPI, see above
termux_download() {
	local url=$1 dest=$2 sha=$3 name version file cache=$TERMUX_COMMON_CACHEDIR/pypi
	case "$url" in
		https://github.com/mesonbuild/meson/releases/download/*/meson-*.tar.gz)
			name=meson version=${url##*/meson-}; version=${version%.tar.gz} ;;
		https://github.com/benfogle/crossenv/archive/refs/tags/v*.tar.gz)
			name=crossenv version=${url##*/v}; version=${version%.tar.gz}
			sha=${TERMUX_REPLAY_PYPI_SHA256[crossenv-$version]:?no PyPI hash for crossenv $version} ;;
		*) termux_error_exit "the replay cannot download $url" ;;
	esac
	file=$cache/$name-$version.tar.gz
	if [ ! -f "$file" ]; then
		mkdir -p "$cache"
		python3 -m pip download -q --no-deps --no-binary :all: -d "$cache" "$name==$version"
	fi
	[ "$(sha256sum "$file" | cut -d' ' -f1)" = "$sha" ] ||
		termux_error_exit "$file: SHA-256 is not $sha"
	cp "$file" "$dest"
}

# termux_setup_build_python: termux builds CPython $TERMUX_PYTHON_VERSION from source for
# crossenv's build side; here, this machine's interpreter of that version
termux_setup_build_python() {
	local python
	python=$(command -v "python$TERMUX_PYTHON_VERSION") ||
		termux_error_exit "crossenv needs a python$TERMUX_PYTHON_VERSION on this machine"
	python=$("$python" -c 'import sys; print(sys.executable)')
	export TERMUX_BUILD_PYTHON_DIR=$WORK/build-python-$TERMUX_PYTHON_VERSION
	mkdir -p "$TERMUX_BUILD_PYTHON_DIR/host-build-prefix/bin"
	ln -sfn "$python" "$TERMUX_BUILD_PYTHON_DIR/host-build-prefix/bin/python$TERMUX_PYTHON_VERSION"
}

# termux_python_in_prefix: the target python as termux's python package puts it in the prefix
# (bin/python3.X, lib/python3.X with an empty site-packages, include/python3.X, libpython3.X.so),
# from the arm64 root; call before termux_step_create_timestamp_file (it is a dependency).
termux_python_in_prefix() {
	local v=$TERMUX_PYTHON_VERSION entry lib=$TERMUX_PREFIX/lib/python$TERMUX_PYTHON_VERSION
	mkdir -p "$TERMUX_PREFIX/bin" "$lib/site-packages"
	ln -sfn "$CHROOT/usr/bin/python$v" "$TERMUX_PREFIX/bin/python$v"
	for entry in "$CHROOT/usr/lib/python$v"/*; do
		case "${entry##*/}" in site-packages | dist-packages) continue ;; esac
		ln -sfn "$entry" "$lib/${entry##*/}"
	done
	ln -sfn "$CHROOT/usr/include/python$v" "$TERMUX_PREFIX/include/python$v"
	ln -sfn "$CHROOT/usr/lib/aarch64-linux-gnu/libpython$v.so" "$TERMUX_PREFIX/lib/libpython$v.so"
}
