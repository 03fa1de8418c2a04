"""The chat page: ``/`` and its files under ``/static/`` (its script and
style sheet, and the libraries vendored from Debian), served from this
package so the page is one offline origin. Only the files shipped in
``static/`` are served, each read once."""

from __future__ import annotations

import functools
from pathlib import Path

from ..errors import MnnEngineError
from .app import JsonHandler

STATIC = Path(__file__).with_name("static")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".woff2": "font/woff2", ".json": "application/json"}
#: the page runs its own scripts only (no inline script, no other origin): a
#: model's output that got past the sanitiser still could not run or phone home
POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
          "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
          "frame-ancestors 'none'")


#: the files shipped in static/, by their URL name: nothing else is served
SHIPPED = frozenset(str(p.relative_to(STATIC)) for p in STATIC.rglob("*") if p.is_file())


@functools.cache
def _file(name: str) -> bytes:
    return (STATIC / name).read_bytes()


class PageHandler(JsonHandler):
    """``/``: the page; ``/static/NAME``: one of its files."""

    def get(self, name: str = "index.html") -> None:
        if name not in SHIPPED:
            raise MnnEngineError("not_found", f"no route GET {self.request.path}")
        body = _file(name)
        self.set_header("Content-Type", TYPES.get(Path(name).suffix, "text/plain; charset=utf-8"))
        self.set_header("Cache-Control", "no-cache")  # revalidated (ETag): an upgrade shows at once
        self.set_header("X-Content-Type-Options", "nosniff")
        if name == "index.html":
            self.set_header("Content-Security-Policy", POLICY)
            self.set_header("Referrer-Policy", "no-referrer")
        self.finish(body)
