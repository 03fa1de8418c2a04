"""The chat page's files: what it links is served (with the right type, to
anyone: the page is public), nothing else under /static/ is, and the vendored
libraries are the bytes VERSIONS.json records (tools/web/vendor_page_libs.py)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from live_server import KEY, server_fixture

import mnn_engine.server

STATIC = Path(mnn_engine.server.__file__).with_name("static")
VENDOR = STATIC / "vendor"

keyed_server = server_fixture("tiny", api_key=KEY)


def test_the_vendored_libraries_are_the_recorded_debian_files_with_their_licences():
    versions = json.loads((VENDOR / "VERSIONS.json").read_text())
    on_disk = {str(p.relative_to(VENDOR)) for p in VENDOR.rglob("*") if p.is_file()} - {"VERSIONS.json"}
    assert on_disk == set(versions["files"])
    for name, digest in versions["files"].items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    for library in ("marked", "dompurify", "highlight", "katex", "katex/fonts"):
        assert "License:" in (VENDOR / library / "copyright").read_text(), library
    assert set(versions["packages"]) == {"libjs-marked", "node-dompurify", "libjs-highlight.js", "libjs-katex",
                                         "fonts-katex"}


def test_every_file_the_page_links_is_served_without_the_key(keyed_server):
    page = (STATIC / "index.html").read_text()
    linked = re.findall(r'(?:src|href)="(/static/[^"]+)"', page)
    css = (VENDOR / "katex" / "katex.min.css").read_text()
    fonts = {f"/static/vendor/katex/{u}" for u in re.findall(r"url\((fonts/[^)]+\.woff2)\)", css)}
    assert len(linked) >= 8 and fonts
    types = {".js": "text/javascript", ".css": "text/css", ".woff2": "font/woff2"}
    for path in [*linked, *sorted(fonts)]:
        status, headers, body = keyed_server.request("GET", path)
        assert status == 200, path
        assert headers["content-type"].startswith(types[Path(path).suffix]), path
        assert headers["x-content-type-options"] == "nosniff"
        assert body == (STATIC / path.removeprefix("/static/")).read_bytes()
    status, headers, _ = keyed_server.request("GET", "/")
    assert status == 200 and "script-src 'self'" in headers["content-security-policy"]
    assert "'unsafe-inline'" not in headers["content-security-policy"].split("script-src")[1].split(";")[0]


@pytest.mark.parametrize("path", ["/static/../app.py", "/static/%2e%2e/app.py", "/static/nothing.js",
                                  "/static/vendor", "/static/", "/static//etc/passwd", "/static/chat.js/"])
def test_nothing_else_is_served_from_static(keyed_server, path):
    status, _, body = keyed_server.request("GET", path)
    assert status == 404, (path, status)
    assert json.loads(body)["error"]["code"] == "not_found"


def test_a_file_is_revalidated_not_sent_again(keyed_server):
    _, headers, _ = keyed_server.request("GET", "/static/chat.js")
    assert headers["cache-control"] == "no-cache" and headers["etag"]
    status, _, body = keyed_server.request("GET", "/static/chat.js", headers={"If-None-Match": headers["etag"]})
    assert status == 304 and body == b""
