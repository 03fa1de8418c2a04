"""``python -m mnn_engine`` with a runtime dependency missing (e.g. a Termux
install whose pip step ran offline) says which and how to finish, instead of
a traceback; with everything installed it says nothing."""

from __future__ import annotations

import subprocess
import sys

from mnn_engine.cli.dependencies import check_installed, runtime_requirements

BLOCK = "import sys, runpy; sys.modules[{name!r}] = None; sys.argv = ['mnn_engine', *sys.argv[1:]]; " \
        "runpy.run_module('mnn_engine', run_name='__main__')"


def _cli(blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK.format(name=blocked), *args], capture_output=True, text=True,
                          cwd="/", timeout=120)


def test_serve_without_tornado_says_how_to_finish(tmp_path):
    out = _cli("tornado", "serve", str(tmp_path / "no-model"), "--port", "18765")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert "error: [dependency_missing]" in out.stderr and "'tornado'" in out.stderr
    assert "pip install 'tornado>=6.3' 'prometheus-client>=0.17'" in out.stderr


def test_the_requirements_come_from_the_installed_metadata():
    import tomllib
    from support import REPO

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert runtime_requirements() == declared == ["tornado>=6.3", "prometheus-client>=0.17"]
    assert check_installed() is None


def test_an_unrelated_missing_module_is_not_explained():
    from mnn_engine.cli.dependencies import missing_dependency

    assert missing_dependency(ModuleNotFoundError("No module named 'yaml'", name="yaml")) is None
