"""The message for an import of mnn_engine that finds no compiled core."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def explain(package_dir: str) -> str:
    """Why ``mnn_engine._mnn`` is missing, and the one fix that applies."""
    here = Path(package_dir).resolve()
    checkout = (here.parent / "meson.build").is_file() and (here.parent / "src" / "_mnn.pyx").is_file()
    if checkout:
        return (f"mnn_engine's compiled core is not in {here}: this is the source tree of a checkout, which "
                f"Python found before the installed package because the current directory ({os.getcwd()}) is "
                "on sys.path. Run from another directory, or install the checkout in editable mode (the "
                "README's set-up: pip install --no-build-isolation -e .) so it works from here too.")
    return (f"mnn_engine's compiled core (_mnn) is missing from {here} (Python {sys.version.split()[0]}): "
            "reinstall mnn-engine for this Python (pip install --force-reinstall mnn-engine).")
