"""The Termux recipes (mnn with its backend subpackages, python-mnn-engine on
top) pass termux-packages' lint rules and shellcheck, agree with each other
and with the code, and the service script turns serve.env into the right
command line. Their build logic is replayed by tools/termux/replay.sh."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
from support import REPO

sys.path.insert(0, str(REPO / "tools" / "termux"))
from lint_recipe import lint, read_fields

RECIPES = REPO / "packaging" / "termux"
RECIPE = RECIPES / "python-mnn-engine"
MNN_RECIPE = RECIPES / "mnn"


def test_recipe_passes_the_lint_rules():
    result = subprocess.run([sys.executable, str(REPO / "tools/termux/lint_recipe.py")], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout
    assert "python-mnn-engine: PASS" in result.stdout and "mnn: PASS" in result.stdout
    for script in (RECIPE / "build.sh", *MNN_RECIPE.glob("*.sh")):
        assert not os.access(script, os.X_OK)


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda s: s.replace("\tlocal wheel", "    local wheel"), "indent with tabs"),
    (lambda s: s.replace('TERMUX_PKG_DESCRIPTION="', 'TERMUX_PKG_DESCRIPTION="' + "x" * 100), "longer than 100"),
    (lambda s: s.replace('TERMUX_PKG_LICENSE="Apache-2.0,', 'TERMUX_PKG_LICENSE="Apache2,'), "unknown licence"),
    (lambda s: s.replace("TERMUX_PKG_AUTO_UPDATE=false", "TERMUX_PKG_AUTO_UPDATE=no"), "true or false"),
    (lambda s: re.sub(r"TERMUX_PKG_SHA256=\w+", "TERMUX_PKG_SHA256=abc", s), "malformed SHA-256"),
    (lambda s: s.replace("TERMUX_PKG_SRCURL=https://", "TERMUX_PKG_SRCURL=http://"), "neither https"),
    (lambda s: s.replace('"mnn-engine" "exec', '"mnn-engine" "other" "exec'), "pairs"),
    (lambda s: s.replace('TERMUX_PKG_CONFFILES="etc/', 'TERMUX_PKG_CONFFILES="/etc/'), "relative"),
    (lambda s: s.replace('TERMUX_PKG_MAINTAINER="@termux"\n', ""), "MAINTAINER is not set"),
    (lambda s: s.replace('TERMUX_PKG_VERSION="0.1.0"', 'TERMUX_PKG_VERSION="v0.1"'), "invalid version"),
    (lambda s: s.replace("termux_step_make() {", "termux_step_make() { (("), "bash -n"),
    (lambda s: s.replace("termux_step_make() {", "termux_step_make() { "), "trailing whitespace"),
    (lambda s: s + "\n", "duplicate newlines"),
])
def test_each_rule_catches_its_mistake(tmp_path, edit, problem):
    problems = _lint_edited(tmp_path, RECIPE, "build.sh", edit)
    assert any(problem in p for p in problems), problems


def _lint_edited(tmp_path, recipe, name, edit) -> list[str]:
    """The linter's problems with a copy of ``recipe`` whose file ``name`` was edited."""
    broken = tmp_path / recipe.name
    shutil.copytree(recipe, broken)
    script = broken / name
    script.write_text(edit(script.read_text()))
    return lint(broken)


def test_executable_build_sh_and_bad_names_fail(tmp_path):
    bad = tmp_path / "Python_MNN"
    shutil.copytree(RECIPE, bad)
    (bad / "build.sh").chmod(0o755)
    problems = lint(bad)
    assert any("executable" in p for p in problems) and any("package name" in p for p in problems)


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda s: s.replace('TERMUX_SUBPKG_DESCRIPTION="OpenCL backend for MNN (Adreno and Mali GPUs)"\n', ""),
     "DESCRIPTION is not set"),
    (lambda s: s.replace("lib/libMNN_CL.so", ""), "INCLUDE is empty"),
    (lambda s: s.replace("lib/libMNN_CL.so", "/lib/libMNN_CL.so"), "relative to the prefix"),
    (lambda s: s + "TERMUX_SUBPKG_DEPEND_ON_PARENT=maybe\n", "DEPEND_ON_PARENT"),
    (lambda s: s.replace("lib/libMNN_CL.so", "lib/libMNN_CL.so "), "trailing whitespace"),
])
def test_subpackage_rules_catch_their_mistakes(tmp_path, edit, problem):
    problems = _lint_edited(tmp_path, MNN_RECIPE, "mnn-backend-opencl.subpackage.sh", edit)
    assert any(problem in p for p in problems), problems


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="needs shellcheck (.ci/run installs it)")
def test_shellcheck():
    # SC2034: recipe and env variables are read by the build system / the service script
    # SC2239: the shebang's @TERMUX_PREFIX@ is replaced at install time
    for cwd, args in ((RECIPE, ["-s", "bash", "-e", "SC2034", "build.sh"]),
                      (RECIPE, ["-s", "sh", "-e", "SC2239", "serve.sh"]),
                      (RECIPE, ["-s", "sh", "-e", "SC2034", "serve.env"]),
                      (MNN_RECIPE, ["-s", "bash", "-e", "SC2034", *sorted(p.name for p in MNN_RECIPE.glob("*.sh"))]),
                      (REPO, ["-x", "tools/termux/replay.sh", "tools/termux/replay_sid.sh", "tools/arm/check.sh",
                              "tools/arm/root.sh",
                              "tools/arm/probe.sh", "tools/arm/memory.sh", "tools/mnn/apply_patches.sh",
                              "tools/mnn/build_row_probe.sh",
                              "tools/mnn/build_unpatched.sh"])):
        result = subprocess.run(["shellcheck", *args], cwd=cwd, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


def test_service_script_builds_the_serve_command(tmp_path):
    prefix = tmp_path / "usr"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "etc" / "mnn-engine").mkdir(parents=True)
    (prefix / "bin" / "sh").symlink_to("/bin/sh")
    fake_python = prefix / "bin" / "python"
    fake_python.write_text('#!/bin/sh\nprintf "%s\\n" "$@"; echo "KEY=$MNN_ENGINE_API_KEY HOME=$HOME TMP=$TMPDIR"\n'
                           'echo "LIBS=$LD_LIBRARY_PATH"\n')
    fake_python.chmod(0o755)
    env_file = (RECIPE / "serve.env").read_text()
    env_file = env_file.replace("MNN_ENGINE_MODEL=\n", "MNN_ENGINE_MODEL=qwen3-0-6b-mnn\n")
    env_file = env_file.replace("MNN_ENGINE_API_KEY=\n", "MNN_ENGINE_API_KEY=abc\n")
    env_file = env_file.replace("MNN_ENGINE_MMAP=1", "MNN_ENGINE_MMAP=0")
    env_file = env_file.replace("MNN_ENGINE_THREADS=\n", "MNN_ENGINE_THREADS=3\n")
    env_file = env_file.replace("MNN_ENGINE_GPU_LIBRARY_PATH=\n", "MNN_ENGINE_GPU_LIBRARY_PATH=/vendor/lib64\n")
    (prefix / "etc" / "mnn-engine" / "serve.env").write_text(env_file)
    script = tmp_path / "serve"
    home = tmp_path / "home"  # the recipe writes $TERMUX_ANDROID_HOME in
    script.write_text((RECIPE / "serve.sh").read_text().replace("@TERMUX_PREFIX@", str(prefix))
                      .replace("@TERMUX_HOME@", str(home)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    out = subprocess.run([str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                         check=True).stdout.split("\n")
    assert out[:15] == ["-m", "mnn_engine", "serve", "qwen3-0-6b-mnn", "--host", "127.0.0.1", "--port", "8081",
                        "--backend", "cpu", "--precision", "low", "--threads", "3", "--no-mmap"]
    assert f"KEY=abc HOME={home} TMP={prefix}/tmp" in out
    assert "LIBS=/vendor/lib64" in out  # exported to the server's process (an assignment in serve.env is not)
    # an LD_LIBRARY_PATH the service already has is kept after the GPU's
    again = subprocess.run([str(script)], capture_output=True, text=True, check=True,
                           env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/x"}).stdout.split("\n")
    assert "LIBS=/vendor/lib64:/x" in again
    (prefix / "etc" / "mnn-engine" / "serve.env").write_text((RECIPE / "serve.env").read_text())
    default = subprocess.run([str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                             check=True).stdout.split("\n")
    assert "LIBS=" in default  # the shipped serve.env changes nothing


def test_the_recipes_build_the_pinned_mnn_and_link_against_it():
    mnn = (MNN_RECIPE / "build.sh").read_text()
    python = (RECIPE / "build.sh").read_text()
    wrap = (REPO / "subprojects" / "MNN.wrap").read_text()
    commit = "d407447ed56c4121a11ccbd266dc184ca1ead0c2"
    assert f"revision = {commit}" in wrap and f"_MNN_COMMIT={commit}" in mnn
    assert 'TERMUX_PKG_VERSION="3.6.1"' in mnn and "-DMNN_SEP_BUILD=ON" in mnn
    assert "-Dmnn=system" in python and "-Dmnn_prefix=$TERMUX_PREFIX" in python
    assert "mnn," in python.split("TERMUX_PKG_DEPENDS=")[1].split("\n")[0]
    for recipe in (mnn, python):
        assert "/tmp" not in recipe.replace("$TERMUX_PKG_TMPDIR", "")


def test_backend_subpackages_hold_the_libraries_mnn_engine_loads():
    from mnn_engine.runtime.build import BACKEND_LIBRARIES

    python = (RECIPE / "build.sh").read_text()
    for backend, library in BACKEND_LIBRARIES.items():
        subpackage = MNN_RECIPE / f"mnn-backend-{backend}.subpackage.sh"
        assert f"lib/{library}" in subpackage.read_text().split()
        assert f"mnn-backend-{backend}" in python  # recommended by python-mnn-engine
        assert library in (MNN_RECIPE / "build.sh").read_text()  # checked after the install


def test_the_termux_recipe_carries_the_same_mnn_patches():
    ours = sorted((REPO / "subprojects" / "packagefiles" / "MNN").glob("*.patch"))
    termux = sorted((REPO / "packaging" / "termux" / "mnn").glob("*.patch"))
    assert ours and [p.name for p in ours] == [p.name for p in termux]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(ours, termux, strict=True))


def test_runtime_deps_are_pyprojects_with_the_same_bounds():
    """The postinst pip-installs what pyproject.toml declares, bounds and all,
    and every declared dependency is imported by the package (numpy was not)."""
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    fields = read_fields(RECIPE / "build.sh", ("TERMUX_PKG_PYTHON_RUNTIME_DEPS", "TERMUX_PKG_DEPENDS"))
    assert [d.strip().strip("'") for d in fields["TERMUX_PKG_PYTHON_RUNTIME_DEPS"][0].split(",")] == declared
    sources = "\n".join(p.read_text() for p in (REPO / "mnn_engine").rglob("*.py"))
    for requirement in declared:
        module = re.split(r"[<>=]", requirement)[0].replace("-", "_")
        assert re.search(rf"^\s*(import|from) {module}\b", sources, re.M), f"{module} is declared but never imported"
    assert "python-numpy" not in fields["TERMUX_PKG_DEPENDS"][0]


def test_the_postinst_says_how_to_finish_when_pip_failed(tmp_path):
    """The recipe's postinst, continued by termux-packages' python debscripts
    (tools/termux/package_steps.sh, its port), on a phone offline at install
    time: pip fails, the script still exits 0 (as termux's does), and then
    says what is missing and the pip command that finishes the install."""
    prefix = tmp_path / "usr"
    (prefix / "bin").mkdir(parents=True)
    site = tmp_path / "site/mnn_engine-0.1.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: mnn-engine\nVersion: 0.1.0\n"
                                   "Requires-Dist: tornado>=6.3\n")
    (prefix / "bin" / "pip3").write_text("#!/bin/sh\necho 'ERROR: No matching distribution found' >&2\nexit 1\n")
    # the phone's python: mnn-engine installed, tornado not (blocked in sys.modules)
    (prefix / "bin" / "python").write_text(
        f"#!/bin/sh\n[ \"$1 $2\" = '-m mnn_engine.cli.dependencies' ] || exit 9\n"
        f"exec {sys.executable} -c \"import runpy, sys; sys.modules['tornado'] = None; "
        "runpy.run_module('mnn_engine.cli.dependencies', run_name='__main__')\"\n")
    for tool in ("pip3", "python"):
        (prefix / "bin" / tool).chmod(0o755)
    debian = tmp_path / "DEBIAN"
    debian.mkdir()
    script = f"""
set -euo pipefail
. {REPO / 'tools/termux/package_steps.sh'}
termux_error_exit() {{ echo "$*" >&2; exit 1; }}
TERMUX_PKG_TMPDIR={tmp_path}
set +u  # a recipe reads termux-packages' variables, not all of which are set here
. {RECIPE / 'build.sh'}
set -u
TERMUX_PREFIX={prefix} TERMUX_PYTHON_VERSION=3.11
cd {debian} && termux_step_create_debscripts
python_debscripts python-mnn-engine {debian} {tmp_path / 'site'}
"""
    subprocess.run(["bash", "-c", script], check=True)
    postinst = (debian / "postinst").read_text()
    assert postinst.count("exit 0\n") == 2 and postinst.endswith("exit 0\n")  # the recipe's own last line went
    assert postinst.index("trap ") < postinst.index("pip3\" install")
    ran = subprocess.run(["sh", str(debian / "postinst"), "configure"], capture_output=True, text=True, cwd="/")
    assert ran.returncode == 0, ran.stderr
    assert "ERROR: No matching distribution found" in ran.stderr
    assert "python-mnn-engine: [dependency_missing]" in ran.stdout and "'tornado'" in ran.stdout
    assert "Finish the install with: pip install 'tornado>=6.3' 'prometheus-client>=0.17'" in ran.stdout
    upgrade = subprocess.run(["sh", str(debian / "postinst"), "abort-upgrade"], capture_output=True, text=True)
    assert upgrade.returncode == 0 and upgrade.stdout == ""  # the check runs after a configure only


def _install_license(tmp_path, recipe, srcdir, **env):
    script = f"""
set -euo pipefail
. {REPO / 'tools/termux/package_steps.sh'}
termux_error_exit() {{ echo "$*" >&2; exit 1; }}
TERMUX_PKG_TMPDIR={tmp_path}
set +u
. {recipe / 'build.sh'}
set -u
TERMUX_PREFIX={tmp_path}/usr TERMUX_PKG_NAME={recipe.name} TERMUX_PKG_SRCDIR={srcdir}
{' '.join(f'{k}={v!r}' for k, v in env.items())}
termux_step_install_license
"""
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True)


def test_every_licence_shipped_is_installed_with_its_text(tmp_path):
    """termux_step_install_license (the replay's port) with the recipes'
    TERMUX_PKG_LICENSE_FILE: the package's own licence, the notices and each
    vendored library's copyright file (a repeated basename gets a suffix)."""
    assert _install_license(tmp_path, RECIPE, REPO).returncode == 0
    doc = tmp_path / "usr/share/doc/python-mnn-engine"
    assert sorted(p.name for p in doc.iterdir()) == ["LICENSE", "THIRD_PARTY_NOTICES.md", "copyright",
                                                      *(f"copyright.{i}" for i in range(1, 5))]
    texts = "".join(p.read_text() for p in doc.iterdir())
    for licence in ("Apache License", "Expat", "BSD-3-clause", "OFL-1.1"):
        assert licence in texts, licence
    missing = _install_license(tmp_path, RECIPE, tmp_path)  # a source without the files fails the build
    assert missing.returncode != 0 and "LICENSE does not exist" in missing.stderr
    assert _install_license(tmp_path, MNN_RECIPE, REPO / "subprojects" / "MNN").returncode == 0
    assert os.readlink(tmp_path / "usr/share/doc/mnn/copyright") == "../../LICENSES/Apache-2.0.txt"
