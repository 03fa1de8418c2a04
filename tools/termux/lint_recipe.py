#!/usr/bin/env python3
"""Check termux-packages recipes against the rules of its lint script.

Usage: python tools/termux/lint_recipe.py [packaging/termux/<package> ...]

The rules (termux-packages scripts/lint-packages.sh): package layout and
name, build.sh not executable, tab indentation, ``bash -n``, no trailing
whitespace or doubled final newline, required fields, description length,
licence names, version format, SRCURL and SHA256 rules, boolean fields,
relative paths in RM_AFTER_INSTALL/CONFFILES, SERVICE_SCRIPT pairs; for each
``*.subpackage.sh``: its name, the same file rules, a description and a
non-empty TERMUX_SUBPKG_INCLUDE of prefix-relative paths. Runs with
bash only (no NDK, no termux-packages checkout). Exit status 1 on any failure.
"""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

# termux-packages' licence names (scripts/lint-packages.sh, check_package_license)
LICENSES = {
    "AFL-2.1", "AFL-3.0", "APL-1.0", "APSL-2.0", "Apache-1.0", "Apache-1.1", "Apache-2.0", "Artistic-License-2.0",
    "Attribution", "BSD", "BSD 2-Clause", "BSD 3-Clause", "BSD New", "BSD Simplified", "BSL-1.0", "Bouncy-Castle",
    "CA-TOSL-1.1", "CC0-1.0", "CDDL-1.0", "CDDL-1.1", "CPAL-1.0", "CPL-1.0", "CPOL", "CPOL-1.02", "CUAOFFICE-1.0",
    "CeCILL-1", "CeCILL-2", "CeCILL-2.1", "CeCILL-B", "CeCILL-C", "Codehaus", "Copyfree", "curl", "Day",
    "Day-Addendum", "ECL2", "EPL-1.0", "EPL-2.0", "EUDATAGRID", "EUPL-1.1", "EUPL-1.2", "Eiffel-2.0", "Entessa-1.0",
    "Facebook-Platform", "Fair", "Frameworx-1.0", "GPL-2.0", "GPL-2.0-only", "GPL-2.0-or-later", "AGPL-3.0",
    "AGPL-3.0-only", "AGPL-3.0-or-later", "GPL-3.0", "GPL-3.0-only", "GPL-3.0-or-later", "Go", "hdparm", "HPND",
    "HSQLDB", "Historical", "IBMPL-1.0", "IJG", "IPAFont-1.0", "ISC", "IU-Extreme-1.1.1", "ImageMagick", "JA-SIG",
    "JSON", "JTidy", "LGPL-2.0", "LGPL-2.0-only", "LGPL-2.0-or-later", "LGPL-2.1", "LGPL-2.1-only",
    "LGPL-2.1-or-later", "LGPL-3.0", "LGPL-3.0-only", "LGPL-3.0-or-later", "LPPL-1.0", "Libpng", "Lucent-1.02",
    "MIT", "MPL-2.0", "MS-PL", "MS-RL", "MirOS", "Motosoto-0.9.1", "Mozilla-1.1", "Multics", "NASA-1.3", "NAUMEN",
    "NCSA", "NOSL-3.0", "NTP", "NUnit-2.6.3", "NUnit-Test-Adapter-2.6.3", "Nethack", "Nokia-1.0a", "OCLC-2.0",
    "OSL-3.0", "OpenLDAP", "OpenSSL", "OFL-1.1", "Opengroup", "PHP-3.0", "PHP-3.01", "PostgreSQL", "Public Domain",
    "Public Domain - SUN", "PythonPL", "PythonSoftFoundation", "QTPL-1.0", "RPL-1.5", "Real-1.0", "RicohPL",
    "SUNPublic-1.0", "Scala", "SimPL-2.0", "Sleepycat", "Sybase-1.0", "TMate", "UPL-1.0", "Unicode-DFS-2015",
    "Unlicense", "UoI-NCSA", "VIM License", "VovidaPL-1.0", "W3C", "WTFPL", "wxWindows", "X11", "Xnet", "ZLIB",
    "ZPL-2.0",
}
BOOLEANS = ("TERMUX_PKG_SKIP_SRC_EXTRACT", "TERMUX_PKG_METAPACKAGE", "TERMUX_PKG_ESSENTIAL",
            "TERMUX_PKG_NO_STATICSPLIT", "TERMUX_PKG_BUILD_IN_SRC", "TERMUX_PKG_AUTO_UPDATE",
            "TERMUX_PKG_HOSTBUILD", "TERMUX_PKG_PLATFORM_INDEPENDENT", "TERMUX_PKG_NO_ELF_CLEANER")
FIELDS = ("TERMUX_PKG_HOMEPAGE", "TERMUX_PKG_DESCRIPTION", "TERMUX_PKG_LICENSE", "TERMUX_PKG_MAINTAINER",
          "TERMUX_PKG_VERSION", "TERMUX_PKG_REVISION", "TERMUX_PKG_SRCURL", "TERMUX_PKG_SHA256",
          "TERMUX_PKG_RM_AFTER_INSTALL", "TERMUX_PKG_CONFFILES", "TERMUX_PKG_SERVICE_SCRIPT",
          "TERMUX_PKG_API_LEVEL", *BOOLEANS)
PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
VERSION = re.compile(r"^(\d+:)?[0-9][A-Za-z0-9.+~-]*$")
SEP = "\x1f"


SUBPACKAGE_FIELDS = ("TERMUX_SUBPKG_DESCRIPTION", "TERMUX_SUBPKG_INCLUDE", "TERMUX_SUBPKG_DEPEND_ON_PARENT",
                     "TERMUX_SUBPKG_PLATFORM_INDEPENDENT")


def read_fields(script: Path, names: tuple[str, ...] = FIELDS) -> dict[str, list[str]]:
    """Source the script in bash (as the linter does) and read its variables."""
    dump = "; ".join(
        f'printf "%s\\x1e" {name}; printf "%s\\x1f" "${{{name}[@]}}"; printf "\\x1d"' for name in names
    )
    code = f"set +e +u; TERMUX_PKG_API_LEVEL=24; . {str(script)!r} >/dev/null 2>&1; {dump}"
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True).stdout
    fields = {}
    for record in out.split("\x1d"):
        if "\x1e" in record:
            name, values = record.split("\x1e", 1)
            fields[name] = values.split(SEP)[:-1]
    return {k: v for k, v in fields.items() if any(v)}


def check_indentation(lines: list[str]) -> list[str]:
    problems = []
    in_array = False
    heredoc_end = None
    for number, line in enumerate(lines, 1):
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        match = re.search(r"[^(/%#]<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?", line)
        if match and "<<<" not in line:
            heredoc_end = match.group(1)
        if re.match(r"^(\t+ +| +\t+)", line):
            problems.append(f"line {number}: mixed indentation")
        if "=(" in line:
            in_array = True
        if not in_array and line.startswith(" "):
            problems.append(f"line {number}: indent with tabs")
        if line.endswith(")"):
            in_array = False
    return problems


def check_file(script: Path) -> list[str]:
    """The rules every recipe file follows: newlines, mode, indentation, syntax, whitespace."""
    problems = []
    raw = script.read_bytes()
    if raw.endswith(b"\n\n"):
        problems.append("duplicate newlines at the end")
    if not raw.endswith(b"\n"):
        problems.append("no newline at the end")
    if script.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH):
        problems.append(f"{script.name} must not be executable")
    lines = raw.decode().split("\n")
    problems += check_indentation(lines)
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    if syntax.returncode or syntax.stderr:
        problems.append(f"bash -n: {syntax.stderr.strip()}")
    problems += [f"line {i}: trailing whitespace" for i, line in enumerate(lines, 1) if line != line.rstrip()]
    return problems


def lint_subpackage(script: Path) -> list[str]:
    name = script.name.removesuffix(".subpackage.sh")
    problems = [f"{name}: {p}" for p in check_file(script)]
    if not PACKAGE_NAME.match(name):
        problems.append(f"invalid subpackage name {name!r}")
    fields = read_fields(script, SUBPACKAGE_FIELDS)
    description = fields.get("TERMUX_SUBPKG_DESCRIPTION", [""])[0]
    if not description:
        problems.append(f"{name}: TERMUX_SUBPKG_DESCRIPTION is not set")
    if len(description) > 100:
        problems.append(f"{name}: TERMUX_SUBPKG_DESCRIPTION is longer than 100 characters")
    include = " ".join(fields.get("TERMUX_SUBPKG_INCLUDE", [])).split()
    if not include:
        problems.append(f"{name}: TERMUX_SUBPKG_INCLUDE is empty")
    problems += [f"{name}: TERMUX_SUBPKG_INCLUDE: {path!r} must be relative to the prefix"
                 for path in include if path.startswith("/")]
    depend = fields.get("TERMUX_SUBPKG_DEPEND_ON_PARENT", [""])[0]
    if depend and depend not in ("true", "false", "unversioned", "deps"):
        problems.append(f"{name}: TERMUX_SUBPKG_DEPEND_ON_PARENT must be true, false, unversioned or deps")
    return problems


def lint(package_dir: Path) -> list[str]:
    problems: list[str] = []
    name = package_dir.name
    script = package_dir / "build.sh"
    if not script.is_file():
        return [f"{name}: no build.sh"]
    if not PACKAGE_NAME.match(name) or len(name) < 2:
        problems.append(f"invalid package name {name!r}")
    problems += check_file(script)
    for subpackage in sorted(package_dir.glob("*.subpackage.sh")):
        problems += lint_subpackage(subpackage)
    fields = read_fields(script)

    def one(key: str) -> str:
        return fields.get(key, [""])[0]

    for key in ("TERMUX_PKG_HOMEPAGE", "TERMUX_PKG_DESCRIPTION", "TERMUX_PKG_LICENSE", "TERMUX_PKG_MAINTAINER",
                "TERMUX_PKG_VERSION"):
        if not one(key):
            problems.append(f"{key} is not set")
    if len(one("TERMUX_PKG_DESCRIPTION")) > 100:
        problems.append("TERMUX_PKG_DESCRIPTION is longer than 100 characters")
    for lic in filter(None, (x.strip() for x in one("TERMUX_PKG_LICENSE").split(","))):
        if lic not in LICENSES and "custom" not in lic and lic != "non-free":
            problems.append(f"unknown licence {lic!r}")
    version = one("TERMUX_PKG_VERSION")
    if version and not VERSION.match(version):
        problems.append(f"invalid version {version!r}")
    revision = one("TERMUX_PKG_REVISION")
    if revision and not (revision.isdigit() and 1 <= int(revision) <= 999999999):
        problems.append(f"invalid revision {revision!r}")
    api = one("TERMUX_PKG_API_LEVEL")
    if api and not (api.isdigit() and int(api) >= 24):
        problems.append("TERMUX_PKG_API_LEVEL must be >= 24")
    urls = fields.get("TERMUX_PKG_SRCURL", [])
    sums = fields.get("TERMUX_PKG_SHA256", [])
    if not urls and one("TERMUX_PKG_SKIP_SRC_EXTRACT") != "true":
        problems.append("TERMUX_PKG_SRCURL is not set")
    for url in urls:
        if not url.startswith(("https://", "git+https://")):
            problems.append(f"SRCURL {url!r} is neither https:// nor git+https://")
    if sums:
        if len(sums) != len(urls):
            problems.append("TERMUX_PKG_SRCURL and TERMUX_PKG_SHA256 have different lengths")
        for digest in sums:
            if digest != "SKIP_CHECKSUM" and not re.fullmatch(r"[0-9a-f]{64}", digest):
                problems.append(f"malformed SHA-256 {digest!r}")
    elif urls and not urls[0].startswith("git+"):
        problems.append("TERMUX_PKG_SHA256 is not set (needed unless SRCURL is a git repository)")
    for key in BOOLEANS:
        if key in fields and one(key) not in ("true", "false"):
            problems.append(f"{key} must be true or false, not {one(key)!r}")
    for key in ("TERMUX_PKG_RM_AFTER_INSTALL", "TERMUX_PKG_CONFFILES"):
        for path in " ".join(fields.get(key, [])).split():
            if path.startswith("/"):
                problems.append(f"{key}: {path!r} must be relative to the prefix")
    service = fields.get("TERMUX_PKG_SERVICE_SCRIPT", [])
    if len(service) % 2:
        problems.append("TERMUX_PKG_SERVICE_SCRIPT must hold name/command pairs")
    return problems


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2] / "packaging" / "termux"
    dirs = [Path(a) for a in argv] or sorted(p for p in root.iterdir() if p.is_dir())
    failed = False
    for package_dir in dirs:
        problems = lint(package_dir)
        print(f"{package_dir.name}: {'PASS' if not problems else 'FAIL'}")
        for problem in problems:
            print(f"  - {problem}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
