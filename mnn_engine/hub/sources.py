"""Where a model comes from: a Hugging Face or ModelScope repository, or a
manifest at a URL. Each is listed as files with their size and hash, the
source's own (Hugging Face: SHA-256 for LFS files, the git blob SHA-1 for the
rest; ModelScope: SHA-256; a manifest: SHA-256), so every byte is checked.

Endpoints and tokens come from the variables users already set:
``HF_ENDPOINT`` and ``HF_TOKEN`` (or ``HUGGING_FACE_HUB_TOKEN``);
``MODELSCOPE_DOMAIN`` and ``MODELSCOPE_API_TOKEN``.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from ..errors import MnnEngineError
from ..version import __version__

TIMEOUT_S = 30.0
MANIFEST_FORMAT = "mnn-engine-manifest/1"
USER_AGENT = f"mnn-engine/{__version__}"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


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

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "repo": self.repo, "revision": self.revision, "commit": self.commit,
                "files": [{"path": f.path, "size": f.size, "sha256": f.sha256, "git_sha1": f.git_sha1}
                          for f in self.files]}


def hf_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def modelscope_endpoint() -> str:
    domain = os.environ.get("MODELSCOPE_DOMAIN", "www.modelscope.cn").rstrip("/")
    return domain if domain.startswith(("http://", "https://")) else f"https://{domain}"


def _token_header(*names: str) -> dict[str, str]:
    for name in names:
        token = os.environ.get(name, "").strip()
        if token:
            return {"Authorization": f"Bearer {token}"}
    return {}


def open_url(url: str, headers: dict[str, str], *, what: str, source: str,
             extra: dict[str, str] | None = None, timeout: float = TIMEOUT_S) -> Any:
    """Open ``url`` (GET). The credentials in ``headers`` are not forwarded
    when the source redirects to another host (a CDN). HTTP errors become
    MnnEngineError with the variable to set named for 401/403."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(extra or {})})
    for name, value in headers.items():
        request.add_unredirected_header(name, value)
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise http_error(exc.code, exc.headers.get("X-Error-Code", ""), what, source) from None


def http_error(status: int, hub_code: str, what: str, source: str) -> MnnEngineError:
    token_var = {"hf": "HF_TOKEN", "modelscope": "MODELSCOPE_API_TOKEN"}.get(source)
    if status in (401, 403):
        if hub_code == "RepoNotFound" or (status == 401 and not hub_code and source == "hf"):
            hint = f" (a private repository needs {token_var})" if token_var else ""
            return MnnEngineError("model_not_found", f"{what}: not found{hint}", param="model")
        hint = f"; set {token_var} to a token that may read it (for a gated model, accept its terms " \
               "on the website first)" if token_var else ""
        return MnnEngineError("pull_unauthorized", f"{what}: access refused (HTTP {status}){hint}", param="model")
    if status == 404:
        return MnnEngineError("model_not_found", f"{what}: not found (HTTP 404)", param="model")
    if status == 416:
        return MnnEngineError("pull_failed", f"{what}: the source refused the byte range (HTTP 416)")
    return MnnEngineError("pull_failed", f"{what}: HTTP {status} from the source")


def _read_json(url: str, headers: dict[str, str], what: str, source: str) -> Any:
    try:
        with open_url(url, headers, what=what, source=source) as response:
            return json.loads(response.read(16 << 20))
    except MnnEngineError:
        raise
    except (OSError, ValueError) as exc:
        raise MnnEngineError("pull_failed", f"{what}: {exc}") from exc


def _check_relative(path: Any, what: str) -> str:
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or any(
            part in ("", ".", "..") for part in path.split("/")):
        raise MnnEngineError("invalid_manifest", f"{what}: {path!r} is not a relative path inside the model",
                             param="files")
    return path


def _check_repo(repo: str) -> str:
    if not _REPO.match(repo):
        raise MnnEngineError("invalid_argument", f"{repo!r} is not a repository name (ORG/NAME)", param="model")
    return repo


# ---------------------------------------------------------------- Hugging Face
def list_hf(repo: str, revision: str = "main") -> Listing:
    """The files of a Hugging Face model repository at ``revision``."""
    _check_repo(repo)
    headers = _token_header("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
    base = hf_endpoint()
    info = _read_json(f"{base}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}?blobs=true",
                      headers, f"hf:{repo}@{revision}", "hf")
    commit = info.get("sha") if isinstance(info, dict) else None
    siblings = info.get("siblings") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not _SHA1.match(commit) or not isinstance(siblings, list):
        raise MnnEngineError("pull_failed", f"hf:{repo}: the hub's answer has no commit or file list")
    files = []
    for entry in siblings:
        path = _check_relative(entry.get("rfilename"), f"hf:{repo}")
        lfs = entry.get("lfs") or {}
        size = lfs.get("size", entry.get("size"))
        if not isinstance(size, int) or size < 0:
            raise MnnEngineError("pull_failed", f"hf:{repo}: no size for {path}")
        sha256 = lfs.get("sha256")
        blob = entry.get("blobId")
        if not (isinstance(sha256, str) and _SHA256.match(sha256)) and not (isinstance(blob, str)
                                                                          and _SHA1.match(blob)):
            raise MnnEngineError("pull_failed", f"hf:{repo}: no hash for {path}")
        files.append(RemoteFile(path=path, size=size,
                                url=f"{base}/{repo}/resolve/{commit}/{urllib.parse.quote(path)}",
                                sha256=sha256 if isinstance(sha256, str) and _SHA256.match(sha256) else None,
                                git_sha1=None if isinstance(sha256, str) and _SHA256.match(sha256) else blob))
    return Listing("hf", repo, revision, commit, tuple(files), headers)


# ---------------------------------------------------------------- ModelScope
def list_modelscope(repo: str, revision: str = "master") -> Listing:
    """The files of a ModelScope model repository at ``revision``."""
    _check_repo(repo)
    headers = _token_header("MODELSCOPE_API_TOKEN")
    base = modelscope_endpoint()
    query = urllib.parse.urlencode({"Revision": revision, "Recursive": "true"})
    answer = _read_json(f"{base}/api/v1/models/{repo}/repo/files?{query}", headers,
                        f"modelscope:{repo}@{revision}", "modelscope")
    data = answer.get("Data") if isinstance(answer, dict) else None
    entries = data.get("Files") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        message = answer.get("Message") if isinstance(answer, dict) else None
        raise MnnEngineError("model_not_found" if answer.get("Code") == 404 else "pull_failed",
                             f"modelscope:{repo}: {message or 'the answer has no file list'}", param="model")
    files, commits = [], set()
    for entry in entries:
        if entry.get("Type") == "tree":
            continue
        path = _check_relative(entry.get("Path"), f"modelscope:{repo}")
        size, sha256 = entry.get("Size"), entry.get("Sha256")
        if not isinstance(size, int) or size < 0 or not (isinstance(sha256, str) and _SHA256.match(sha256)):
            raise MnnEngineError("pull_failed", f"modelscope:{repo}: no size or SHA-256 for {path}")
        commits.add(str(entry.get("Revision") or revision))
        query = urllib.parse.urlencode({"Revision": revision, "FilePath": path})
        files.append(RemoteFile(path=path, size=size, url=f"{base}/api/v1/models/{repo}/repo?{query}",
                                sha256=sha256))
    commit = commits.pop() if len(commits) == 1 else revision
    return Listing("modelscope", repo, revision, commit, tuple(files), headers)


# ---------------------------------------------------------------- manifests
def parse_manifest(data: Any, url: str) -> Listing:
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
        raise MnnEngineError("invalid_manifest", f"{url}: min_engine_version {minimum!r} is not a version",
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
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise MnnEngineError("invalid_manifest", f"{url}: {path}: size must be a whole number of bytes",
                                 param="files")
        if not isinstance(sha256, str) or not _SHA256.match(sha256):
            raise MnnEngineError("invalid_manifest", f"{url}: {path}: sha256 must be 64 lowercase hex digits",
                                 param="files")
        link = entry.get("url", path)
        if not isinstance(link, str):
            raise MnnEngineError("invalid_manifest", f"{url}: {path}: url must be a string", param="files")
        seen.add(path)
        files.append(RemoteFile(path=path, size=size, url=urllib.parse.urljoin(url, link), sha256=sha256))
    name = data.get("name") if isinstance(data.get("name"), str) else None
    return Listing("manifest", url, version, version, tuple(files), {}, name=name, model_id=model_id)


def list_manifest(url: str) -> Listing:
    return parse_manifest(_read_json(url, {}, url, "manifest"), url)


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``"3.6.1"`` -> ``(3, 6, 1)``; None for anything else."""
    parts = text.strip().split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None
