"""The load-time checks' results, kept with the prepared weights.

Each chat model's load measures two things about the engine it runs on: whether
a batch's rows are a lone row's bit for bit (``Llm.batch_exact``, what lossless
speculation and any-split prompt-cache reuse need) and what verifying 1..k+1
tokens costs against one (``Llm.verify_costs``, what drafting weighs). Both
take seconds, and neither changes until the model's files, the native build,
the libMNN mapped, the CPU's features or the model's MNN config change: so they
are kept in the model's prepared-weights directory (MNN's ``tmp_path``, which
the store and ``Llm(path)`` give every model) under a key of all of those, and
a warm load reads them instead. Any change to the key measures afresh; a
damaged or foreign file is ignored (and replaced).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checks import is_number
from .build import engine_identity

#: the file in the prepared-weights directory that holds the results
CHECKS_FILE = "load-checks.json"
# results of this many keys are kept per directory (one model loaded with a few configs)
_KEPT = 8
# MNN config keys that do not change what the checks measure
_UNRELATED_KEYS = frozenset({"tmp_path", "use_mmap", "reuse_kv"})


def checks_key(model_stamp: Mapping[str, Any], mnn_config: Mapping[str, Any], draft_tokens: int) -> str:
    """The digest the results are kept under: the model's files (``ModelDir.stamp``), the engine
    (``build.engine_identity``: build, native files, CPU features), the MNN
    config the model is loaded with and the longest draft measured."""
    config = {k: v for k, v in mnn_config.items() if k not in _UNRELATED_KEYS}
    identity = [dict(model_stamp), engine_identity(), config, draft_tokens]
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def read_checks(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The results kept under ``key`` in ``cache_dir``: ``batch_exact``
    (bool) and ``verify_costs`` (list of float), or None."""
    entry = _read(cache_dir).get(key)
    if not isinstance(entry, dict):
        return None
    exact, costs = entry.get("batch_exact"), entry.get("verify_costs")
    if not isinstance(exact, bool) or not isinstance(costs, list):
        return None
    if not all(is_number(c) and c > 0 for c in costs):
        return None
    return {"batch_exact": exact, "verify_costs": [float(c) for c in costs]}


def write_checks(cache_dir: Path, key: str, batch_exact: bool, verify_costs: list[float]) -> None:
    """Keep the results under ``key`` (the newest ``_KEPT`` keys stay). Written
    whole and renamed into place, so a concurrent reader sees the old file or
    the new one; a directory that cannot be written keeps nothing."""
    entries = {k: v for k, v in _read(cache_dir).items() if k != key}
    entries[key] = {"batch_exact": batch_exact, "verify_costs": list(verify_costs)}
    entries = dict(list(entries.items())[-_KEPT:])
    with contextlib.suppress(OSError):
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".load-checks-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entries, f)
            os.replace(tmp, cache_dir / CHECKS_FILE)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _read(cache_dir: Path) -> dict[str, Any]:
    try:
        entries = json.loads((cache_dir / CHECKS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}
