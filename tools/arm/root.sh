# shellcheck shell=bash
# The arm64 Debian root that tools/arm/check.sh and tools/termux/replay.sh run
# aarch64 code in (qemu-user through binfmt_misc). Source it, then call
# arm_root: it sets CHROOT (created once, cached under $CACHE, keyed by its
# package list) and arm_root_mount bind-mounts /proc, /sys, /dev and /dev/pts into it.

# bookworm (Python 3.11) unless MNN_ENGINE_ARM_SUITE says otherwise (sid: Python 3.14, Termux's)
ARM_SUITE=${MNN_ENGINE_ARM_SUITE:-bookworm}
# runit: runsv and sv, which termux-services' service directories are run with
ARM_PACKAGES=python3,python3-venv,python3-dev,python3-pip,g++,ninja-build,pkg-config,ca-certificates,runit
CACHE=${MNN_ENGINE_ARM_CACHE:-$HOME/.cache/mnn-engine/arm}

arm_root() {
	if ! command -v qemu-aarch64-static >/dev/null || ! command -v mmdebstrap >/dev/null; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static binfmt-support mmdebstrap >/dev/null
	fi
	[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
	update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
	[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || { echo "binfmt_misc has no qemu-aarch64 entry"; return 1; }
	local key
	key=$(echo "$ARM_SUITE $ARM_PACKAGES" | sha256sum | cut -c1-12)
	CHROOT=$CACHE/root-$key
	if [ ! -x "$CHROOT/usr/bin/python3" ]; then
		mkdir -p "$CACHE"
		rm -rf "$CHROOT.tmp"
		# the mirror may serve a snapshot whose Release is past its Valid-Until (sid's is short)
		mmdebstrap --arch=arm64 --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
			--include="$ARM_PACKAGES" "$ARM_SUITE" "$CHROOT.tmp"
		mv "$CHROOT.tmp" "$CHROOT"
	fi
	cp /etc/resolv.conf "$CHROOT/etc/resolv.conf"
	# the host's CA bundle: it may hold a proxy's certificate authority that pip inside the root needs
	cp /etc/ssl/certs/ca-certificates.crt "$CHROOT/etc/ssl/certs/host-ca-certificates.crt"
}

ARM_MOUNTS=()
# shellcheck disable=SC2317  # called by EXIT traps
arm_root_unmount() {
	local i
	for ((i = ${#ARM_MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${ARM_MOUNTS[i]}" 2>/dev/null || true; done
}

# arm_root_mount [SOURCE:TARGET ...]: /proc, /sys, /dev, /dev/pts (a bind of
# /dev leaves out its submounts; pexpect's ptys need it) and extra bind mounts
# (TARGET inside the root); unmounted by arm_root_unmount.
arm_root_mount() {
	local fs spec
	for fs in proc sys dev dev/pts; do
		if ! mountpoint -q "$CHROOT/$fs"; then
			mount --bind "/$fs" "$CHROOT/$fs"
			ARM_MOUNTS+=("$CHROOT/$fs")
		fi
	done
	for spec in "$@"; do
		mkdir -p "$CHROOT/${spec#*:}"
		mount --bind "${spec%%:*}" "$CHROOT/${spec#*:}"
		ARM_MOUNTS+=("$CHROOT/${spec#*:}")
	done
}

# arm_crossenv DIR: a crossenv (build-python on this machine, cross-python
# reporting the root's aarch64 python) with meson-python's build tools on the
# build side; sets CROSS_PYTHON and puts the build tools first on PATH.
arm_crossenv() {
	local env=$1
	if [ ! -x "$env/cross/bin/python" ]; then
		[ -x "$env.tool/bin/python" ] || { python3 -m venv "$env.tool" && "$env.tool/bin/pip" install -q crossenv==1.6.2; }
		(cd / && "$env.tool/bin/python" -m crossenv "$CHROOT/usr/bin/python3" "$env" >/dev/null)
		"$env/bin/build-pip" install -q meson meson-python cython ninja build wheel
	fi
	export CROSS_PYTHON=$env/cross/bin/python
	export PATH=$env/build/bin:$PATH
}

# arm_cross_wheel LOG: mnn-engine's aarch64 wheel in source mode (MNN 3.6.1
# from the vendored tarball with our patches), cross-compiled on this machine
# (Debian's g++-aarch64-linux-gnu, a meson cross file, crossenv over the
# root's python; compiling MNN under emulation would take hours), from the
# checkout's files; prints the wheel's path. The build log goes to LOG.
arm_cross_wheel() {
	local log=$1 xwork=$CACHE/cross-source
	command -v aarch64-linux-gnu-g++ >/dev/null ||
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q g++-aarch64-linux-gnu ccache >/dev/null
	arm_crossenv "$CACHE/crossenv"
	rm -rf "$xwork/src" "$xwork/dist"
	mkdir -p "$xwork/src/subprojects/MNN"
	git ls-files -co --exclude-standard -z | tar --null -T - -c | tar -x -C "$xwork/src"
	tar -xzf "${MNN_ENGINE_VENDOR:-$PWD/../shared/vendor}/MNN-3.6.1.tar.gz" -C "$xwork/src/subprojects/MNN" --strip-components=1
	tools/mnn/apply_patches.sh "$xwork/src/subprojects/MNN" >&2
	# Debian's multiarch pyconfig.h includes <aarch64-linux-gnu/python3.X/pyconfig.h>: -idirafter finds it
	cat >"$xwork/cross.ini" <<-EOF
		[binaries]
		c = ['ccache', 'aarch64-linux-gnu-gcc']
		cpp = ['ccache', 'aarch64-linux-gnu-g++']
		ar = 'aarch64-linux-gnu-ar'
		strip = 'aarch64-linux-gnu-strip'
		cmake = 'cmake'
		python = '$CROSS_PYTHON'

		[properties]
		needs_exe_wrapper = true

		[built-in options]
		c_args = ['-idirafter', '$CHROOT/usr/include']
		cpp_args = ['-idirafter', '$CHROOT/usr/include']

		[host_machine]
		system = 'linux'
		cpu_family = 'aarch64'
		cpu = 'aarch64'
		endian = 'little'
	EOF
	if ! (cd "$xwork/src" && CCACHE_DIR=$HOME/.cache/mnn-engine/ccache-aarch64 CCACHE_BASEDIR=$xwork CCACHE_NOHASHDIR=1 \
		"$CROSS_PYTHON" -m build -w -n -x -o "$xwork/dist" "-Csetup-args=--cross-file=$xwork/cross.ini" \
		-Csetup-args=-Dmnn=subproject "-Cbuild-dir=$xwork/build" . >"$log" 2>&1); then
		tail -30 "$log" >&2
		return 1
	fi
	ls "$xwork"/dist/mnn_engine-*linux_aarch64.whl
}

# arm_qemu: qemu-user 11 (Debian sid's static qemu-aarch64, unpacked under
# $CACHE) as binfmt_misc's aarch64 interpreter, so QEMU_CPU can select every
# kernel family MNN has: cortex-a53 (ARMv8.0: NEON only), cortex-a76 (ARMv8.2:
# fp16 arithmetic, sdot), cortex-a710 (ARMv9.0 with i8mm), max (SME2: qemu
# emulates it from 10.1 on; bookworm's 7.2 has neither SME2 nor a710). The
# entry is registered with F: the kernel keeps the interpreter open, so it
# works in the root without a copy there. Sets QEMU_VERSION.
ARM_QEMU_DEB="qemu-user_11.1.3+ds-1_amd64.deb"
arm_qemu() {
	local dir=$CACHE/${ARM_QEMU_DEB%%_amd64.deb} qemu
	qemu=$dir/usr/bin/qemu-aarch64
	if [ ! -x "$qemu" ]; then
		mkdir -p "$dir"
		curl -sSf -o "$dir.deb" "http://deb.debian.org/debian/pool/main/q/qemu/$ARM_QEMU_DEB"
		dpkg-deb -x "$dir.deb" "$dir"
		rm -f "$dir.deb"
	fi
	if ! grep -qx "interpreter $qemu" /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
		[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || echo -1 >/proc/sys/fs/binfmt_misc/qemu-aarch64
		printf ':qemu-aarch64:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:%s:PF' \
			"$qemu" >/proc/sys/fs/binfmt_misc/register
	fi
	# shellcheck disable=SC2034  # read by the scripts that source this file
	QEMU_VERSION=$("$qemu" --version | head -1)
}
