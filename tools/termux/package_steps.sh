# shellcheck shell=bash
# termux-packages' packaging steps, as far as the recipes use them, for
# tools/termux/replay.sh: written from termux-packages' own scripts (the
# mirror of termux/termux-packages, scripts/build/):
#   termux_step_install_service_scripts.sh  var/service/NAME/{run,down,log/run}
#   termux_step_create_debian_package.sh    control, conffiles, the .deb
#   termux_create_debian_subpackages.sh     a subpackage's control
#   termux_step_create_python_debscripts.sh the postinst that pip-installs
#                                           TERMUX_PKG_PYTHON_RUNTIME_DEPS
#                                           (= TARGET_DEPS, start_build.sh)
# The caller sets TERMUX_PREFIX and the recipe's TERMUX_PKG_* variables.

# termux_step_install_service_scripts: for each (name, command) pair of
# TERMUX_PKG_SERVICE_SCRIPT, $PREFIX/var/service/NAME/run holding the command,
# an empty `down` (the service starts only on `sv up`) and log/run exec'ing
# termux-services' svlogger; all of them become conffiles.
termux_step_install_service_scripts() {
	[ -n "${TERMUX_PKG_SERVICE_SCRIPT+set}" ] || return 0
	local count=${#TERMUX_PKG_SERVICE_SCRIPT[@]} i name dir
	[ "$count" != 0 ] || return 0
	[ $((count % 2)) = 0 ] || termux_error_exit "TERMUX_PKG_SERVICE_SCRIPT has to be an array of even length"
	for ((i = 0; i < count; i += 2)); do
		name=${TERMUX_PKG_SERVICE_SCRIPT[$i]}
		dir=$TERMUX_PREFIX/var/service/$name
		mkdir -p "$dir/log"
		printf '#!%s/bin/sh\n' "$TERMUX_PREFIX" >"$dir/run"
		echo -e "${TERMUX_PKG_SERVICE_SCRIPT[$((i + 1))]}" >>"$dir/run"
		chmod +x "$dir/run"
		touch "$dir/down"
		# shellcheck disable=SC2016  # $svlogger and $@ are the log script's own
		printf '#!%s/bin/sh\nsvlogger="%s/share/termux-services/svlogger"\nexec "${svlogger}" "$@"\n' \
			"$TERMUX_PREFIX" "$TERMUX_PREFIX" >"$dir/log/run"
		chmod 0700 "$dir/log/run"
		# termux lists log/down too, which no package has: dpkg takes a missing conffile as "removed by the user"
		TERMUX_PKG_CONFFILES+=" var/service/$name/run var/service/$name/down var/service/$name/log/run var/service/$name/log/down"
	done
}

# create_deb NAME VERSION ROOT OUT_DIR [FIELD: VALUE]...: ROOT holds the package's
# files at their installed paths (data/data/com.termux/files/usr/...) and
# DEBIAN/ its maintainer scripts; writes OUT_DIR/NAME_VERSION_ARCH.deb with
# Termux's control fields in Termux's order (the extra fields as given) and
# conffiles from TERMUX_PKG_CONFFILES-style paths in $CONFFILES.
create_deb() {
	local name=$1 version=$2 root=$3 out=$4 tmp field
	shift 4
	tmp=$(mktemp -d)
	mkdir -p "$root/DEBIAN"
	(cd "$root" && tar --sort=name --mtime="@${SOURCE_DATE_EPOCH:-0}" --owner=0 --group=0 --numeric-owner \
		--exclude=./DEBIAN -cJf "$tmp/data.tar.xz" -H gnu .)
	{
		echo "Package: $name"
		echo "Architecture: $TERMUX_ARCH"
		echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f 1)"
		echo "Maintainer: ${TERMUX_PKG_MAINTAINER:-@termux}"
		echo "Version: $version"
		echo "Homepage: ${TERMUX_PKG_HOMEPAGE:-https://termux.dev}"
		for field; do echo "$field"; done
	} >"$root/DEBIAN/control"
	for field in ${CONFFILES:-}; do echo "$TERMUX_PREFIX/$field"; done >"$root/DEBIAN/conffiles"
	[ -s "$root/DEBIAN/conffiles" ] || rm "$root/DEBIAN/conffiles"
	(cd "$root/DEBIAN" && tar --sort=name --mtime="@${SOURCE_DATE_EPOCH:-0}" --owner=0 --group=0 --numeric-owner \
		-cJf "$tmp/control.tar.xz" -H gnu .)
	echo "2.0" >"$tmp/debian-binary"
	mkdir -p "$out"
	rm -f "$out/${name}_${version}_$TERMUX_ARCH.deb"
	(cd "$tmp" && ar cr "$out/${name}_${version}_$TERMUX_ARCH.deb" debian-binary control.tar.xz data.tar.xz)
	rm -rf "$tmp"
}

# python_debscripts NAME DEBIAN_DIR SITE_PACKAGES: termux_step_create_python_debscripts
# for a .deb: the postinst pip-installs the runtime deps (and the package's
# own pip name when its METADATA has Requires-Dist, without --upgrade: pip
# then installs what that METADATA requires), then py3compile; the prerm
# py3clean. A postinst the recipe wrote (termux_step_create_debscripts) is
# continued, without its last line when that is "exit 0", as termux's is.
python_debscripts() {
	local name=$1 debian=$2 site=$3 deps metadata upgrade="--upgrade"
	# termux_step_start_build: RUNTIME_DEPS defaults to TARGET_DEPS, "false" means none
	deps=${TERMUX_PKG_PYTHON_RUNTIME_DEPS:-${TERMUX_PKG_PYTHON_TARGET_DEPS:-}}
	[ "$deps" != false ] || deps=""
	deps=${deps//, / }
	metadata=$(find "$site" -name METADATA)
	if [ "$(echo "$metadata" | grep -c .)" = 1 ] && grep -q '^Requires-Dist' "$metadata"; then
		deps+=" $(grep '^Name:' "$metadata" | cut -d' ' -f2)"
	fi
	if [[ " $deps " == *" ${name#python-} "* ]]; then upgrade=""; fi
	mkdir -p "$debian"
	if [ ! -f "$debian/postinst" ]; then
		echo "#!$TERMUX_PREFIX/bin/sh" >"$debian/postinst"
	elif tail -n1 "$debian/postinst" | grep -q 'exit 0'; then
		sed -i '$d' "$debian/postinst"
	fi
	cat >>"$debian/postinst" <<-EOF
		if [ "\$1" != "configure" ]; then
			exit 0
		fi
		echo "Installing dependencies for $name through pip..."
		LD_PRELOAD='' LDFLAGS="-lpython$TERMUX_PYTHON_VERSION" MATHLIB="m" "$TERMUX_PREFIX/bin/pip3" install $upgrade $deps
		if [ -f "$TERMUX_PREFIX/bin/py3compile" ]; then
			LD_PRELOAD='' "$TERMUX_PREFIX/bin/py3compile" -p "$name" "$TERMUX_PREFIX/lib/python$TERMUX_PYTHON_VERSION/"
		fi
		exit 0
	EOF
	cat >"$debian/prerm" <<-EOF
		#!$TERMUX_PREFIX/bin/sh
		if [ "\$1" != "remove" ]; then
			exit 0
		fi
		if [ -f "$TERMUX_PREFIX/bin/py3clean" ]; then
			LD_PRELOAD='' "$TERMUX_PREFIX/bin/py3clean" -p "$name"
		fi
		exit 0
	EOF
	chmod 0755 "$debian/postinst" "$debian/prerm"
}

# termux_step_install_license, for bionic. With
# TERMUX_PKG_LICENSE_FILE, each file of the source to share/doc/NAME/ (a
# basename seen before gets a .N suffix), failing when one is missing; without
# it, each licence of TERMUX_PKG_LICENSE that carries copyright (MIT, BSD, ...)
# from the source's LICENSE/COPYING file, the rest as a link to termux's
# generic text (../../LICENSES/NAME.txt, which termux-licenses installs).
termux_step_install_license() {
	local doc=$TERMUX_PREFIX/share/doc/$TERMUX_PKG_NAME file target counter=1 license found
	local -A seen=()
	mkdir -p "$doc"
	if [ -n "${TERMUX_PKG_LICENSE_FILE:-}" ]; then
		while read -r file; do
			[ -n "$file" ] || continue
			[ -f "$TERMUX_PKG_SRCDIR/$file" ] || termux_error_exit "$TERMUX_PKG_SRCDIR/$file does not exist"
			target=$(basename "$file")
			if [ -n "${seen[$target]:-}" ]; then target+=".$((counter++))"; else seen[$target]=1; fi
			cp -f "$TERMUX_PKG_SRCDIR/$file" "$doc/$target"
		done <<<"${TERMUX_PKG_LICENSE_FILE//,/$'\n'}"
		return 0
	fi
	counter=0
	while read -r license; do
		license=$(echo "$license" | sed 's/^ *//; s/ *$//')
		[ -n "$license" ] || continue
		target=copyright
		[ "$counter" = 0 ] || target=copyright.$counter
		case "$license" in
			BSD | "BSD 2-Clause" | "BSD 3-Clause" | "BSD Simplified" | curl | HPND | ISC | Libpng | MIT | OFL-1.1 | PythonPL | X11 | ZLIB)
				found=""
				for file in COPYING Copyright.txt copyright Copyright COPYRIGHT licence Licence LICENCE license License LICENSE \
					license.txt License.txt LICENSE.txt LICENSE.TXT license.md LICENSE.md; do
					if [ -f "$TERMUX_PKG_SRCDIR/$file" ]; then found=$file; break; fi
				done
				[ -n "$found" ] || termux_error_exit "$TERMUX_PKG_NAME: no licence file for $license in the sources"
				cp -f "$TERMUX_PKG_SRCDIR/$found" "$doc/$target" ;;
			*) ln -sf "../../LICENSES/$license.txt" "$doc/$target" ;;
		esac
		counter=$((counter + 1))
	done <<<"${TERMUX_PKG_LICENSE//,/$'\n'}"
}
