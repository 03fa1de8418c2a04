"""Every environment variable mnn-engine reads, and its default, in one place.
Each is read when it is needed (a test or a user may set one between calls).

- ``MNN_ENGINE_HOME``: the model store (else ``$XDG_DATA_HOME/mnn-engine``,
  else ``~/.local/share/mnn-engine``); its ``verified/`` holds the
  first-touch verdicts (else ``$XDG_CACHE_HOME/mnn-engine/verified``).
- ``MNN_ENGINE_API_KEY``: ``serve``'s API key when no ``--api-key`` is given.
- ``MNN_ENGINE_CATALOG``: another catalog file (``models catalog``, pulls by name).
- ``MNN_ENGINE_ASSUME_BACKENDS``: backends reported usable without probing (``opencl,vulkan``).
- ``MNN_ENGINE_EXAMPLE_MODEL``: the model the example notebooks use.
- ``HF_ENDPOINT``, ``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``, then the token file
  (``HF_TOKEN_PATH``, else ``$HF_HOME/token``, else ``$XDG_CACHE_HOME/huggingface/token``,
  else ``~/.cache/huggingface/token``: where ``hf auth login`` leaves it), and
  ``HF_HUB_OFFLINE``: Hugging Face, as huggingface_hub 2.4 (``constants.py``, ``utils/_auth.py``) reads them.
- ``MODELSCOPE_ENDPOINT`` (else the deprecated ``MODELSCOPE_DOMAIN``), ``MODELSCOPE_API_TOKEN``:
  ModelScope, as modelscope_hub 0.5.1 (``config.py``) reads them.
"""

from __future__ import annotations

import os
from pathlib import Path

HF_DEFAULT_ENDPOINT = "https://huggingface.co"
MODELSCOPE_DEFAULT_DOMAIN = "www.modelscope.cn"
#: the token variables of each hub, in the order its own client tries them
HUB_TOKEN_VARIABLES = {"hf": ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"), "modelscope": ("MODELSCOPE_API_TOKEN",)}


def _get(name: str) -> str:
    return os.environ.get(name, "").strip()


def _home() -> Path | None:
    home = _get("MNN_ENGINE_HOME")
    return Path(home).expanduser() if home else None


def store_root() -> Path:
    """Where the model store lives."""
    home = _home()
    if home is not None:
        return home
    xdg = _get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "mnn-engine"


def verified_dir() -> Path:
    """Where the first-touch verdicts are kept (beside the store when MNN_ENGINE_HOME is set)."""
    home = _home()
    if home is not None:
        return home / "verified"
    cache = _get("XDG_CACHE_HOME")
    return (Path(cache).expanduser() if cache else Path.home() / ".cache") / "mnn-engine" / "verified"


def api_key() -> str | None:
    return _get("MNN_ENGINE_API_KEY") or None


def catalog_file(default: Path) -> Path:
    return Path(_get("MNN_ENGINE_CATALOG")) if _get("MNN_ENGINE_CATALOG") else default


def assumed_backends() -> set[str]:
    return {b.strip() for b in _get("MNN_ENGINE_ASSUME_BACKENDS").split(",") if b.strip()}


def example_model() -> str | None:
    return _get("MNN_ENGINE_EXAMPLE_MODEL") or None


def hf_endpoint() -> str:
    return (_get("HF_ENDPOINT") or HF_DEFAULT_ENDPOINT).rstrip("/")


def modelscope_endpoint() -> str:
    domain = (_get("MODELSCOPE_ENDPOINT") or _get("MODELSCOPE_DOMAIN") or MODELSCOPE_DEFAULT_DOMAIN).rstrip("/")
    return domain if domain.startswith(("http://", "https://")) else f"https://{domain}"


def hf_token_file() -> Path:
    """Where ``hf auth login`` keeps the Hugging Face token."""
    if _get("HF_TOKEN_PATH"):
        return Path(_get("HF_TOKEN_PATH")).expanduser()
    if _get("HF_HOME"):
        return Path(_get("HF_HOME")).expanduser() / "token"
    cache = _get("XDG_CACHE_HOME")
    return (Path(cache).expanduser() if cache else Path.home() / ".cache") / "huggingface" / "token"


def hub_token(source: str) -> str | None:
    """The first token set for ``source`` (hf or modelscope); for hf, then the token file."""
    token = next((_get(name) for name in HUB_TOKEN_VARIABLES.get(source, ()) if _get(name)), None)
    if token is None and source == "hf":
        try:
            token = hf_token_file().read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            token = None
    return token


def hf_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) set true: no request to the hub."""
    return (_get("HF_HUB_OFFLINE") or _get("TRANSFORMERS_OFFLINE")).upper() in {"1", "ON", "YES", "TRUE"}
