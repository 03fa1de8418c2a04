"""The models a user can pull by name: ``catalog.json`` beside this module
(or the file ``$MNN_ENGINE_CATALOG`` names), with what the running build of
MNN can load."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config
from ..errors import MnnEngineError
from .sources import version_tuple

CATALOG_FILE = Path(__file__).with_name("catalog.json")


@dataclass(frozen=True)
class CatalogEntry:
    """A model of the catalog. ``size_bytes`` is approximate unless ``size_exact``."""

    name: str
    hf: str | None
    modelscope: str | None
    parameters: str
    size_bytes: int
    size_exact: bool
    thinking: bool
    vision: bool
    min_mnn: str

    def supported_by(self, mnn_version: str) -> bool:
        need, have = version_tuple(self.min_mnn), version_tuple(mnn_version)
        return need is None or have is None or have >= need

    def repo(self, source: str) -> str:
        repo = self.hf if source == "hf" else self.modelscope
        if not repo:
            raise MnnEngineError("invalid_argument", f"{self.name} is not published on {source}", param="source")
        return repo

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _path() -> Path:
    return config.catalog_file(CATALOG_FILE)


def entries() -> list[CatalogEntry]:
    """Every model of the catalog."""
    path = _path()
    try:
        data = json.loads(path.read_text())
        return [CatalogEntry(name=m["name"], hf=m.get("hf"), modelscope=m.get("modelscope"),
                             parameters=m.get("parameters", ""), size_bytes=int(m.get("size_bytes", 0)),
                             size_exact=bool(m.get("size_exact", False)), thinking=bool(m.get("thinking")),
                             vision=bool(m.get("vision")), min_mnn=str(m.get("min_mnn", "0")))
                for m in data["models"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MnnEngineError("internal_error", f"the model catalog {path} is unreadable: {exc}") from exc


def find(name: str) -> CatalogEntry | None:
    """The catalog entry called ``name`` (any case), if there is one."""
    wanted = name.strip().lower()
    return next((e for e in entries() if e.name == wanted), None)
