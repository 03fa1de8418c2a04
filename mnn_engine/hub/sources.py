"""Where a model comes from: a Hugging Face or ModelScope repository, or a
manifest at a URL. Each is listed as files with their size and hash, the
source's own (Hugging Face: SHA-256 for LFS files, the git blob SHA-1 for the
rest; ModelScope: SHA-256; a manifest: SHA-256), so every byte is checked.

Endpoints and tokens come from the variables users already set, read as the
official clients read them (``mnn_engine.config``): ``HF_ENDPOINT``,
``HF_TOKEN`` (or ``HUGGING_FACE_HUB_TOKEN``, or the token file ``hf auth
login`` writes), ``HF_HUB_OFFLINE``; ``MODELSCOPE_ENDPOINT`` (or
``MODELSCOPE_DOMAIN``) and ``MODELSCOPE_API_TOKEN``.

Every request is retried on 408, 429 and 5xx, waiting what ``Retry-After``
says (at most ``MAX_RETRY_AFTER_S``) or a growing backoff, listings too.
"""

from __future__ import annotations

import email.utils
import fnmatch
import hashlib
import http.client
import ipaddress
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from .. import config, jsonutil
from ..checks import invalid, is_int
from ..errors import MnnEngineError
from ..net import is_loopback_host
from ..version import __version__

TIMEOUT_S = 30.0
MANIFEST_FORMAT = "mnn-engine-manifest/1"
USER_AGENT = f"mnn-engine/{__version__}"
#: the largest listing or manifest read
MAX_LISTING_BYTES = 16 << 20
#: the most a listing (one JSON answer: a manifest, a tree page) may take to arrive, whatever its rate: a host
#: that answers a byte a second would otherwise hold a pull worker for as long as it likes
LISTING_DEADLINE_S = 60.0
#: a listed path's longest, and its components' (ext4's NAME_MAX)
MAX_PATH, MAX_NAME = 1024, 255
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def is_repo_name(text: str) -> bool:
    """``text`` is a hub repository's name, ORG/NAME (the one rule for it)."""
    return _REPO.match(text) is not None
#: answers worth asking again (huggingface_hub 2.4 retries the same: utils/_http.py _DEFAULT_RETRY_ON_STATUS_CODES)
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: the longest wait a Retry-After may ask for before the request is tried again
MAX_RETRY_AFTER_S = 60.0


@dataclass(frozen=True)
class Retry:
    """How often and how long a request is tried again: ``times`` retries,
    waiting ``backoff[i]`` (the last repeats) unless the source says how long;
    ``stop`` ends a wait at once (``pull_cancelled``)."""

    times: int = 5
    backoff: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    stop: threading.Event | None = None

    def wait(self, attempt: int, retry_after: str | None, what: str) -> None:
        seconds = _retry_after_seconds(retry_after)
        if seconds is None:
            seconds = self.backoff[min(attempt, len(self.backoff) - 1)]
        if self.stop is None:
            time.sleep(seconds)
        elif self.stop.wait(seconds):
            raise MnnEngineError("pull_cancelled", f"{what}: the pull was stopped", param="model")


DEFAULT_RETRY = Retry()


def _retry_after_seconds(value: str | None) -> float | None:
    """RFC 9110 10.2.3: seconds, or an HTTP date; bounded by MAX_RETRY_AFTER_S."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(when - time.time(), 0.0), MAX_RETRY_AFTER_S)


@dataclass(frozen=True)
class RemoteFile:
    """One file of a model at its source. ``sha256`` or ``git_sha1`` (the
    git blob hash Hugging Face gives for small files) checks its bytes."""

    path: str
    size: int
    url: str
    sha256: str | None = None
    git_sha1: str | None = None


@dataclass(frozen=True)
class Listing:
    """What a pull downloads: the source, the repository or manifest URL, the
    revision asked for and the one it resolved to, and the files."""

    source: str  # hf, modelscope or manifest
    repo: str
    revision: str
    commit: str
    files: tuple[RemoteFile, ...]
    headers: dict[str, str] = field(default_factory=dict)  # sent to the source's own host only
    name: str | None = None
    model_id: str | None = None
    policy: UrlPolicy = field(default_factory=lambda: DEFAULT_POLICY)  # what its files and redirects may fetch

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "repo": self.repo, "revision": self.revision, "commit": self.commit,
                "files": [{"path": f.path, "size": f.size, "sha256": f.sha256, "git_sha1": f.git_sha1}
                          for f in self.files]}


def _token_header(source: str) -> dict[str, str]:
    token = config.hub_token(source)
    if not token:
        return {}
    if source == "modelscope":  # modelscope_hub 0.5.1 _legacy_api.py: older /api/v1 routes read the cookie
        return {"Authorization": f"Bearer {token}", "Cookie": f"m_session_id={token}"}
    return {"Authorization": f"Bearer {token}"}


def _loopback_http(url: str) -> bool:
    """An http:// URL on this machine's loopback (the tests' fake hubs)."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "http" and bool(parts.hostname) and is_loopback_host(f"[{parts.hostname}]")


@dataclass(frozen=True)
class UrlPolicy:
    """Which URLs a pull may fetch: manifests, the files they list, and
    redirects from either (hub listings use the default policy: their
    endpoints come from the operator's HF_ENDPOINT / MODELSCOPE_DOMAIN).

    Always ``https``, or ``http`` only where the URL that named it is plain
    http on loopback too (a local test hub); never ``file:``, ``ftp:``,
    ``data:``. With ``public_only`` (pulls asked for over the HTTP API) the
    host must also resolve to public addresses only, unless the URL matches
    one of ``allowed`` (shell patterns, ``serve --allow-pull-url``): no pull
    reaches this machine's or the LAN's services on a client's behalf."""

    public_only: bool = False
    allowed: tuple[str, ...] = ()

    def check(self, url: str, *, referrer: str, what: str) -> str:
        if any(fnmatch.fnmatchcase(url, pattern) for pattern in self.allowed):
            return url
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if not (scheme == "https" or (scheme == "http" and _loopback_http(url) and _loopback_http(referrer))):
            raise MnnEngineError("pull_refused", f"{what}: refused to fetch {scheme or 'a relative'}: URL "
                                 f"{_shown(url)} (only https)", param="model")
        if self.public_only and not _public_host(urllib.parse.urlsplit(url).hostname or ""):
            raise MnnEngineError("pull_refused", f"{what}: refused to fetch {_shown(url)}: its host is not a public "
                                 "address (serve --allow-pull-url PATTERN allows it)", param="model")
        return url


DEFAULT_POLICY = UrlPolicy()
#: what to try when a hub cannot be reached
WAYS_OUT = ("try --source modelscope or --source hf, HF_ENDPOINT or MODELSCOPE_ENDPOINT for a mirror, a local "
             "model directory, or tools/models/build_test_models.py for a test model")


def _public_host(host: str) -> bool:
    """Whether every address ``host`` resolves to is a public one."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_global for info in infos)


def _shown(url: str) -> str:
    """A URL for an error message: scheme, host and path, at most 200 characters."""
    parts = urllib.parse.urlsplit(url)
    return (f"{parts.scheme}://{parts.netloc}{parts.path}" if parts.netloc else url)[:200]


def _origin(url: str) -> tuple[str, str]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects follow the pull's ``UrlPolicy`` too (urllib's own rule admits
    ftp), and keep the credentials while they stay on the source's host, as
    huggingface_hub does (a gated file behind a same-host redirect needs the
    token); a redirect to another host (a CDN) never gets them."""

    def __init__(self, policy: UrlPolicy, credentials: dict[str, str], origin: tuple[str, str]) -> None:
        self.policy, self.credentials, self.origin = policy, credentials, origin

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        self.policy.check(newurl, referrer=req.full_url, what=_shown(req.full_url))
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) == self.origin:
            for name, value in self.credentials.items():
                new.add_unredirected_header(name, value)
        return new


def open_url(url: str, headers: dict[str, str], *, what: str, source: str,
             extra: dict[str, str] | None = None, timeout: float = TIMEOUT_S,
             policy: UrlPolicy = DEFAULT_POLICY, retry: Retry | None = None) -> Any:
    """Open ``url`` (GET) if ``policy`` allows it, trying again on 408, 429
    and 5xx as ``retry`` says (``DEFAULT_RETRY`` when None). The credentials in ``headers`` go to the
    source's own host only. HTTP errors become MnnEngineError with the
    variable to set named for 401/403."""
    policy.check(url, referrer=url, what=what)
    if source == "hf" and config.hf_offline():
        raise MnnEngineError("pull_failed", f"{what}: HF_HUB_OFFLINE is set, so no request goes to the hub "
                             "(unset it to pull, or load a model directory)", param="model")
    opener = urllib.request.build_opener(_CheckedRedirects(policy, headers, _origin(url)))
    retry = retry or DEFAULT_RETRY
    attempt = 0
    while True:
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(extra or {})})
        for name, value in headers.items():
            request.add_unredirected_header(name, value)
        try:
            return opener.open(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code not in RETRY_STATUSES or attempt >= retry.times:
                error = http_error(exc.code, exc.headers.get("X-Error-Code", ""), what, source, _error_message(exc))
                if exc.code in RETRY_STATUSES:
                    error = MnnEngineError(error.code, f"{error.message} (after {attempt} retries; pull again "
                                           "to resume)", param=error.param)
                raise error from None
            retry_after = exc.headers.get("Retry-After")
            exc.close()
        retry.wait(attempt, retry_after, what)
        attempt += 1


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The hub's own words for an error (Hugging Face: {"error": ...}; ModelScope: {"Message": ...})."""
    try:
        body = jsonutil.loads(exc.read(65536))
    except (OSError, ValueError, RecursionError):
        return ""
    text = body.get("error", body.get("Message", "")) if isinstance(body, dict) else ""
    return text[:200] if isinstance(text, str) else ""


def http_error(status: int, hub_code: str, what: str, source: str, hub_message: str = "") -> MnnEngineError:
    token_var = {"hf": "HF_TOKEN", "modelscope": "MODELSCOPE_API_TOKEN"}.get(source)
    has_token = bool(config.hub_token(source)) if source in ("hf", "modelscope") else False
    if status == 401 and "invalid credentials" in hub_message.lower():
        # the hub's answer to a token it does not know (huggingface_hub reports it so, not as "not found")
        return MnnEngineError("pull_unauthorized", f"{what}: the hub refused the token ({hub_message}); "
                              f"check {token_var}", param="model")
    if status in (401, 403):
        if hub_code == "RepoNotFound" or (status == 401 and not hub_code and source == "hf"):
            hint = f" (a private repository needs {token_var})" if token_var and not has_token else ""
            return MnnEngineError("model_not_found", f"{what}: not found{hint}", param="model")
        hint = f"; set {token_var} to a token that may read it (for a gated model, accept its terms " \
               "on the website first)" if token_var else ""
        return MnnEngineError("pull_unauthorized", f"{what}: access refused (HTTP {status}){hint}", param="model")
    if status == 404:
        # ModelScope answers a private repository asked for without a token so
        hint = f" (a private repository needs {token_var})" if source == "modelscope" and not has_token else ""
        return MnnEngineError("model_not_found", f"{what}: not found (HTTP 404){hint}", param="model")
    if status == 416:
        return MnnEngineError("pull_failed", f"{what}: the source refused the byte range (HTTP 416)")
    return MnnEngineError("pull_failed", f"{what}: HTTP {status} from the source")


def _read_json(url: str, headers: dict[str, str], what: str, source: str,
               policy: UrlPolicy = DEFAULT_POLICY, retry: Retry | None = None) -> Any:
    return _read_json_page(url, headers, what, source, policy, retry)[0]


_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


def _read_listing(response: Any, what: str, stop: threading.Event | None = None) -> bytes:
    """A listing's bytes, at most ``MAX_LISTING_BYTES`` + 1, within
    ``LISTING_DEADLINE_S`` (each read still waits at most the socket's timeout);
    ``stop`` set (the pull's client left): given up at the next read."""
    deadline = time.monotonic() + LISTING_DEADLINE_S
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_LISTING_BYTES:
        chunk = response.read1(min(65536, MAX_LISTING_BYTES + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if stop is not None and stop.is_set():
            raise MnnEngineError("pull_cancelled", f"{what}: the pull was stopped", param="model")
        if time.monotonic() > deadline:
            raise MnnEngineError("pull_failed", f"{what}: the source sent {size} bytes in {LISTING_DEADLINE_S:.0f} s "
                                 "and had not finished (a listing must arrive within that)")
    return b"".join(chunks)


def _read_json_page(url: str, headers: dict[str, str], what: str, source: str,
                    policy: UrlPolicy = DEFAULT_POLICY, retry: Retry | None = None) -> tuple[Any, str | None]:
    """An answer's JSON and the URL of its next page (``Link: <...>; rel="next"``, GitHub's format, which
    the Hugging Face tree listing uses: huggingface_hub 2.4 utils/_pagination.py)."""
    retry = retry or DEFAULT_RETRY
    attempt = 0
    while True:  # a dropped connection is tried again too, as an HTTP 5xx is by open_url
        try:
            with open_url(url, headers, what=what, source=source, policy=policy, retry=retry) as response:
                data = _read_listing(response, what, retry.stop)
                link = _NEXT_LINK.search(response.headers.get("Link") or "")
            break
        except MnnEngineError:
            raise
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if attempt >= retry.times:
                reason = getattr(exc, "reason", exc)
                raise MnnEngineError("pull_failed", f"{what}: {reason} (host {urllib.parse.urlsplit(url).netloc}; "
                                     f"{WAYS_OUT})") from exc
        retry.wait(attempt, None, what)
        attempt += 1
    if len(data) > MAX_LISTING_BYTES:
        raise MnnEngineError("pull_failed", f"{what}: the answer is larger than {MAX_LISTING_BYTES >> 20} MiB")
    following = urllib.parse.urljoin(url, link.group(1)) if link else None
    if following is not None and _origin(following) != _origin(url):
        raise MnnEngineError("pull_failed", f"{what}: the next page is on another host ({_shown(following)})")
    try:
        return jsonutil.loads(data), following
    except RecursionError:
        raise MnnEngineError("pull_failed", f"{what}: the answer is nested too deeply") from None
    except ValueError as exc:
        raise MnnEngineError("pull_failed", f"{what}: the answer is not JSON ({str(exc)[:100]})") from None


def _check_relative(path: Any, what: str) -> str:
    """A listed file's path: relative, inside the model, of printable
    characters, at most ``MAX_PATH`` characters (``MAX_NAME`` a component)."""
    shown = repr(path[:100] + "..." if isinstance(path, str) and len(path) > 100 else path)
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or any(
            part in ("", ".", "..") for part in path.split("/")):
        raise MnnEngineError("invalid_manifest", f"{what}: {shown} is not a relative path inside the model",
                             param="files")
    if len(path) > MAX_PATH or any(len(part) > MAX_NAME for part in path.split("/")):
        raise MnnEngineError("invalid_manifest", f"{what}: {shown} is longer than {MAX_PATH} characters "
                             f"(or a name longer than {MAX_NAME})", param="files")
    if not path.isprintable():
        raise MnnEngineError("invalid_manifest", f"{what}: {shown} holds control characters", param="files")
    return path


def _object(entry: Any, what: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise MnnEngineError("pull_failed", f"{what}: a file entry is not an object")
    return entry


def _check_repo(repo: str) -> str:
    if not is_repo_name(repo):
        raise invalid("model", f"{repo!r} is not a repository name (ORG/NAME)")
    return repo


# ---------------------------------------------------------------- Hugging Face
def list_hf(repo: str, revision: str = "main", retry: Retry | None = None) -> Listing:
    """The files of a Hugging Face model repository at ``revision`` (``retry``: how its
    requests are tried again, and the stop that ends them)."""
    _check_repo(repo)
    headers = _token_header("hf")
    base = config.hf_endpoint()
    info = _read_json(f"{base}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}",
                      headers, f"hf:{repo}@{revision}", "hf", retry=retry)
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not _SHA1.match(commit):
        raise MnnEngineError("pull_failed", f"hf:{repo}: the hub's answer has no commit")
    files = []
    for entry in _hf_tree(base, repo, commit, headers, retry):
        path = _check_relative(entry.get("path"), f"hf:{repo}")
        lfs = entry.get("lfs") or {}
        if not isinstance(lfs, dict):
            raise MnnEngineError("pull_failed", f"hf:{repo}: the lfs entry of {path} is not an object")
        size = lfs.get("size", entry.get("size"))
        if not isinstance(size, int) or size < 0:
            raise MnnEngineError("pull_failed", f"hf:{repo}: no size for {path}")
        sha256 = lfs.get("oid", lfs.get("sha256"))
        blob = entry.get("oid")
        if not (isinstance(sha256, str) and _SHA256.match(sha256)) and not (isinstance(blob, str)
                                                                          and _SHA1.match(blob)):
            raise MnnEngineError("pull_failed", f"hf:{repo}: no hash for {path}")
        files.append(RemoteFile(path=path, size=size,
                                url=f"{base}/{repo}/resolve/{commit}/{urllib.parse.quote(path)}",
                                sha256=sha256 if isinstance(sha256, str) and _SHA256.match(sha256) else None,
                                git_sha1=None if isinstance(sha256, str) and _SHA256.match(sha256) else blob))
    return Listing("hf", repo, revision, commit, tuple(files), headers)


#: the most pages a tree listing may take (a repo of 100,000 files at the hub's 1,000 a page)
MAX_TREE_PAGES = 100


def _hf_tree(base: str, repo: str, commit: str, headers: dict[str, str],
             retry: Retry | None = None) -> list[dict[str, Any]]:
    """Every file of the repository at ``commit``: the recursive tree listing,
    page after page (the revision info's ``siblings`` is cut short on large
    repositories; MNN's own downloader lists the tree too). Entries as
    huggingface_hub 2.4 hf_api.py RepoFile reads them: ``path``, ``size``,
    ``oid`` (the git blob), ``lfs`` with ``oid`` (SHA-256) and ``size``."""
    url: str | None = f"{base}/api/models/{repo}/tree/{commit}?recursive=true&expand=false"
    entries: list[dict[str, Any]] = []
    for _ in range(MAX_TREE_PAGES):
        if url is None:
            return entries
        page, url = _read_json_page(url, headers, f"hf:{repo}@{commit}", "hf", retry=retry)
        if not isinstance(page, list):
            raise MnnEngineError("pull_failed", f"hf:{repo}: the hub's tree listing is not a list")
        entries += [e for e in (_object(e, f"hf:{repo}") for e in page) if e.get("type") != "directory"]
    raise MnnEngineError("pull_failed", f"hf:{repo}: the tree listing has more than {MAX_TREE_PAGES} pages")


# ---------------------------------------------------------------- ModelScope
def list_modelscope(repo: str, revision: str = "master", retry: Retry | None = None) -> Listing:
    """The files of a ModelScope model repository at ``revision`` (``retry`` as for ``list_hf``)."""
    _check_repo(repo)
    headers = _token_header("modelscope")
    base = config.modelscope_endpoint()
    query = urllib.parse.urlencode({"Revision": revision, "Recursive": "true"})
    answer = _read_json(f"{base}/api/v1/models/{repo}/repo/files?{query}", headers,
                        f"modelscope:{repo}@{revision}", "modelscope", retry=retry)
    if isinstance(answer, dict) and (answer.get("Success") is False or
                                     answer.get("Code", 200) not in (200, "200", None)):
        # an error in the body (modelscope_hub 0.5.1 _legacy_api.py checks Success and Code the same way)
        code, message = answer.get("Code"), str(answer.get("Message") or "the hub answered an error")[:200]
        if code in (404, "404"):
            raise http_error(404, "", f"modelscope:{repo}", "modelscope")
        if code in (401, 403, "401", "403"):
            raise http_error(int(code), "", f"modelscope:{repo}", "modelscope")
        raise MnnEngineError("pull_failed", f"modelscope:{repo}: {message} (Code {code})", param="model")
    data = answer.get("Data") if isinstance(answer, dict) else None
    entries = data.get("Files") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise MnnEngineError("pull_failed", f"modelscope:{repo}: the answer has no file list", param="model")
    files, revisions = [], []
    for entry in entries:
        entry = _object(entry, f"modelscope:{repo}")
        if entry.get("Type") == "tree":
            continue
        path = _check_relative(entry.get("Path"), f"modelscope:{repo}")
        size, sha256 = entry.get("Size"), entry.get("Sha256")
        if not isinstance(size, int) or size < 0 or not (isinstance(sha256, str) and _SHA256.match(sha256)):
            raise MnnEngineError("pull_failed", f"modelscope:{repo}: no size or SHA-256 for {path}")
        # Each file has the revision of the last commit that touched it: download that one, so what is
        # fetched is what was listed even if the branch moves meanwhile.
        pinned = entry.get("Revision") if isinstance(entry.get("Revision"), str) and entry.get("Revision") else \
            revision
        revisions.append(pinned)
        query = urllib.parse.urlencode({"Revision": pinned, "FilePath": path})
        files.append(RemoteFile(path=path, size=size, url=f"{base}/api/v1/models/{repo}/repo?{query}",
                                sha256=sha256))
    return Listing("modelscope", repo, revision, _listing_commit(revisions, files, revision), tuple(files), headers)


def _listing_commit(revisions: list[str], files: list[RemoteFile], branch: str) -> str:
    """What a ModelScope listing is a version of. Its files carry the commit
    that last touched each, not the branch's head (and ModelScope's client
    resolves none): one commit when they agree, else a digest of the listing
    (paths, sizes, hashes, revisions), so ``--update`` sees any change. Never
    the branch name, which stays the same when the files do not."""
    if len(set(revisions)) == 1 and revisions[0] != branch:
        return revisions[0]
    digest = hashlib.sha256(jsonutil.dumps(sorted([f.path, f.size, f.sha256, r]
                                                  for f, r in zip(files, revisions, strict=True))))
    return "listing-" + digest.hexdigest()[:40]


# ---------------------------------------------------------------- manifests
def parse_manifest(data: Any, url: str, policy: UrlPolicy = DEFAULT_POLICY) -> Listing:
    """Validate a manifest (see docs/manifest.md) fetched from ``url``."""
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise MnnEngineError("invalid_manifest", f"{url}: not a manifest (\"format\": \"{MANIFEST_FORMAT}\")",
                             param="format")
    model_id, version = data.get("id"), data.get("version")
    if not isinstance(model_id, str) or not model_id or not isinstance(version, str) or not version:
        raise MnnEngineError("invalid_manifest", f"{url}: \"id\" and \"version\" must be non-empty strings",
                             param="id")
    minimum = data.get("min_engine_version")
    if minimum is not None and (not isinstance(minimum, str) or version_tuple(minimum) is None):
        raise MnnEngineError("invalid_manifest", f"{url}: min_engine_version {str(minimum)[:40]!r} is not a version",
                             param="min_engine_version")
    if minimum is not None and version_tuple(minimum) > version_tuple(__version__):
        raise MnnEngineError("engine_too_old", f"{model_id} {version} needs mnn-engine {minimum} or newer "
                             f"(this is {__version__})", param="min_engine_version")
    entries = data.get("files")
    if not isinstance(entries, list) or not entries:
        raise MnnEngineError("invalid_manifest", f"{url}: \"files\" must be a non-empty list", param="files")
    files, seen = [], set()
    for entry in entries:
        if not isinstance(entry, dict):
            raise MnnEngineError("invalid_manifest", f"{url}: every file must be an object", param="files")
        path = _check_relative(entry.get("path"), url)
        size, sha256 = entry.get("size"), entry.get("sha256")
        if path in seen:
            raise MnnEngineError("invalid_manifest", f"{url}: {path} is listed twice", param="files")
        if not is_int(size) or size < 0:
            raise MnnEngineError("invalid_manifest", f"{url}: {path}: size must be a whole number of bytes",
                                 param="files")
        if not isinstance(sha256, str) or not _SHA256.match(sha256):
            raise MnnEngineError("invalid_manifest", f"{url}: {path}: sha256 must be 64 lowercase hex digits",
                                 param="files")
        link = entry.get("url", path)
        if not isinstance(link, str):
            raise MnnEngineError("invalid_manifest", f"{url}: {path}: url must be a string", param="files")
        seen.add(path)
        target = policy.check(urllib.parse.urljoin(url, link), referrer=url, what=f"{_shown(url)}: {path}")
        files.append(RemoteFile(path=path, size=size, url=target, sha256=sha256))
    name = data.get("name") if isinstance(data.get("name"), str) else None
    return Listing("manifest", url, version, version, tuple(files), {}, name=name, model_id=model_id, policy=policy)


def list_manifest(url: str, policy: UrlPolicy = DEFAULT_POLICY, retry: Retry | None = None) -> Listing:
    """The files a manifest at ``url`` lists (``retry`` as for ``list_hf``)."""
    return parse_manifest(_read_json(url, {}, _shown(url), "manifest", policy, retry), url, policy)


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``"3.6.1"`` -> ``(3, 6, 1)``; None for anything else."""
    parts = text.strip().split(".")
    if len(parts) > 8 or not all(p.isdigit() and len(p) <= 9 for p in parts):  # int() of 5,000 digits raises
        return None
    return tuple(int(p) for p in parts)
