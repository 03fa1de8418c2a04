#!/usr/bin/env python3
"""Run llmexport 0.0.5 (HF model -> MNN LLM directory), with two fixes.

1. llmexport imports its own submodules as top-level ``utils``: its package
   directory has to be on sys.path.
2. MNN's Python converter imports ``MNN.tools.utils.log``, whose fallback
   pip-installs a telemetry SDK and contacts a remote server. Registering the
   module as None makes that import fail cleanly, so conversion stays offline
   and leaves the environment alone.

Usage: the same arguments as ``llmexport``.
"""

import importlib.util
import os
import sys

sys.modules["MNN.tools.utils.log"] = None  # type: ignore[assignment]
_spec = importlib.util.find_spec("llmexport")
if _spec is None or _spec.origin is None:
    sys.exit("llmexport is not installed in this environment")
sys.path.insert(0, os.path.dirname(_spec.origin))

from llmexport import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
