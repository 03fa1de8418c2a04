TERMUX_PKG_HOMEPAGE=https://github.com/alibaba/MNN
TERMUX_PKG_DESCRIPTION="Lightweight deep learning inference engine with its LLM runtime"
TERMUX_PKG_LICENSE="Apache-2.0"
TERMUX_PKG_MAINTAINER="@termux"
TERMUX_PKG_VERSION="3.6.1"
TERMUX_PKG_REVISION=4
TERMUX_PKG_SRCURL=git+https://github.com/alibaba/MNN
TERMUX_PKG_GIT_BRANCH="${TERMUX_PKG_VERSION}"
TERMUX_PKG_DEPENDS="libc++"
# libMNN.so has no SONAME version: nothing stops python-mnn-engine, built
# against this version's headers, from loading another version's library.
# Revbump python-mnn-engine with every version (or revision) of this package.
# The source stays the tag's git clone, checked against the commit, until the
# tag archive's SHA-256 is computed where GitHub can be reached (docs/termux.md
# in mnn-engine says why it could not be here); then SRCURL becomes
# https://github.com/alibaba/MNN/archive/refs/tags/${TERMUX_PKG_VERSION}.tar.gz
# with TERMUX_PKG_SHA256 and TERMUX_PKG_AUTO_UPDATE=true (our patches must
# then apply to the new version, or the update's build fails visibly).
TERMUX_PKG_AUTO_UPDATE=false
# aarch64 only: every phone. arm and i686 are 32-bit (llama-cpp excludes them
# too); x86_64 (Chromebooks, emulators) was never built for Android nor
# replayed, and would compile patch 0002's x86 kernels with the NDK's clang:
# excluded until it is (docs/termux.md in mnn-engine).
TERMUX_PKG_EXCLUDED_ARCHES="arm, i686, x86_64"
# KleidiAI (Arm's micro-kernels) is left out: MNN 3.6.1 compiles it in but
# leaves it off at run time (MNN_KLEIDIAI_DEFAULT_ON=OFF) and its LLM engine
# never sets the CPU_ENABLE_KLEIDIAI hint, so it would be a download and a
# longer build for code that never runs. MNN's own ARMv8.2/ARMv8.6/SME2
# kernels (MNN_ARM82, MNN_SME2) are chosen at run time from the CPU's features.
_MNN_COMMIT=d407447ed56c4121a11ccbd266dc184ca1ead0c2
# Backends are separate libraries (MNN_SEP_BUILD): libMNN_CL.so and
# libMNN_Vulkan.so go to the mnn-backend-* subpackages; MNN loads the GPU
# drivers themselves at run time (its wrappers dlopen libOpenCL/libvulkan).
# termux-packages configures CMake for Android (-DCMAKE_SYSTEM_NAME=Android).
# MNN then writes its libraries to ${NATIVE_LIBRARY_OUTPUT}/${ANDROID_ABI}
# (ANDROID_ABI comes only from the NDK's own toolchain file) and skips its
# install rules, unless MNN_BUILD_FOR_ANDROID_COMMAND is on, as in MNN's
# project/android/build_64.sh: then every library is at the top of the build
# directory and the install rules are there.
TERMUX_PKG_EXTRA_CONFIGURE_ARGS="
-DMNN_BUILD_FOR_ANDROID_COMMAND=ON
-DMNN_KLEIDIAI=OFF
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
}

# MNN's CMake install leaves out libllm (and the image and audio libraries it
# needs), the backend libraries and the LLM headers, so the files are
# installed here, each from the one place the build put it (without
# build-tree RPATHs: CMAKE_SKIP_BUILD_RPATH above).
termux_step_make_install() {
	local lib found
	for lib in libMNN.so libMNN_Express.so libllm.so libMNNOpenCV.so libMNNAudio.so libMNN_CL.so libMNN_Vulkan.so; do
		found=$(find "$TERMUX_PKG_BUILDDIR" -name "$lib" -type f)
		[ -n "$found" ] || termux_error_exit "the build made no $lib"
		[ "$(echo "$found" | wc -l)" = 1 ] || termux_error_exit "the build made $lib twice: $found"
		install -Dm755 "$found" "$TERMUX_PREFIX/lib/$lib"
	done
	local dir header
	for dir in include/MNN transformers/llm/engine/include/llm; do
		while IFS= read -r header; do
			install -Dm644 "$TERMUX_PKG_SRCDIR/$dir/$header" "$TERMUX_PREFIX/include/$(basename "$dir")/$header"
		done < <(cd "$TERMUX_PKG_SRCDIR/$dir" && find . -type f | sed 's|^\./||')
	done
}
