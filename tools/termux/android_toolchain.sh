# shellcheck shell=bash
# A stand-in for the standalone toolchain termux_setup_toolchain_29 makes
# from the NDK, so that termux_step_configure_cmake's bionic arguments
# (-DCMAKE_SYSTEM_NAME=Android -DCMAKE_ANDROID_STANDALONE_TOOLCHAIN=...) take
# CMake's and MNN's Android code paths here, where there is no NDK.
#
# What CMake checks of it (Modules/Platform/Android-Determine.cmake and
# Android/Determine-Compiler-Standalone.cmake of the cmake in use):
# sysroot/usr/include/android/api-level.h (the API level), a bin/*-gcc (the
# tool prefix: termux copies clang to bin/aarch64-linux-android-gcc for
# exactly this) and bin/clang, bin/clang++ (its compilers). Behind those names
# is Debian's g++-aarch64-linux-gnu for glibc; the wrappers drop the
# clang-only arguments the Android path adds (--target=, --gcc-toolchain=,
# the NDK --sysroot=: Debian's gcc has its own glibc sysroot). MNN's Android
# link line (-llog -landroid, CMakeLists.txt "target_link_libraries(MNN PUBLIC
# log m android)") links against empty stand-ins of the NDK's liblog.so and
# libandroid.so; under termux's -Wl,--as-needed they leave no DT_NEEDED when
# nothing uses them, as on the NDK. The NDK's OpenMP runtime (libomp), which
# termux_step_massage asks the compiler for, is gcc's libgomp here.
#
# What this does not reproduce: clang's __ANDROID__ predefine and bionic's
# headers (MNN's #ifdef __ANDROID__ code: system properties in the CPU probe,
# the OpenCL and GLES loader paths), libc++ instead of libstdc++, the NDK's
# libraries' symbols. Those need the NDK.

# android_standalone_toolchain DIR API_LEVEL: write the stand-in to DIR.
android_standalone_toolchain() {
	local tc=$1 api=$2 name real stubs
	stubs=$tc/sysroot/usr/lib/aarch64-linux-android/$api
	rm -rf "$tc"
	mkdir -p "$tc/bin" "$tc/sysroot/usr/include/android" "$stubs"
	printf '#pragma once\n#define __ANDROID_API__ %s\n' "$api" >"$tc/sysroot/usr/include/android/api-level.h"
	for name in clang:gcc clang++:g++ aarch64-linux-android-clang:gcc aarch64-linux-android-clang++:g++ \
		aarch64-linux-android-gcc:gcc aarch64-linux-android-g++:g++ aarch64-linux-android-cpp:cpp; do
		real=aarch64-linux-gnu-${name#*:}
		cat >"$tc/bin/${name%%:*}" <<-EOF
			#!/bin/sh
			# stand-in for the NDK's ${name%%:*}: $real (see tools/termux/android_toolchain.sh)
			for arg; do
				shift
				case \$arg in
					--target=*|--gcc-toolchain=*|--sysroot=$tc/*) ;;
					-dumpversion) set -- "\$@" -dumpfullversion ;;  # "12" alone fails CMake's version match
					# the NDK's OpenMP runtime (termux_step_massage's OpenMP check reads its
					# symbols): gcc's, libgomp, is the one behind these names
					-print-file-name=libomp.*) set -- "\$@" "-print-file-name=libgomp.\${arg##*.}" ;;
					*) set -- "\$@" "\$arg" ;;
				esac
			done
			exec $real "\$@" -L$stubs
		EOF
		chmod +x "$tc/bin/${name%%:*}"
	done
	for name in log android; do
		aarch64-linux-gnu-gcc -shared -nostdlib -o "$stubs/lib$name.so" -x c /dev/null
	done
}
