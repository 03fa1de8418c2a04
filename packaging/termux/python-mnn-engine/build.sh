TERMUX_PKG_HOMEPAGE=https://github.com/mnn-engine/mnn-engine
TERMUX_PKG_DESCRIPTION="Run MNN language models on the device and serve them as an OpenAI-compatible API"
# mnn-engine is Apache-2.0; its chat page ships marked (MIT), DOMPurify
# (Apache-2.0 or MPL-2.0: taken as Apache-2.0), highlight.js (BSD 3-Clause),
# KaTeX (MIT) and KaTeX's fonts (OFL-1.1, MIT), each with its Debian copyright file
TERMUX_PKG_LICENSE="Apache-2.0, MIT, BSD 3-Clause, OFL-1.1"
TERMUX_PKG_LICENSE_FILE="
LICENSE
THIRD_PARTY_NOTICES.md
mnn_engine/server/static/vendor/marked/copyright
mnn_engine/server/static/vendor/dompurify/copyright
mnn_engine/server/static/vendor/highlight/copyright
mnn_engine/server/static/vendor/katex/copyright
mnn_engine/server/static/vendor/katex/fonts/copyright
"
TERMUX_PKG_MAINTAINER="@termux"
TERMUX_PKG_VERSION="0.1.0"
TERMUX_PKG_REVISION=4
TERMUX_PKG_SRCURL=https://github.com/mnn-engine/mnn-engine/releases/download/v${TERMUX_PKG_VERSION}/mnn_engine-${TERMUX_PKG_VERSION}.tar.gz
TERMUX_PKG_SHA256=2e9b5443ec6b26d53afd6c1ea95a07c9d2777a161371e30fe5b12254cabd4508
# The engine is the mnn package (MNN 3.6.1, its own recipe); its GPU backends
# are the mnn-backend-opencl and mnn-backend-vulkan subpackages, which
# mnn-engine finds and loads at run time when they are installed.
TERMUX_PKG_DEPENDS="libc++, mnn, python, python-pip"
# suggested, as llama-cpp suggests its backends: a GPU backend helps only with the right driver
TERMUX_PKG_SUGGESTS="mnn-backend-opencl, mnn-backend-vulkan"
# the vision extra: images are decoded by Pillow before MNN sees them (refused without it)
TERMUX_PKG_RECOMMENDS="python-pillow"
# aarch64 only: every phone. arm and i686 are 32-bit (llama-cpp excludes them
# too); x86_64 (Chromebooks, emulators) was never built for Android nor
# replayed, and would compile patch 0002's x86 kernels with the NDK's clang:
# excluded until it is (docs/termux.md in mnn-engine).
TERMUX_PKG_EXCLUDED_ARCHES="arm, i686, x86_64"
TERMUX_PKG_PYTHON_COMMON_BUILD_DEPS="wheel, meson-python, build, cython"
# pip-installed by the postinst, with pyproject.toml's bounds (tools/termux/lint_recipe.py compares them)
TERMUX_PKG_PYTHON_RUNTIME_DEPS="'tornado>=6.3', 'prometheus-client>=0.17'"
TERMUX_PKG_CONFFILES="etc/mnn-engine/serve.env"
TERMUX_PKG_AUTO_UPDATE=false
TERMUX_MESON_WHEEL_CROSSFILE="$TERMUX_PKG_TMPDIR/wheel-cross-file.txt"
TERMUX_PKG_EXTRA_CONFIGURE_ARGS="
--cross-file $TERMUX_MESON_WHEEL_CROSSFILE
-Dmnn=system
-Dmnn_prefix=$TERMUX_PREFIX
"
TERMUX_PKG_SERVICE_SCRIPT=(
	"mnn-engine" "exec $TERMUX_PREFIX/libexec/mnn-engine/serve 2>&1"
)

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
	local wheel
	wheel=$(find "$TERMUX_PKG_SRCDIR/dist" -name "mnn_engine-$TERMUX_PKG_VERSION-*.whl" | head -n 1)
	[ -n "$wheel" ] || termux_error_exit "the build made no mnn_engine wheel"
	pip install --force-reinstall --no-deps --prefix="$TERMUX_PREFIX" "$wheel"
	# pip records the builder's path of the wheel file; the package is not a URL install
	rm -f "$TERMUX_PREFIX"/lib/python3*/site-packages/mnn_engine-"$TERMUX_PKG_VERSION".dist-info/direct_url.json
	install -Dm644 "$TERMUX_PKG_BUILDER_DIR/serve.env" "$TERMUX_PREFIX/etc/mnn-engine/serve.env"
	install -Dm755 "$TERMUX_PKG_BUILDER_DIR/serve.sh" "$TERMUX_PREFIX/libexec/mnn-engine/serve"
	sed -i -e "s|@TERMUX_PREFIX@|$TERMUX_PREFIX|g" -e "s|@TERMUX_HOME@|$TERMUX_ANDROID_HOME|g" \
		"$TERMUX_PREFIX/libexec/mnn-engine/serve"
}

# termux_step_create_python_debscripts appends its pip step (which ends with
# "exit 0", so a failure, e.g. offline, goes unnoticed) to this postinst: a
# trap then runs mnn-engine's own check once that step has run, which names
# what is missing and the pip command that finishes the install.
termux_step_create_debscripts() {
	cat <<-POSTINST_EOF >./postinst
		#!$TERMUX_PREFIX/bin/sh
		if [ "\$1" = configure ]; then
			trap 'LD_PRELOAD="" "$TERMUX_PREFIX/bin/python" -m mnn_engine.cli.dependencies' EXIT
		fi
		exit 0
	POSTINST_EOF
	chmod 0755 postinst
}

termux_step_post_massage() {
	# Provenance: the build info must say it was built against the mnn package.
	local info
	info=$(find "$TERMUX_PKG_MASSAGEDIR" -name _build_info.json | head -n 1)
	[ -n "$info" ] || termux_error_exit "the wheel carries no _build_info.json"
	grep -q "\"mode\": \"system\"" "$info" || termux_error_exit "mnn-engine was not built with -Dmnn=system"
	# (the MNN version itself is checked at configure time: meson.build reads
	# MNN_VERSION_* from the mnn package's <MNN/MNNDefine.h> and stops on another)
	grep -q "\"mnn_source\": \"installed MNN 3.6.1 at $TERMUX_PREFIX\"" "$info" ||
		termux_error_exit "the build info does not name the mnn package's MNN 3.6.1"
}
