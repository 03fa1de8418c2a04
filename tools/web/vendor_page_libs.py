"""Vendor the chat page's JavaScript libraries from Debian's packages into
``mnn_engine/server/static/vendor/``, so the page stays one offline origin.

    python3 tools/web/vendor_page_libs.py          # apt-get download, extract, copy

Each library keeps Debian's ``copyright`` file (its licence) beside it, and
``VERSIONS.json`` records the package versions and each file's SHA-256;
tests/server/test_page_files.py checks the files against it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENDOR = REPO / "mnn_engine" / "server" / "static" / "vendor"

#: Debian package -> (files in it -> where they go under vendor/)
PACKAGES: dict[str, dict[str, str]] = {
    "libjs-marked": {"usr/share/javascript/marked/marked.umd.min.js": "marked/marked.min.js"},
    "node-dompurify": {"usr/share/nodejs/dompurify/dist/purify.min.js": "dompurify/purify.min.js"},
    "libjs-highlight.js": {
        "usr/share/javascript/highlight.js/highlight.min.js": "highlight/highlight.min.js",
        # a11y themes: contrast that meets WCAG AA, a light and a dark one
        "usr/share/javascript/highlight.js/styles/a11y-light.css": "highlight/a11y-light.css",
        "usr/share/javascript/highlight.js/styles/a11y-dark.css": "highlight/a11y-dark.css",
    },
    "libjs-katex": {
        "usr/share/javascript/katex/katex.js": "katex/katex.min.js",  # Debian's katex.js is the minified build
        "usr/share/javascript/katex/katex.min.css": "katex/katex.min.css",
    },
    "fonts-katex": {},  # the woff2 fonts, below
}
COPYRIGHT = {"libjs-marked": "marked", "node-dompurify": "dompurify", "libjs-highlight.js": "highlight",
             "libjs-katex": "katex", "fonts-katex": "katex/fonts"}


def _version(deb: Path) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], check=True, capture_output=True,
                          text=True).stdout.strip()


def main() -> int:
    versions: dict[str, object] = {"source": "Debian 12 (bookworm) packages, via apt-get download", "packages": {},
                                   "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(["apt-get", "download", *PACKAGES], cwd=work, check=True)
        if VENDOR.exists():
            shutil.rmtree(VENDOR)
        for package, files in PACKAGES.items():
            (deb,) = work.glob(f"{package}_*.deb")
            versions["packages"][package] = _version(deb)  # type: ignore[index]
            root = work / package
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
            if package == "fonts-katex":
                files = {str(f.relative_to(root)): f"katex/fonts/{f.name}"
                         for f in sorted((root / "usr/share/fonts/truetype/katex").glob("*.woff2"))}
            for source, target in files.items():
                out = VENDOR / target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile((root / source).resolve(), out)
            copyright_out = VENDOR / COPYRIGHT[package] / "copyright"
            copyright_out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / "usr/share/doc" / package / "copyright", copyright_out)
    for path in sorted(VENDOR.rglob("*")):
        if path.is_file():
            versions["files"][str(path.relative_to(VENDOR))] = hashlib.sha256(path.read_bytes()).hexdigest()  # type: ignore[index]
    (VENDOR / "VERSIONS.json").write_text(json.dumps(versions, indent=1) + "\n")
    total = sum(p.stat().st_size for p in VENDOR.rglob("*") if p.is_file())
    print(f"vendored {len(versions['files'])} files, {total / 2**20:.1f} MiB, into {VENDOR}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
