"""The .debs tools/termux/package_steps.sh writes (as termux-packages writes
them) are real Debian packages: the host's own dpkg installs, upgrades and
removes them with their conffiles and service directory, as Termux's dpkg
does on the phone. (The replay, tools/termux/replay.sh, does the same with
the real packages in the arm64 root; this is the packaging logic alone.)"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO

STEPS = REPO / "tools" / "termux" / "package_steps.sh"
pytestmark = pytest.mark.skipif(shutil.which("dpkg") is None or shutil.which("ar") is None,
                                reason="needs dpkg and ar (Debian)")


# a mount namespace whose mounts stay in it, as the replay's
PRIVATE_MOUNTS = ("unshare", "--mount", "--propagation", "private",
                  *(() if os.geteuid() == 0 else ("--map-root-user",)))


@functools.cache
def _no_private_mounts() -> str:
    """Why PRIVATE_MOUNTS cannot be made here (e.g. in a chroot, whose / is no mount point); "" when it can."""
    probe = subprocess.run([*PRIVATE_MOUNTS, "true"], capture_output=True, text=True)
    return "" if probe.returncode == 0 else probe.stderr.strip() or f"exit {probe.returncode}"


def build(tmp_path: Path, version: str, env_text: str) -> tuple[Path, str]:
    """A package like python-mnn-engine's: a service and a conffile; returns the .deb and the prefix."""
    prefix = str(tmp_path / "data/data/com.termux/files/usr")  # the package's paths are this prefix
    stage = tmp_path / f"stage-{version}"
    # as in the replay, the staging directory is bind-mounted at the prefix while the steps run
    script = f"""
set -euo pipefail
. {STEPS}
termux_error_exit() {{ echo "$*" >&2; exit 1; }}
mkdir -p {stage}{prefix} {prefix}
mount --bind {stage}{prefix} {prefix}
TERMUX_PREFIX={prefix} TERMUX_ARCH=aarch64 TERMUX_PKG_MAINTAINER=@tests
TERMUX_PKG_SERVICE_SCRIPT=("demo" "exec $TERMUX_PREFIX/bin/demo 2>&1")
TERMUX_PKG_CONFFILES="etc/demo/demo.env"
mkdir -p "$TERMUX_PREFIX/etc/demo" "$TERMUX_PREFIX/bin"
printf '%s' "$ENV_TEXT" > "$TERMUX_PREFIX/etc/demo/demo.env"
printf '#!/bin/sh\\necho {version}\\n' > "$TERMUX_PREFIX/bin/demo"
termux_step_install_service_scripts
umount {prefix}
CONFFILES=$TERMUX_PKG_CONFFILES create_deb demo {version} {stage} {tmp_path}/debs "Depends: libc++" \\
    "Description: a demo service"
"""
    if _no_private_mounts():
        pytest.skip(f"no private mount namespace here: {_no_private_mounts()}")
    subprocess.run([*PRIVATE_MOUNTS, "bash", "-c", script], check=True,
                   env={**os.environ, "ENV_TEXT": env_text})
    return tmp_path / "debs" / f"demo_{version}_aarch64.deb", prefix


class Dpkg:
    """The host's dpkg on its own root, as Termux's dpkg on its prefix."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("info", "updates"):
            (root / "var/lib/dpkg" / sub).mkdir(parents=True)
        for name in ("status", "available"):
            (root / "var/lib/dpkg" / name).touch()
        self("--add-architecture", "aarch64")
        # what the package depends on, as Termux's base system provides it
        stand_in = root.parent / "base"
        (stand_in / "DEBIAN").mkdir(parents=True)
        (stand_in / "DEBIAN/control").write_text("Package: base\nVersion: 1\nArchitecture: aarch64\n"
                                                 "Maintainer: tests\nProvides: libc++\nDescription: base\n")
        subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(stand_in), str(root.parent / "base.deb")],
                       check=True, capture_output=True)
        self("-i", str(root.parent / "base.deb"))

    def __call__(self, *args: str) -> str:
        env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        force = [] if os.geteuid() == 0 else ["--force-not-root"]
        result = subprocess.run(["dpkg", f"--root={self.root}", *force, *args], capture_output=True, text=True,
                                env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout + result.stderr

    def query(self, field: str) -> str:
        result = subprocess.run(["dpkg-query", f"--admindir={self.root}/var/lib/dpkg", "-W", f"-f=${{{field}}}",
                                 "demo"], capture_output=True, text=True)
        return result.stdout if result.returncode == 0 else ""


def test_control_fields_conffiles_and_service_directory(tmp_path):
    deb, prefix = build(tmp_path, "1.0", "A=1\n")
    info = subprocess.run(["dpkg-deb", "-I", str(deb)], capture_output=True, text=True, check=True).stdout
    for line in ("Package: demo", "Version: 1.0", "Architecture: aarch64", "Maintainer: @tests", "Depends: libc++",
                 "Installed-Size:", "Description: a demo service"):
        assert line in info
    conffiles = subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / "control")], check=True)
    assert conffiles.returncode == 0
    assert (tmp_path / "control/conffiles").read_text().split() == [
        f"{prefix}/etc/demo/demo.env", f"{prefix}/var/service/demo/run", f"{prefix}/var/service/demo/down",
        f"{prefix}/var/service/demo/log/run", f"{prefix}/var/service/demo/log/down"]
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    rel = "." + prefix
    for path in ("etc/demo/demo.env", "var/service/demo/run", "var/service/demo/down", "var/service/demo/log/run"):
        assert f" {rel}/{path}\n" in listing
    assert " 0/0 " in listing and " root/" not in listing  # --owner=0 --group=0 --numeric-owner


def test_install_upgrade_with_a_changed_conffile_and_removal(tmp_path):
    old, prefix = build(tmp_path, "1.0", "A=1\n")
    new, _ = build(tmp_path, "1.1", "A=1\nB=2\n")
    root = tmp_path / "root"
    dpkg = Dpkg(root)
    installed = root / prefix.lstrip("/")
    dpkg("-i", str(old))
    assert dpkg.query("Status") == "install ok installed"
    run = (installed / "var/service/demo/run").read_text()
    assert run == f"#!{prefix}/bin/sh\nexec {prefix}/bin/demo 2>&1\n"
    assert (installed / "var/service/demo/down").is_file()  # not started until sv up
    assert f'"{prefix}/share/termux-services/svlogger"' in (installed / "var/service/demo/log/run").read_text()

    env_file = installed / "etc/demo/demo.env"
    env_file.write_text("A=7\n")  # the user's setting
    dpkg("-i", "--force-confold", str(new))
    assert dpkg.query("Version") == "1.1"
    assert env_file.read_text() == "A=7\n"
    assert (installed / "etc/demo/demo.env.dpkg-dist").read_text() == "A=1\nB=2\n"
    assert (installed / "bin/demo").read_text().endswith("echo 1.1\n")

    dpkg("-r", "demo")
    assert dpkg.query("Status") == "deinstall ok config-files"
    left = sorted(str(p.relative_to(installed)) for p in installed.rglob("*") if not p.is_dir())
    assert left == ["etc/demo/demo.env", "etc/demo/demo.env.dpkg-dist", "var/service/demo/down",
                    "var/service/demo/log/run", "var/service/demo/run"]
    dpkg("-P", "demo")
    assert dpkg.query("Status") == ""
    assert not [p for p in installed.rglob("*") if not p.is_dir()]


def test_an_unchanged_conffile_follows_the_upgrade(tmp_path):
    old, prefix = build(tmp_path, "1.0", "A=1\n")
    new, _ = build(tmp_path, "1.1", "A=1\nB=2\n")
    dpkg = Dpkg(tmp_path / "root")
    dpkg("-i", str(old))
    dpkg("-i", str(new))  # no prompt: the user did not change it
    assert (tmp_path / "root" / prefix.lstrip("/") / "etc/demo/demo.env").read_text() == "A=1\nB=2\n"


def test_python_postinst_installs_the_runtime_deps_with_the_package_itself(tmp_path):
    site = tmp_path / "site-packages/demo-1.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: mnn-engine\nVersion: 1.0\nRequires-Dist: numpy\n")
    script = f"""
set -euo pipefail
. {STEPS}
TERMUX_PREFIX=/p TERMUX_PYTHON_VERSION=3.14 TERMUX_PKG_PYTHON_TARGET_DEPS="tornado, prometheus-client"
python_debscripts python-mnn-engine {tmp_path}/DEBIAN {tmp_path}/site-packages
"""
    subprocess.run(["bash", "-c", script], check=True)
    postinst = (tmp_path / "DEBIAN/postinst").read_text()
    # termux_step_create_python_debscripts: the package's own name without --upgrade, so pip
    # keeps the packaged files and installs what their METADATA requires
    assert '"/p/bin/pip3" install  tornado prometheus-client mnn-engine\n' in postinst
    assert postinst.startswith("#!/p/bin/sh\nif [ \"$1\" != \"configure\" ]; then\nexit 0\nfi\n")
    assert 'py3compile" -p "python-mnn-engine" "/p/lib/python3.14/"' in postinst
    assert 'py3clean" -p "python-mnn-engine"' in (tmp_path / "DEBIAN/prerm").read_text()
