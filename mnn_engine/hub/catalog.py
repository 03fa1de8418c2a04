"""The models a user can pull by name: ``catalog.json`` beside this module
(or the file ``$MNN_ENGINE_CATALOG`` names), with what the running build of
MNN can load."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config
from ..checks import invalid
from ..errors import MnnEngineError
from .sources import version_tuple

CATALOG_FILE = Path(__file__).with_name("catalog.json")


@dataclass(frozen=True)
class SourceSize:
    """A repository's bytes on one source: exact when published for that
    source, approximate when estimated or borrowed from the other source."""

    bytes: int
    exact: bool


@dataclass(frozen=True)
class CatalogEntry:
    """A model of the catalog, with its size on each source it is published on."""

    name: str
    hf: str | None
    modelscope: str | None
    parameters: str
    sizes: dict[str, SourceSize]
    thinking: bool
    vision: bool
    min_mnn: str

    def size(self, source: str) -> SourceSize:
        """The size on ``source``; where the catalog has none for it, the
        other source's, as an approximation (the two hubs' copies differ)."""
        if source in self.sizes:
            return self.sizes[source]
        other = next(iter(self.sizes.values()), SourceSize(0, False))
        return SourceSize(other.bytes, False)

    def supported_by(self, mnn_version: str) -> bool:
        need, have = version_tuple(self.min_mnn), version_tuple(mnn_version)
        return need is None or have is None or have >= need

    def repo(self, source: str) -> str:
        repo = self.hf if source == "hf" else self.modelscope
        if not repo:
            raise invalid("source", f"{self.name} is not published on {source}")
        return repo

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON, with a size for each source it is published on."""
        row = {k: v for k, v in self.__dict__.items() if k != "sizes"}
        row["sizes"] = {source: dict(self.size(source).__dict__)
                        for source in ("hf", "modelscope") if getattr(self, source)}
        return row


def _path() -> Path:
    return config.catalog_file(CATALOG_FILE)


def _sizes(model: dict[str, Any]) -> dict[str, SourceSize]:
    if "sizes" in model:
        return {source: SourceSize(int(size["bytes"]), bool(size.get("exact", False)))
                for source, size in model["sizes"].items()}
    # A catalog of one's own may give one size for every source (the form before sizes per source).
    one = SourceSize(int(model.get("size_bytes", 0)), bool(model.get("size_exact", False)))
    return {source: one for source in ("hf", "modelscope") if model.get(source)}


def entries() -> list[CatalogEntry]:
    """Every model of the catalog."""
    path = _path()
    try:
        data = json.loads(path.read_text())
        return [CatalogEntry(name=m["name"], hf=m.get("hf"), modelscope=m.get("modelscope"),
                             parameters=m.get("parameters", ""), sizes=_sizes(m), thinking=bool(m.get("thinking")),
                             vision=bool(m.get("vision")), min_mnn=str(m.get("min_mnn", "0")))
                for m in data["models"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MnnEngineError("internal_error", f"the model catalog {path} is unreadable: {exc}") from exc


def find(name: str) -> CatalogEntry | None:
    """The catalog entry called ``name`` (any case), if there is one."""
    wanted = name.strip().lower()
    return next((e for e in entries() if e.name == wanted), None)
