"""A model hub on loopback for the pull tests: the Hugging Face endpoints the
client uses (revision info with file sizes and hashes, ``resolve`` with the
hub's ETag / linked-etag / size / commit headers and Range requests), ModelScope's
file list and download, and manifests; with faults to order."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

import tornado.httpserver
import tornado.netutil
import tornado.web

CHUNK = 64 << 10
#: what the pull tests serve and pass: the catalog's qwen3-0.6b repo, its ModelScope twin, its big file,
#: and a backoff short enough for tests
CATALOG_REPO = "taobao-mnn/Qwen3-0.6B-MNN"
MS_REPO = "MNN/Qwen3-0.6B-MNN"
WEIGHT = "llm.mnn.weight"
FAST = {"backoff": (0.01,)}
LFS_MIN = 1024  # files from this size on are "LFS" files (SHA-256); smaller ones have a git blob id


@dataclass
class Repo:
    commit: str
    files: dict[str, bytes]
    #: ModelScope: path -> the revision of the last commit that touched it (real listings differ per file)
    revisions: dict[str, str] = field(default_factory=dict)


@dataclass
class Faults:
    drop_after: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before the connection drops (once)
    corrupt: set[str] = field(default_factory=set)  # paths served with one byte flipped
    corrupt_once: set[str] = field(default_factory=set)  # paths whose next answer has one byte flipped
    statuses: dict[str, list[int]] = field(default_factory=dict)  # path -> statuses answered first
    gated: dict[str, str] = field(default_factory=dict)  # repo -> the token that opens it
    missing: set[str] = field(default_factory=set)  # paths listed but answered 404
    delay_s: float = 0.0  # pause between chunks (a slow server)
    #: path -> bytes sent with 200, whatever the Range: RFC 9110 section 14.2 lets a server ignore Range
    #: ("A server MAY ignore the Range header field"), and a broken CDN or proxy also ends the body early
    short_ignoring_range: dict[str, int] = field(default_factory=dict)
    chunk: int = 0  # bytes per chunk when set (with delay_s: a trickle, as a phone's bad connection delivers)
    #: path, or "listing:<repo>" -> (status, Retry-After) answered first: the hubs' rate limits answer
    #: 429 with Retry-After (huggingface_hub 2.4 utils/_http.py reads it in seconds)
    throttled: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    #: paths whose next Range answer is a 206 from offset 0 whatever was asked (a broken proxy)
    wrong_offset: set[str] = field(default_factory=set)
    #: paths whose Range answers are 200 with a Content-Range (ModelScope's endpoint has answered so;
    #: modelscope_hub 0.5.1 _download.py accepts it)
    ok_with_range: set[str] = field(default_factory=set)
    #: path -> "same" (302 to this host) or "other" (302 to another host name): where the hubs send files
    redirect: dict[str, str] = field(default_factory=dict)
    #: ModelScope repo -> the token (the m_session_id cookie) that opens it; without it the listing is a
    #: plain HTTP 404, as ModelScope answers for a private repository
    private_ms: dict[str, str] = field(default_factory=dict)
    #: entries per page of the tree listing (the hub pages it, Link: rel="next" with a cursor)
    tree_page: int = 1000
    #: when set, the revision info's siblings stop after this many (the hub cuts them short on large repos)
    siblings_limit: int | None = None
    #: when set, a Bearer token outside it is 401 "Invalid credentials in Authorization header" (the hub's)
    valid_tokens: set[str] | None = None


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def repo_from_dir(model_dir: Path, commit: str = "a" * 40, extra: dict[str, bytes] | None = None) -> Repo:
    files = {str(p.relative_to(model_dir)): p.read_bytes() for p in sorted(model_dir.rglob("*")) if p.is_file()}
    return Repo(commit, {**files, **(extra or {})})


class FakeHub:
    """Start with ``with FakeHub() as hub:``; ``hub.url`` is its base URL."""

    def __init__(self) -> None:
        self.hf: dict[str, Repo] = {}
        self.modelscope: dict[str, Repo] = {}
        self.manifests: dict[str, tuple[dict, dict[str, bytes]]] = {}
        #: key -> the bytes answered as the manifest: a hostile or broken host (manifests are anyone's URL)
        self.raw_manifests: dict[str, bytes] = {}
        #: repo -> the bytes answered as its revision info (the shape huggingface_hub's HfApi.model_info parses,
        #: /api/models/{repo}/revision/{rev}?blobs=true, broken on purpose: a mirror or proxy answering junk)
        self.raw_hf_info: dict[str, bytes] = {}
        #: repo -> the bytes answered as its tree listing (broken on purpose, as raw_hf_info)
        self.raw_hf_tree: dict[str, bytes] = {}
        self.faults = Faults()
        self.served: dict[str, int] = {}  # path -> bytes sent
        self.ranges: list[tuple[str, str | None]] = []  # (path, Range header)
        self.auth: list[str | None] = []
        self.cookies: list[str | None] = []
        self.requests: list[str] = []  # the path of every request that reached the hub
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self.url = ""

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> FakeHub:
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        self.url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
        self._thread = threading.Thread(target=self._run, args=(sockets,), daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self, sockets) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        app = tornado.web.Application([
            (r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", _HfInfo, {"hub": self}),
            (r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", _HfTree, {"hub": self}),
            (r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", _HfResolve, {"hub": self}),
            (r"/redirected/([^/]+/[^/]+)/([^/]+)/(.+)", _HfRedirected, {"hub": self}),
            (r"/api/v1/models/([^/]+/[^/]+)/repo/files", _MsFiles, {"hub": self}),
            (r"/api/v1/models/([^/]+/[^/]+)/repo", _MsDownload, {"hub": self}),
            (r"/manifests/([^/]+)\.json", _Manifest, {"hub": self}),
            (r"/manifests/([^/]+)/(.+)", _ManifestFile, {"hub": self}),
        ])
        server = tornado.httpserver.HTTPServer(app)
        server.add_sockets(sockets)
        self._ready.set()
        self._loop.run_forever()
        server.stop()

    # ---------------------------------------------------------------- content
    def add_manifest(self, key: str, repo: Repo, **fields) -> str:
        files = [{"path": p, "size": len(b), "sha256": hashlib.sha256(b).hexdigest(), "url": f"{key}/{p}"}
                 for p, b in repo.files.items()]
        manifest = {"format": "mnn-engine-manifest/1", "id": key, "version": repo.commit[:8],
                    "files": files, **fields}
        self.manifests[key] = (manifest, repo.files)
        return f"{self.url}/manifests/{key}.json"


class _Handler(tornado.web.RequestHandler):
    def initialize(self, hub: FakeHub) -> None:
        self.hub = hub

    def prepare(self) -> None:
        self.hub.requests.append(self.request.path)  # every request, listings and manifests included
        self.hub.cookies.append(self.request.headers.get("Cookie"))
        given = self.request.headers.get("Authorization", "")
        valid = self.hub.faults.valid_tokens
        if valid is not None and given.startswith("Bearer ") and given[7:] not in valid:
            self.set_status(401)
            self.finish({"error": "Invalid credentials in Authorization header"})

    def throttled(self, key: str) -> bool:
        """Answer a planned 429/503 with Retry-After for ``key``; True when answered."""
        planned = self.hub.faults.throttled.get(key)
        if not planned:
            return False
        status, after = planned.pop(0)
        self.set_status(status)
        if after:
            self.set_header("Retry-After", after)
        self.finish({"error": "rate limited"})
        return True

    def _gate(self, repo: str) -> bool:
        """Answer 401/403 for a gated repo without its token; True when answered."""
        self.hub.auth.append(self.request.headers.get("Authorization"))
        token = self.hub.faults.gated.get(repo)
        if token is None or self.request.headers.get("Authorization") == f"Bearer {token}":
            return False
        self.set_status(403 if self.request.headers.get("Authorization") else 401)
        self.set_header("X-Error-Code", "GatedRepo")
        self.finish({"error": "Access to this model is restricted."})
        return True

    def _not_found(self, code: str) -> None:
        self.set_status(404)
        self.set_header("X-Error-Code", code)
        self.finish({"error": code})

    async def send_file(self, path: str, data: bytes, headers: dict[str, str]) -> None:
        faults = self.hub.faults
        if self.throttled(path):
            return
        planned = faults.statuses.get(path)
        if planned:
            self.set_status(planned.pop(0))
            self.finish("try again")
            return
        if path in faults.missing:
            self._not_found("EntryNotFound")
            return
        if path in faults.corrupt or path in faults.corrupt_once:
            faults.corrupt_once.discard(path)
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:]
        start = 0
        spec = self.request.headers.get("Range")
        self.hub.ranges.append((path, spec))
        if path in faults.short_ignoring_range:
            self.finish(data[:faults.short_ignoring_range[path]])  # 200, the Range ignored
            return
        if spec and spec.startswith("bytes=") and spec.endswith("-"):
            start = int(spec[6:-1])
            if path in faults.wrong_offset:
                faults.wrong_offset.discard(path)
                start = 0
            self.set_status(200 if path in faults.ok_with_range else 206)
            self.set_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        for name, value in headers.items():
            self.set_header(name, value)
        self.set_header("Content-Length", str(len(data) - start))
        self.set_header("Accept-Ranges", "bytes")
        drop = faults.drop_after.pop(path, None)
        end = len(data) if drop is None else min(len(data), start + drop)
        pos = start
        while pos < end:
            chunk = data[pos:min(end, pos + (faults.chunk or CHUNK))]
            self.write(chunk)
            await self.flush()
            self.hub.served[path] = self.hub.served.get(path, 0) + len(chunk)
            pos += len(chunk)
            if faults.delay_s:
                await asyncio.sleep(faults.delay_s)
        if drop is not None:
            self.request.connection.stream.close()  # mid-file: the client sees a short read
            return
        self.finish()


class _HfListing(_Handler):
    def _hf_listing(self, fault: str, raw: dict[str, bytes], repo: str, revision: str) -> Repo | None:
        """The repository a listing route lists, or None when the answer is given
        already: a planned fault, the gate, raw bytes, or the hub's own refusals
        (401 RepoNotFound for an unknown repository, which the hub does not tell
        from a private one; 404 RevisionNotFound)."""
        if self.throttled(fault) or self._gate(repo):
            return None
        if repo in raw:
            self.set_header("Content-Type", "application/json")
            self.finish(raw[repo])
            return None
        entry = self.hub.hf.get(repo)
        if entry is None:
            self.set_status(401)
            self.set_header("X-Error-Code", "RepoNotFound")
            self.finish({"error": "Repository not found"})
            return None
        if revision not in ("main", entry.commit):
            self._not_found("RevisionNotFound")
            return None
        return entry


class _HfInfo(_HfListing):
    def get(self, repo: str, revision: str) -> None:
        entry = self._hf_listing(f"listing:{repo}", self.hub.raw_hf_info, repo, revision)
        if entry is None:
            return
        siblings = []
        for path, data in entry.files.items():
            item = {"rfilename": path, "size": len(data), "blobId": git_blob_sha1(data)}
            if len(data) >= LFS_MIN:
                item["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            siblings.append(item)
        limit = self.hub.faults.siblings_limit
        self.finish({"id": repo, "sha": entry.commit, "siblings": siblings[:limit] if limit is not None else siblings})


class _HfTree(_HfListing):
    """/api/models/{repo}/tree/{rev}?recursive=true: entries as huggingface_hub 2.4 hf_api.py RepoFile and
    RepoFolder read them, paged with Link: <...&cursor=...>; rel="next" (utils/_pagination.py)."""

    def get(self, repo: str, revision: str) -> None:
        entry = self._hf_listing(f"tree:{repo}", self.hub.raw_hf_tree, repo, revision)
        if entry is None:
            return
        items: list[dict] = []
        for directory in sorted({p.rsplit("/", 1)[0] for p in entry.files if "/" in p}):
            items.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": directory})
        for path, data in entry.files.items():
            item = {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": path}
            if len(data) >= LFS_MIN:
                item["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            items.append(item)
        start = int(self.get_argument("cursor", "0"))
        end = start + self.hub.faults.tree_page
        if end < len(items):
            base = f"{self.hub.url}/api/models/{repo}/tree/{revision}?recursive=true&expand=false"
            self.set_header("Link", f'<{base}&cursor={end}>; rel="next"')
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(items[start:end]))


class _HfResolve(_Handler):
    async def get(self, repo: str, revision: str, path: str) -> None:
        if self._gate(repo):
            return
        entry = self.hub.hf.get(repo)
        if entry is None or revision not in ("main", entry.commit) or path not in entry.files:
            self._not_found("EntryNotFound")
            return
        where = self.hub.faults.redirect.get(path)
        if where is not None:  # the hubs redirect file downloads (to a CDN, or another route of theirs)
            host = self.hub.url if where == "same" else self.hub.url.replace("127.0.0.1", "localhost")
            self.redirect(f"{host}/redirected/{repo}/{entry.commit}/{path}")
            return
        data = entry.files[path]
        headers = {"X-Repo-Commit": entry.commit, "ETag": f'"{git_blob_sha1(data)}"'}
        if len(data) >= LFS_MIN:
            headers.update({"X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"', "X-Linked-Size": str(len(data))})
        await self.send_file(path, data, headers)


class _HfRedirected(_Handler):
    """Where a redirect leads: the repo's token is needed here too (a gated file)."""

    async def get(self, repo: str, commit: str, path: str) -> None:
        if self._gate(repo):
            return
        await self.send_file(path, self.hub.hf[repo].files[path], {"X-Repo-Commit": commit})


class _MsFiles(_Handler):
    def get(self, repo: str) -> None:
        if self.throttled(f"listing:{repo}") or self._gate(repo):
            return
        entry = self.hub.modelscope.get(repo)
        token = self.hub.faults.private_ms.get(repo)
        if token is not None and self.request.headers.get("Cookie") != f"m_session_id={token}":
            # a private repository asked for without its token: a plain HTTP 404 (as issue 27 recorded the
            # real endpoint answering; modelscope_hub 0.5.1 _legacy_api.py raises on the status first)
            self.set_status(404)
            self.finish({"Code": 404, "Message": "model not found", "Success": False, "Data": None})
            return
        if entry is None:
            # an unknown one: HTTP 200 with the error in the body (the same client then checks Code/Success)
            self.finish({"Code": 404, "Message": "model not found", "Success": False, "Data": None})
            return
        files = [{"Path": p, "Name": p.rsplit("/", 1)[-1], "Size": len(b), "Sha256": hashlib.sha256(b).hexdigest(),
                  "Type": "blob", "Revision": entry.revisions.get(p, entry.commit)} for p, b in entry.files.items()]
        self.finish({"Code": 200, "Data": {"Files": files}})


class _MsDownload(_Handler):
    async def get(self, repo: str) -> None:
        if self._gate(repo):
            return
        entry = self.hub.modelscope.get(repo)
        path = self.get_argument("FilePath", "")
        if entry is None or path not in entry.files or \
                self.get_argument("Revision", "master") not in ("master", entry.revisions.get(path, entry.commit)):
            self._not_found("NotFound")
            return
        await self.send_file(path, entry.files[path], {})


class _Manifest(_Handler):
    def get(self, name: str) -> None:
        if name in self.hub.raw_manifests:
            self.set_header("Content-Type", "application/json")
            self.finish(self.hub.raw_manifests[name])
            return
        if name not in self.hub.manifests:
            self._not_found("NotFound")
            return
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(self.hub.manifests[name][0]))


class _ManifestFile(_Handler):
    async def get(self, name: str, path: str) -> None:
        files = self.hub.manifests.get(name, ({}, {}))[1]
        if path not in files:
            self._not_found("NotFound")
            return
        await self.send_file(path, files[path], {})
