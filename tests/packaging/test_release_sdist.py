"""The release source (tools/termux/release_sdist.py): the recipe downloads
the sdist and checks its SHA-256, and the sdist builds offline against an
installed MNN. CI runs the whole script against its system-mode prefix
(.ci/run); the slow test here does the same where a source build is at hand."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from support import REPO

sys.path.insert(0, str(REPO / "tools" / "termux"))
from lint_recipe import lint
from release_sdist import RECIPE, RELEASE_URL, write_recipe


def test_the_recipe_downloads_the_release_sdist_and_checks_it():
    text = RECIPE.read_text()
    assert re.search(r"(?m)^TERMUX_PKG_SRCURL=(.*)$", text).group(1) == RELEASE_URL
    assert re.search(r"(?m)^TERMUX_PKG_SHA256=[0-9a-f]{64}$", text)
    assert "GIT_BRANCH" not in text and "git+" not in text


def test_writing_the_hash_turns_a_git_recipe_into_a_release_one_and_can_be_repeated(tmp_path):
    recipe = tmp_path / "python-mnn-engine"
    shutil.copytree(RECIPE.parent, recipe)
    build = recipe / "build.sh"
    text = re.sub(r"(?m)^TERMUX_PKG_SRCURL=.*\nTERMUX_PKG_SHA256=.*$",
                  'TERMUX_PKG_SRCURL=git+https://github.com/mnn-engine/mnn-engine\n'
                  'TERMUX_PKG_GIT_BRANCH="v${TERMUX_PKG_VERSION}"', build.read_text())
    build.write_text(text)
    write_recipe(build, "a" * 64)
    assert "TERMUX_PKG_SHA256=" + "a" * 64 in build.read_text() and "GIT_BRANCH" not in build.read_text()
    assert lint(recipe) == []
    write_recipe(build, "b" * 64)
    assert build.read_text().count("TERMUX_PKG_SHA256=") == 1 and "b" * 64 in build.read_text()


@pytest.mark.slow
def test_the_sdist_builds_offline_against_an_installed_mnn(tmp_path):
    lib = next(REPO.glob("build/*/subprojects/MNN/libMNN.so"), None)
    if lib is None or not (REPO / "subprojects" / "MNN" / "include").is_dir():
        pytest.skip("needs a source build's libMNN.so and MNN's headers (.ci/run runs the script itself)")
    prefix = tmp_path / "mnn"
    (prefix / "lib").mkdir(parents=True)
    shutil.copytree(REPO / "subprojects/MNN/include/MNN", prefix / "include/MNN")
    shutil.copytree(REPO / "subprojects/MNN/transformers/llm/engine/include/llm", prefix / "include/llm")
    shutil.copy(lib, prefix / "lib")
    recipe = tmp_path / "build.sh"
    shutil.copy(RECIPE, recipe)
    done = subprocess.run([sys.executable, str(REPO / "tools/termux/release_sdist.py"), "--mnn-prefix", str(prefix),
                           "--out", str(tmp_path / "dist"), "--recipe", str(recipe)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert '"mode": "system"' in done.stdout
    sha = re.search(r'"sha256": "([0-9a-f]{64})"', done.stdout).group(1)
    assert f"TERMUX_PKG_SHA256={sha}" in recipe.read_text()
