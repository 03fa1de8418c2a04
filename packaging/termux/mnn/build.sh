TERMUX_PKG_HOMEPAGE=https://github.com/alibaba/MNN
TERMUX_PKG_DESCRIPTION="Lightweight deep learning inference engine with its LLM runtime"
TERMUX_PKG_LICENSE="Apache-2.0"
TERMUX_PKG_MAINTAINER="@mnn-engine"
TERMUX_PKG_VERSION="3.6.1"
TERMUX_PKG_SRCURL=git+https://github.com/alibaba/MNN
TERMUX_PKG_GIT_BRANCH="${TERMUX_PKG_VERSION}"
TERMUX_PKG_DEPENDS="libc++"
TERMUX_PKG_AUTO_UPDATE=false
# only aarch64 was ever built and tested (the replay, qemu); llama-cpp excludes the same
TERMUX_PKG_EXCLUDED_ARCHES="arm, i686"
# MNN downloads KleidiAI (Arm's micro-kernels, SME2 included) at configure
# time and quietly builds without it when the download fails, so the recipe
# fetches the release MNN 3.6.1 pins itself (the sha256 is that of GitHub's
# archive, whose MD5 MNN's cmake/KleidiAI.cmake checks).
_MNN_COMMIT=d407447ed56c4121a11ccbd266dc184ca1ead0c2
_KLEIDIAI_VERSION=1.16.0
_KLEIDIAI_SHA256=57b0a95c559ec6a4b1460bc742af600bfb6cdff8dc39154b376c25347d7b0891
# Backends are separate libraries (MNN_SEP_BUILD): libMNN_CL.so and
# libMNN_Vulkan.so go to the mnn-backend-* subpackages; MNN loads the GPU
# drivers themselves at run time (its wrappers dlopen libOpenCL/libvulkan).
TERMUX_PKG_EXTRA_CONFIGURE_ARGS="
-DMNN_SEP_BUILD=ON
-DCMAKE_SKIP_BUILD_RPATH=ON
-DMNN_BUILD_SHARED_LIBS=ON
-DMNN_BUILD_LLM=ON
-DMNN_BUILD_LLM_OMNI=ON
-DLLM_SUPPORT_VISION=ON
-DLLM_SUPPORT_HTTP_RESOURCE=OFF
-DMNN_IMGCODECS=ON
-DMNN_LOW_MEMORY=ON
-DMNN_SUPPORT_TRANSFORMER_FUSE=ON
-DMNN_OPENCL=ON
-DMNN_VULKAN=ON
-DMNN_USE_LOGCAT=OFF
-DMNN_BUILD_TOOLS=OFF
-DMNN_BUILD_TEST=OFF
-DMNN_BUILD_DEMO=OFF
-DMNN_LLM_BUILD_DEMO=OFF
-DMNN_BUILD_BENCHMARK=OFF
-DMNN_BUILD_QUANTOOLS=OFF
-DMNN_BUILD_CONVERTER=OFF
"

termux_step_post_get_source() {
	if [ "$(git -C "$TERMUX_PKG_SRCDIR" rev-parse HEAD)" != "$_MNN_COMMIT" ]; then
		termux_error_exit "MNN $TERMUX_PKG_VERSION is not commit $_MNN_COMMIT"
	fi
	local archive="$TERMUX_PKG_CACHEDIR/kleidiai-$_KLEIDIAI_VERSION.tar.gz"
	termux_download \
		"https://github.com/ARM-software/kleidiai/archive/refs/tags/v$_KLEIDIAI_VERSION.tar.gz" \
		"$archive" "$_KLEIDIAI_SHA256"
	rm -rf "$TERMUX_PKG_SRCDIR/3rd_party/kleidiai"
	mkdir -p "$TERMUX_PKG_SRCDIR/3rd_party/kleidiai"
	tar -xf "$archive" -C "$TERMUX_PKG_SRCDIR/3rd_party/kleidiai" --strip-components=1
}

termux_step_pre_configure() {
	TERMUX_PKG_EXTRA_CONFIGURE_ARGS+=" -DKLEIDIAI_SRC_DIR=$TERMUX_PKG_SRCDIR/3rd_party/kleidiai"
	# The ARMv8.2 (fp16, dot product) and ARMv8.6 (i8mm) kernels are compiled
	# in and chosen at run time from the CPU's features; 32-bit ARM has none.
	if [ "$TERMUX_ARCH" = aarch64 ]; then
		TERMUX_PKG_EXTRA_CONFIGURE_ARGS+=" -DMNN_ARM82=ON"
	fi
}

# MNN's CMake install leaves out libllm (and the image and audio libraries it
# needs), the backend libraries and the LLM headers, and on Android
# (CMAKE_SYSTEM_NAME=Android) installs nothing at all, so the files are
# installed here, from where the build put them (without build-tree RPATHs:
# CMAKE_SKIP_BUILD_RPATH above).
termux_step_make_install() {
	local lib
	for lib in libMNN.so express/libMNN_Express.so libllm.so tools/cv/libMNNOpenCV.so tools/audio/libMNNAudio.so \
		source/backend/opencl/libMNN_CL.so source/backend/vulkan/libMNN_Vulkan.so; do
		[ -f "$TERMUX_PKG_BUILDDIR/$lib" ] || termux_error_exit "the build made no $lib"
		install -Dm600 "$TERMUX_PKG_BUILDDIR/$lib" "$TERMUX_PREFIX/lib/$(basename "$lib")"
	done
	mkdir -p "$TERMUX_PREFIX/include"
	cp -r "$TERMUX_PKG_SRCDIR/include/MNN" "$TERMUX_PREFIX/include/"
	cp -r "$TERMUX_PKG_SRCDIR/transformers/llm/engine/include/llm" "$TERMUX_PREFIX/include/"
}
