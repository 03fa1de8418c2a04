"""What to say when a runtime dependency of mnn-engine is not installed.

On Termux the package's postinst pip-installs tornado and prometheus-client;
a phone offline at install time ends up without them (the postinst says so
too). The requirements and their bounds are read from the installed
distribution's own metadata (pyproject.toml's ``dependencies``), so the
command printed is the one that finishes the install.
"""

from __future__ import annotations

import importlib
import re
from importlib import metadata

from ..errors import MnnEngineError

DISTRIBUTION = "mnn-engine"


def runtime_requirements() -> list[str]:
    """The distribution's requirements outside any extra, as pip takes them
    (none known where mnn-engine runs without its metadata)."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    return [r.split(";")[0].replace(" ", "") for r in declared if "extra ==" not in r]


def _module_of(requirement: str) -> str:
    """The top-level module a requirement installs (names differ only by - and _ here)."""
    return re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0].replace("-", "_").lower()


def missing_dependency(exc: ModuleNotFoundError) -> MnnEngineError | None:
    """A ``dependency_missing`` error naming how to finish the install when
    ``exc`` is about one of mnn-engine's runtime requirements, else None."""
    return _missing((exc.name or "").split(".")[0].lower())


def _missing(module: str) -> MnnEngineError | None:
    requirements = runtime_requirements()
    if module not in {_module_of(r) for r in requirements}:
        return None
    command = "pip install " + " ".join(f"'{r}'" for r in requirements)
    return MnnEngineError(
        "dependency_missing",
        f"mnn-engine needs the Python package {module!r}, which is not installed (on Termux the package's "
        f"pip step fails when the phone is offline at install time). Finish the install with: {command}")


def check_installed() -> MnnEngineError | None:
    """The first runtime requirement that does not import, as ``missing_dependency`` says it."""
    for requirement in runtime_requirements():
        module = _module_of(requirement)
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            return _missing(module)
    return None


if __name__ == "__main__":  # the Termux postinst, after its pip step: say what is missing (never fails)
    problem = check_installed()
    if problem is not None:
        print(f"python-mnn-engine: {problem}")
