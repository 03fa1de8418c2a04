"""Pull a model into the store: list it at its source, check the disk, fetch
every file (resumable, verified, several at once), validate the model, then
activate it in one rename, keeping the version it replaces for a rollback.

Store layout added by pulls (beside ``models/`` and ``cache/``)::

    downloads/<id>/       a pull in progress: finished files under their names,
                          and .pull.json
    downloads/<id>.partial/  its unfinished files, as <name>.part (outside the
                          model: a repo may list both X and X.part)
    downloads/<id>.lock   held by the process pulling <id>
    downloads/adapter-<base>_<name>/  a LoRA adapter's pull in progress (``pull_adapter``;
                          imported over its base when it is complete)
    previous/<id>/        the version an update replaced (one), for rollback
    models/<id>/.source.json   where a pulled model came from
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, wait
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from ..checks import invalid
from ..errors import MnnEngineError
from ..hub import catalog
from ..hub.download import BACKOFF_S, PART_SUFFIX, download
from ..hub.sources import (
    DEFAULT_POLICY,
    DEFAULT_RETRY,
    Listing,
    Retry,
    UrlPolicy,
    is_repo_name,
    list_hf,
    list_manifest,
    list_modelscope,
)
from ..runtime.adapter_files import ADAPTER_GRAPH
from ..runtime.build import build_info
from ..runtime.first_touch import check_in_child
from ..runtime.model_files import CONFIG_NAME, model_files, validate_model_dir
from ..workers import DaemonPool
from .layout import SOURCE_FILE, ModelInfo, ModelLock, check_model_id, model_id_from_name, read_source

PULL_FILE = ".pull.json"
SOURCES = ("hf", "modelscope")
#: space left free on the disk besides the model
DISK_RESERVE = 64 << 20
WORKERS = 3

#: seconds between progress reports while no byte arrives
PROGRESS_TICK_S = 0.5
#: seconds a failed pull waits for its other files' reads to end (they stop at their next chunk)
STOP_WAIT_S = 35.0
class PullTarget(Protocol):
    """The store a pull fills (``ModelStore``; declared here so that the store
    may call its pulls without the pulls importing the store)."""

    root: Path
    models_dir: Path

    def exists(self, model_id: str) -> bool: ...

    def get(self, model_id: str) -> ModelInfo: ...

    def path(self, model_id: str) -> Path: ...

    def previous_path(self, model_id: str) -> Path: ...

    def cache_path(self, model_id: str) -> Path: ...

    def changing(self, model_id: str, action: str, busy_code: str = "model_in_use") -> AbstractContextManager[None]:
        ...


#: progress(done_bytes, total_bytes, current_file)
Progress = Callable[[int, int, str], None]


class _Stopped(Exception):
    """Another download of the same pull failed: stop this one."""


def split_revision(spec: str, revision: str | None) -> tuple[str, str | None]:
    """``SPEC@REV`` as the spec and its revision (a manifest URL is left whole:
    its ``@`` may be a user name's)."""
    if spec.startswith(("http://", "https://")) or "@" not in spec:
        return spec, revision
    spec, _, named = spec.rpartition("@")
    if not spec or not named:
        raise invalid("model", "SPEC@REVISION needs both (e.g. hf:ORG/NAME@main)")
    if revision is not None and revision != named:
        raise invalid("revision", f"the spec says @{named} and the revision {revision!r}: give one")
    return spec, named


def resolve_spec(spec: str, source: str | None,
                 policy: UrlPolicy = DEFAULT_POLICY) -> tuple[Callable[[str | None, Retry], Listing], str | None]:
    """What ``spec`` names: a function listing it at a revision (its requests tried
    again and stopped as ``Retry`` says), and the model ID it gets by default (None:
    from the manifest)."""
    if source is not None and source not in SOURCES:
        raise invalid("source", f"must be hf or modelscope (got {source!r})")
    if spec.startswith(("http://", "https://")):
        return (lambda _revision, retry: list_manifest(spec, policy, retry)), None
    for prefix in SOURCES:
        if spec.startswith(prefix + ":"):
            return _repo_lister(prefix, spec[len(prefix) + 1:]), model_id_from_name(spec.rsplit("/", 1)[-1])
    entry = catalog.find(spec)
    if entry is not None:
        mnn = build_info()["mnn_version"]
        if not entry.supported_by(mnn):
            raise MnnEngineError("engine_too_old", f"{entry.name} needs MNN {entry.min_mnn} or newer; this build "
                                 f"has MNN {mnn}", param="model")
        chosen = source or "hf"
        return _repo_lister(chosen, entry.repo(chosen)), model_id_from_name(entry.name)
    if is_repo_name(spec):
        return _repo_lister(source or "hf", spec), model_id_from_name(spec.rsplit("/", 1)[-1])
    raise MnnEngineError("model_not_found", f"{spec!r} is not in the catalog (`python -m mnn_engine models catalog` "
                         "lists it), nor hf:ORG/NAME, modelscope:ORG/NAME or a manifest URL", param="model")


def _repo_lister(source: str, repo: str) -> Callable[[str | None, Retry], Listing]:
    if source == "hf":
        return lambda revision, retry: list_hf(repo, revision or "main", retry)
    return lambda revision, retry: list_modelscope(repo, revision or "master", retry)


def pull(store: PullTarget, spec: str, *, model_id: str | None = None, revision: str | None = None,
         source: str | None = None, update: bool = False, progress: Progress | None = None,
         workers: int = WORKERS, backoff: tuple[float, ...] = BACKOFF_S, policy: UrlPolicy = DEFAULT_POLICY,
         stop: threading.Event | None = None) -> ModelInfo:
    """Pull ``spec`` (a catalog name, ``hf:ORG/NAME``, ``modelscope:ORG/NAME``,
    ``ORG/NAME`` or a manifest URL) into ``store``; see the module doc.
    ``policy``: what a manifest may make it fetch; ``stop``: set from another
    thread, the pull ends at its next chunk (``pull_cancelled``), its bytes kept.
    A repository or catalog spec may name its revision as ``SPEC@REV``
    (``hf:ORG/NAME@<commit>``), the same as ``revision``."""
    stop = stop or threading.Event()
    if stop.is_set():  # its client left while it waited for a pull worker
        raise MnnEngineError("pull_cancelled", f"the pull of {spec} was stopped before it started", param="model")
    spec, revision = split_revision(spec, revision)
    lister, default_id = resolve_spec(spec, source, policy)
    if model_id is not None:
        check_model_id(model_id)
    known = model_id or default_id  # None: a manifest names it
    if known is not None and store.exists(known) and not update:
        return store.get(known)  # nothing to do: --update fetches a newer revision
    listing = lister(revision, replace(DEFAULT_RETRY, stop=stop))
    if _is_adapter(listing):
        raise invalid("base", f"{listing.source}:{listing.repo} is a LoRA adapter export ({ADAPTER_GRAPH}, no "
                              f"{CONFIG_NAME}): pull it over the model it was exported from (models pull SPEC "
                              "--base MODEL_ID)")
    model_id = known or model_id_from_name(listing.model_id or "")
    if known is None and store.exists(model_id) and not update:
        return store.get(model_id)
    current = read_source(store.path(model_id)) if store.exists(model_id) else None
    if current and current.get("repo") == listing.repo and current.get("commit") == listing.commit:
        return store.get(model_id)  # already at that revision
    work = store.root / "downloads" / model_id
    try:
        lock = ModelLock(work.with_name(model_id + ".lock"), exclusive=True)
    except OSError as exc:
        raise MnnEngineError("pull_busy", f"another process is pulling {model_id!r}; wait for it", param="model") \
            from exc
    with lock:
        _prepare(work, listing)
        _check_space(work, listing)
        _fetch_all(work, listing, progress, workers, backoff, stop)
        shutil.rmtree(_partials(work), ignore_errors=True)
        _validate(work, listing)
        (work / SOURCE_FILE).write_text(json.dumps({**listing.to_dict(), "name": listing.name,
                                                    "pulled_at": time.time()}, indent=1))
        _activate(store, model_id, work)
    return store.get(model_id)


def _is_adapter(listing: Listing) -> bool:
    paths = {f.path for f in listing.files}
    return ADAPTER_GRAPH in paths and CONFIG_NAME not in paths


def pull_adapter(store: Any, spec: str, base: str, *, name: str | None = None, revision: str | None = None,
                 source: str | None = None, update: bool = False, progress: Progress | None = None,
                 workers: int = WORKERS, backoff: tuple[float, ...] = BACKOFF_S, policy: UrlPolicy = DEFAULT_POLICY,
                 stop: threading.Event | None = None) -> Any:
    """Pull a LoRA adapter export (a repository or manifest whose files hold
    ``lora.mnn`` and no model config) over the stored model ``base``: fetched
    as a model is (resumable, verified), then imported over it
    (``ModelStore.import_adapter``, which checks it fits). ``name``: the
    adapter's (default: the repository's name, slugged); an adapter already
    stored is kept unless ``update``. ``store`` is a ``ModelStore``."""
    stop = stop or threading.Event()
    store.get(base)
    spec, revision = split_revision(spec, revision)
    lister, default_id = resolve_spec(spec, source, policy)
    if name is not None:
        check_model_id(name)
    if name is not None and not update:
        with contextlib.suppress(MnnEngineError):
            return store.get_adapter(base, name)
    listing = lister(revision, replace(DEFAULT_RETRY, stop=stop))
    if not _is_adapter(listing):
        raise MnnEngineError("invalid_model", f"{listing.source}:{listing.repo} is not a LoRA adapter export (no "
                             f"{ADAPTER_GRAPH}, or a whole model): pull it without --base", param="model")
    name = name or model_id_from_name(listing.model_id or default_id or listing.repo.rsplit("/", 1)[-1])
    if not update:
        with contextlib.suppress(MnnEngineError):
            return store.get_adapter(base, name)
    work = store.root / "downloads" / f"adapter-{check_model_id(base)}_{name}"
    try:
        lock = ModelLock(work.with_name(work.name + ".lock"), exclusive=True)
    except OSError as exc:
        raise MnnEngineError("pull_busy", f"another process is pulling the adapter {name!r}; wait for it",
                             param="model") from exc
    with lock:
        _prepare(work, listing)
        _check_space(work, listing)
        _fetch_all(work, listing, progress, workers, backoff, stop)
        shutil.rmtree(_partials(work), ignore_errors=True)
        try:
            info = store.import_adapter(work, base, name=name, replace=update)
        except MnnEngineError as exc:
            if exc.code == "invalid_model":  # verified bytes of an adapter that does not fit: nothing to resume
                shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)
    return info


def _partials(work: Path) -> Path:
    """Where a pull's unfinished files are: beside the model's directory, not in it."""
    return work.with_name(work.name + ".partial")


def _part(work: Path, path: str) -> Path:
    return _partials(work) / (path + PART_SUFFIX)


def _check_paths(listing: Listing) -> None:
    """No two files at one path, none at the names the pull writes itself."""
    seen: set[str] = set()
    for remote in listing.files:
        if remote.path in seen:
            raise MnnEngineError("invalid_manifest", f"{listing.repo}: {remote.path!r} is listed twice",
                                 param="files")
        if remote.path in (PULL_FILE, SOURCE_FILE):
            raise MnnEngineError("invalid_manifest", f"{listing.repo}: {remote.path!r} is a name the store "
                                 "keeps for itself", param="files")
        seen.add(remote.path)


def _prepare(work: Path, listing: Listing) -> None:
    """Keep what an earlier pull left of files the listing still has unchanged."""
    _check_paths(listing)
    record = json.dumps(listing.to_dict(), sort_keys=True)
    try:
        earlier = (work / PULL_FILE).read_text()
    except OSError:
        earlier = None
    if earlier is None:  # not a pull's directory (or none): nothing in it is known
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(_partials(work), ignore_errors=True)
    elif earlier != record:
        _keep_unchanged(work, earlier, listing)
    work.mkdir(parents=True, exist_ok=True)
    (work / PULL_FILE).write_text(record)


def _keep_unchanged(work: Path, earlier: str, listing: Listing) -> None:
    """The listing changed since the bytes on disk were fetched (an upstream
    commit): keep the files, finished or partial, whose expected size and
    hash are the same in both, and delete the rest."""
    try:
        before = {f["path"]: f for f in json.loads(earlier)["files"]}
    except (ValueError, KeyError, TypeError):
        before = {}
    now = {f["path"]: f for f in listing.to_dict()["files"]}
    keep = {path for path, entry in now.items() if before.get(path) == entry}
    for root, suffix in ((work, ""), (_partials(work), PART_SUFFIX)):
        if not root.is_dir():
            continue
        for found in sorted(root.rglob("*"), reverse=True):  # files before their directories
            name = found.relative_to(root).as_posix()
            name = name[:-len(suffix)] if suffix and name.endswith(suffix) else name
            if found.is_dir():
                with contextlib.suppress(OSError):
                    found.rmdir()  # only when empty
            elif name not in keep:
                found.unlink()


def _on_disk(work: Path, path: str, size: int) -> int:
    done = work / path
    if done.is_file() and done.stat().st_size == size:
        return size
    part = _part(work, path)
    return min(part.stat().st_size, size) if part.is_file() else 0


def _check_space(work: Path, listing: Listing) -> None:
    needed = sum(f.size - _on_disk(work, f.path, f.size) for f in listing.files)
    free = shutil.disk_usage(work).free
    if needed + DISK_RESERVE > free:
        raise MnnEngineError("disk_full", f"{listing.repo} needs {needed / 2**20:.0f} MiB more and "
                             f"{free / 2**20:.0f} MiB are free (with {DISK_RESERVE >> 20} MiB kept free) "
                             f"on the disk of {work}", param="model")


def _fetch_all(work: Path, listing: Listing, progress: Progress | None, workers: int,
               backoff: tuple[float, ...], asked_to_stop: threading.Event) -> None:
    total = listing.total_bytes
    done = [0]
    lock = threading.Lock()
    stop = threading.Event()  # a file failed, or asked_to_stop: every download ends at its next chunk

    def fetch(index: int) -> None:
        remote = listing.files[index]

        def on_bytes(count: int) -> None:
            if asked_to_stop.is_set():
                raise MnnEngineError("pull_cancelled", f"the pull of {listing.repo} was stopped (it resumes "
                                     "from the bytes it has)", param="model")
            if stop.is_set():
                raise _Stopped()
            with lock:
                done[0] += count
                if progress:  # a file fetched again after a bad hash counts twice: never past the total
                    progress(min(done[0], total), total, remote.path)

        download(remote, work / remote.path, _part(work, remote.path), listing.headers, listing.source,
                 on_bytes=on_bytes, backoff=backoff, policy=listing.policy, stop=asked_to_stop)
        if remote.size == 0 and progress:
            progress(done[0], total, remote.path)

    if progress:
        progress(0, total, "")
    ticking = threading.Event()  # set when the downloads end
    if progress:
        def tick() -> None:  # the bar moves (its speed falls) even while no byte arrives
            while not ticking.wait(PROGRESS_TICK_S):
                with lock:
                    progress(min(done[0], total), total, "")

        threading.Thread(target=tick, name="mnn-pull-progress", daemon=True).start()
    # the largest first, so the long file starts at once and the small ones fill in beside it
    order = sorted(range(len(listing.files)), key=lambda i: -listing.files[i].size)
    pool = DaemonPool("mnn-pull", workers)  # daemon threads: a stuck read never keeps the process alive
    futures = [pool.submit(fetch, i) for i in order]
    try:
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f.exception() for f in finished if f.exception() is not None), None)
        if failed is not None:  # the first file that failed, not the first submitted
            raise failed
    except BaseException as exc:
        stop.set()  # Ctrl-C or a failed file: the others stop at their next chunk, their bytes kept
        for future in futures:
            future.cancel()
        # A failed file waits for the others' reads to end; Ctrl-C and a stopped pull do not (on a slow
        # link a read can take seconds; what is on disk is a prefix of each file, whatever is cut)
        if not asked_to_stop.is_set() and not isinstance(exc, KeyboardInterrupt):
            wait(futures, timeout=STOP_WAIT_S)
        raise
    finally:
        ticking.set()
    if progress:
        progress(total, total, "")


def _validate(work: Path, listing: Listing) -> None:
    try:
        config = validate_model_dir(work)
        check_in_child(work / CONFIG_NAME, model_files(work / CONFIG_NAME, config), {})
    except MnnEngineError as exc:
        shutil.rmtree(work, ignore_errors=True)  # verified bytes of a model that does not load: nothing to resume
        raise MnnEngineError("invalid_model", f"{listing.source}:{listing.repo} is not a usable MNN model: "
                             f"{exc.message}", param="model") from exc


def _activate(store: PullTarget, model_id: str, work: Path) -> None:
    """One rename makes the new version the model; the old one becomes the previous version."""
    with store.changing(model_id, "update"):
        final = store.path(model_id)
        previous = store.previous_path(model_id)
        store.models_dir.mkdir(parents=True, exist_ok=True)
        if final.exists():
            previous.parent.mkdir(parents=True, exist_ok=True)
            if previous.exists():
                shutil.rmtree(previous)
            final.rename(previous)
            shutil.rmtree(store.cache_path(model_id), ignore_errors=True)
        work.rename(final)
        (final / PULL_FILE).unlink(missing_ok=True)  # kept until now: a refused activation resumes as finished


def rollback(store: PullTarget, model_id: str) -> ModelInfo:
    """Swap a model with its previous version (a second rollback swaps back)."""
    with store.changing(model_id, "roll back"):
        final, previous = store.path(model_id), store.previous_path(model_id)
        if not (previous / CONFIG_NAME).is_file():
            raise MnnEngineError("model_not_found", f"{model_id!r} has no previous version to roll back to",
                                 param="model")
        swap = previous.with_name(f".swap-{model_id}")
        if swap.exists():
            shutil.rmtree(swap)
        final.rename(swap)
        previous.rename(final)
        swap.rename(previous)
        shutil.rmtree(store.cache_path(model_id), ignore_errors=True)
    return store.get(model_id)
