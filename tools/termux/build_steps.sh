# shellcheck shell=bash
# termux-packages' build steps as far as the recipes use them, for the replay
# (tools/termux/replay.sh) and the tests: written from termux-packages' own
# scripts (scripts/build/toolchain/termux_setup_toolchain_29.sh,
# scripts/build/configure/termux_step_configure_cmake.sh,
# scripts/build/setup/termux_setup_meson.sh, termux_step_patch_package.sh),
# for their bionic (Android) flavour, cross-compiling for aarch64.
# shellcheck source=tools/termux/android_toolchain.sh
. "$(dirname "${BASH_SOURCE[0]}")/android_toolchain.sh"

# termux_setup_toolchain WORK: the build environment of termux_setup_toolchain_29
# (bionic, aarch64), with the standalone toolchain stand-in in WORK/android-standalone.
termux_setup_toolchain() {
	local work=$1
	export TERMUX_ARCH=aarch64 TERMUX_REAL_ARCH=aarch64 TERMUX_PACKAGE_LIBRARY=bionic
	export TERMUX_PREFIX=/data/data/com.termux/files/usr TERMUX_PKG_API_LEVEL=24
	export TERMUX_ANDROID_HOME=/data/data/com.termux/files/home  # scripts/properties.sh
	export TERMUX_ON_DEVICE_BUILD=false TERMUX_DEBUG_BUILD=false TERMUX_PKG_CMAKE_BUILD=Ninja
	# Termux's python is 3.14 (packages/python/build.sh); the replay sets its target's
	export TERMUX_PYTHON_VERSION=${TERMUX_PYTHON_VERSION:-3.14} TERMUX_HOST_PLATFORM=aarch64-linux-android
	export CCTERMUX_HOST_PLATFORM=$TERMUX_HOST_PLATFORM$TERMUX_PKG_API_LEVEL
	export TERMUX_MAKE_PROCESSES=${TERMUX_MAKE_PROCESSES:-$(nproc)}
	export TERMUX_COMMON_CACHEDIR=$work/cache
	export TERMUX_STANDALONE_TOOLCHAIN=$work/android-standalone
	android_standalone_toolchain "$TERMUX_STANDALONE_TOOLCHAIN" "$TERMUX_PKG_API_LEVEL"
	export PATH=$TERMUX_STANDALONE_TOOLCHAIN/bin:$PATH
	export CC=$TERMUX_HOST_PLATFORM-clang CXX=$TERMUX_HOST_PLATFORM-clang++ CPP=$TERMUX_HOST_PLATFORM-cpp
	export LD=aarch64-linux-gnu-ld AR=aarch64-linux-gnu-ar RANLIB=aarch64-linux-gnu-ranlib STRIP=aarch64-linux-gnu-strip
	export PKG_CONFIG=pkg-config
	ln -sf "$(command -v "$LD")" "$TERMUX_STANDALONE_TOOLCHAIN/bin/$LD"
	export CFLAGS="-fstack-protector-strong -Oz" CXXFLAGS="-fstack-protector-strong -Oz"
	export CPPFLAGS="-isystem$TERMUX_PREFIX/include/c++/v1 -isystem$TERMUX_PREFIX/include"
	export LDFLAGS="-L$TERMUX_PREFIX/lib -Wl,-rpath=$TERMUX_PREFIX/lib -Wl,--enable-new-dtags -Wl,--as-needed -Wl,-z,relro,-z,now"
	export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
	export CCACHE_COMPILERTYPE=gcc  # what is behind the stand-in's "clang" (ccache goes by the name otherwise)
	# the stand-in's wrappers are rewritten on every run: hash what they run, not their mtime
	export CCACHE_COMPILERCHECK="%compiler% -v"
}

termux_error_exit() { echo "ERROR: $*" >&2; exit 1; }
termux_setup_cmake() { :; }  # host cmake
termux_setup_ninja() { :; }  # host ninja
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
		if [ "$TERMUX_PACKAGE_LIBRARY" = bionic ]; then echo "system = 'android'"; else echo "system = 'linux'"; fi
	} > "$TERMUX_MESON_CROSSFILE"
}
# termux_step_configure_cmake (scripts/build/configure/), cross-compiling for bionic
# (TERMUX_PKG_CMAKE_CROSSCOMPILING: true unless a recipe says otherwise, termux_step_setup_variables)
# shellcheck disable=SC2086  # TERMUX_PKG_EXTRA_CONFIGURE_ARGS is a word list, as in termux-packages
termux_step_configure_cmake() {
	CXXFLAGS+=" --target=$CCTERMUX_HOST_PLATFORM"
	CFLAGS+=" --target=$CCTERMUX_HOST_PLATFORM"
	LDFLAGS+=" --target=$CCTERMUX_HOST_PLATFORM"
	cmake -G "$TERMUX_PKG_CMAKE_BUILD" "$TERMUX_PKG_SRCDIR" \
		-DCMAKE_AR="$(command -v "$AR")" -DCMAKE_UNAME="$(command -v uname)" \
		-DCMAKE_RANLIB="$(command -v "$RANLIB")" -DCMAKE_STRIP="$(command -v "$STRIP")" \
		-DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_C_FLAGS="$CFLAGS $CPPFLAGS" -DCMAKE_CXX_FLAGS="$CXXFLAGS $CPPFLAGS" \
		-DCMAKE_FIND_ROOT_PATH="$TERMUX_PREFIX" -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER \
		-DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
		-DCMAKE_INSTALL_PREFIX="$TERMUX_PREFIX" -DCMAKE_INSTALL_LIBDIR="$TERMUX_PREFIX/lib" \
		-DCMAKE_INSTALL_INCLUDEDIR="$TERMUX_PREFIX/include" \
		-DCMAKE_MAKE_PROGRAM="$(command -v ninja)" -DCMAKE_SKIP_INSTALL_RPATH=ON \
		-DCMAKE_USE_SYSTEM_LIBRARIES=True -DDOXYGEN_EXECUTABLE= -DBUILD_TESTING=OFF \
		"-DCMAKE_CROSSCOMPILING=$([ "${TERMUX_PKG_CMAKE_CROSSCOMPILING:-true}" = true ] && echo True || echo False)" "-DCMAKE_LINKER=$TERMUX_STANDALONE_TOOLCHAIN/bin/$LD $LDFLAGS" \
		-DCMAKE_SYSTEM_NAME=Android -DCMAKE_SYSTEM_VERSION="$TERMUX_PKG_API_LEVEL" \
		-DCMAKE_ANDROID_STANDALONE_TOOLCHAIN="$TERMUX_STANDALONE_TOOLCHAIN" \
		-DCMAKE_SYSTEM_PROCESSOR="$TERMUX_ARCH" \
		$TERMUX_PKG_EXTRA_CONFIGURE_ARGS
}
# shellcheck disable=SC2086  # as above
termux_step_configure_meson() {
	termux_setup_meson
	CC=gcc CXX=g++ CFLAGS='' CXXFLAGS='' CPPFLAGS='' LDFLAGS='' $TERMUX_MESON setup \
		"$TERMUX_PKG_SRCDIR" "$TERMUX_PKG_BUILDDIR" --cross-file "$TERMUX_MESON_CROSSFILE" \
		--prefix "$TERMUX_PREFIX" --libdir lib --includedir include --buildtype release --strip \
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

