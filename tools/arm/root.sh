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
