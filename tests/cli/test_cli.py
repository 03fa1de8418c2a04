"""The command line, run as a user runs it: `python -m mnn_engine ...`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pexpect
import pytest
from support import MNN_BATCH_EXACT, SCRIPTED_TEXT, test_model_dir

import mnn_engine


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def cli(home, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MNN_ENGINE_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "mnn_engine", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=300, cwd="/")


def test_models_lifecycle(home):
    imported = cli(home, "models", "import", str(test_model_dir("tiny-scripted")), "--id", "scripted", "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["id"] == "scripted"

    human = cli(home, "models", "import", str(test_model_dir("tiny")), "--progress")
    assert human.returncode == 0 and "imported tiny" in human.stdout
    assert "importing [" in human.stderr and "100%" in human.stderr

    listed = cli(home, "models", "list", "--json")
    rows = json.loads(listed.stdout)
    assert [r["id"] for r in rows] == ["scripted", "tiny"]
    for row in rows:
        assert {"id", "name", "size_bytes", "path"} <= set(row) and row["size_bytes"] > 0
    assert "scripted" in cli(home, "models", "list").stdout

    info = cli(home, "models", "info", "tiny")
    assert "llm.mnn.weight" in info.stdout and "size" in info.stdout
    assert cli(home, "models", "rename", "tiny", "tiny-2").returncode == 0
    assert cli(home, "models", "rm", "tiny-2").returncode == 0
    assert [r["id"] for r in json.loads(cli(home, "models", "list", "--json").stdout)] == ["scripted"]


@pytest.mark.parametrize(("args", "code"), [
    (["models", "info", "missing"], "model_not_found"),
    (["models", "rm", "missing"], "model_not_found"),
    (["models", "import", "/definitely/not/here"], "model_not_found"),
    (["models", "rename", "missing", "x"], "model_not_found"),
    (["cache", "show", "missing"], "model_not_found"),
    (["chat", "missing"], "model_not_found"),
    (["chat", "missing", "--threads", "12"], "invalid_argument"),
])
def test_errors_exit_non_zero_with_the_code(home, args, code):
    result = cli(home, *args)
    assert result.returncode == 2
    assert f"[{code}]" in result.stderr
    assert "Traceback" not in result.stderr


def test_duplicate_import_is_model_exists(home):
    assert cli(home, "models", "import", str(test_model_dir("tiny"))).returncode == 0
    again = cli(home, "models", "import", str(test_model_dir("tiny")))
    assert again.returncode == 2 and "[model_exists]" in again.stderr
    assert cli(home, "models", "import", str(test_model_dir("tiny")), "--replace").returncode == 0


def test_cache_and_backends(home):
    cli(home, "models", "import", str(test_model_dir("tiny")))
    shown = cli(home, "cache", "show", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout) == {}
    assert json.loads(cli(home, "cache", "show", "tiny", "--json").stdout) == {"tiny": 0}
    assert cli(home, "cache", "clear").stdout.startswith("freed")
    backends = json.loads(cli(home, "backends", "--json").stdout)
    assert backends["cpu"] == {"compiled": True, "available": True}
    assert "not compiled" in cli(home, "backends").stdout


def test_generate_streams_an_answer(home):
    result = cli(home, "generate", str(test_model_dir("tiny-scripted")), "hi", "--temperature", "0", "--stats")
    assert result.returncode == 0, result.stderr
    assert result.stdout == SCRIPTED_TEXT + "\n"
    assert json.loads(result.stderr.strip().splitlines()[-1])["finish_reason"] == "stop"


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_load_commands_use_the_preset_and_flags_override_it(home, command):
    cli(home, "models", "import", str(test_model_dir("tiny-scripted")), "--id", "scripted")
    preset = asdict(mnn_engine.LoadOptions(backend="opencl", threads=1))  # opencl: not in the wheel
    mnn_engine.ModelStore(home).save_preset("scripted", preset, {"decode_p50": 1.0})
    args = ["generate", "scripted", "hi"] if command == "generate" else ["chat", "scripted"]
    refused = cli(home, *args, stdin="hi\n")
    assert refused.returncode == 2 and "[backend_unavailable]" in refused.stderr
    fixed = cli(home, *args, "--backend", "cpu", "--temperature", "0", stdin="hi\n")
    assert fixed.returncode == 0 and SCRIPTED_TEXT in fixed.stdout, fixed.stderr
    bad = cli(home, *args, "--backend", "cpu", "--kv-quant", "3", stdin="hi\n")
    assert bad.returncode == 2 and "[invalid_argument] quant_qkv" in bad.stderr


def test_chat_reads_until_end_of_input(home):
    cli(home, "models", "import", str(test_model_dir("tiny-scripted")), "--id", "scripted")
    result = cli(home, "chat", "scripted", "--threads", "1", "--temperature", "0", stdin="hi\nand again\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(SCRIPTED_TEXT) == 2


def test_chat_says_what_loaded_and_has_the_commands_a_repl_has(home, tmp_path):
    cli(home, "models", "import", str(test_model_dir("tiny-scripted")), "--id", "scripted")
    saved = tmp_path / "talk.json"
    lines = ["/help", "hi", "/stats", "/stats on", "again", "/save " + str(saved), "/system Be brief.",
             "/save " + str(tmp_path / "after-system.json"), "/reset", "/nonsense", "//slash", "/exit", "unread"]
    result = cli(home, "chat", "scripted", "--threads", "1", "--temperature", "0", stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr
    err = result.stderr
    # speculative decoding is on by default in int4 where MNN's batched rows are exact (our patched MNN)
    spec = ", speculative decoding" if MNN_BATCH_EXACT else ""
    assert f"loaded scripted (cpu, 1 thread, context 2048 tokens{spec})" in err
    assert "/reset" in err and "/save FILE" in err  # /help went to the user, not to the model
    assert result.stdout.count(SCRIPTED_TEXT) == 3  # hi, again, //slash: three answers, no more
    assert err.count(" tok/s; prompt ") == 3  # /stats, then after each answer once on: "again", "//slash"
    talk = json.loads(saved.read_text())["messages"]
    assert [m["role"] for m in talk] == ["user", "assistant", "user", "assistant"]
    assert talk[0]["content"] == "hi" and talk[1]["content"] == SCRIPTED_TEXT
    assert json.loads((tmp_path / "after-system.json").read_text())["messages"] == [
        {"role": "system", "content": "Be brief."}]
    assert "[unknown command /nonsense; /help lists them]" in err


def test_interactive_chat_ctrl_c_stops_the_answer_and_ctrl_d_quits(home):
    cli(home, "models", "import", str(test_model_dir("tiny")), "--id", "tiny")
    env = dict(os.environ, MNN_ENGINE_HOME=str(home))
    child = pexpect.spawn(sys.executable, ["-m", "mnn_engine", "chat", "tiny", "--threads", "1",
                                           "--max-tokens", "100000", "--temperature", "0"],
                          env=env, encoding="utf-8", timeout=60, cwd="/",
                          # as a terminal's foreground job: SIGINT at its default (a test run a shell started in
                          # the background inherits it ignored, and the chat never saw the Ctrl-C)
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        child.expect_exact("you> ")
        child.sendline("tell me everything")
        child.expect(r".{40}")  # the answer is streaming
        child.sendintr()
        child.expect_exact("[stopped]")
        child.expect_exact("you> ")  # still alive, asking again
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_installed_build_info_matches_the_extension():
    # installed: next to the package; editable: in the build directory, next to the extension
    candidates = [Path(mnn_engine.__file__).parent / "_build_info.json",
                  Path(mnn_engine._mnn.__file__).parent / "_build_info.json"]
    path = next(p for p in candidates if p.is_file())
    assert json.loads(path.read_text()) == mnn_engine.build_info()


def test_unknown_model_says_what_to_do(home):
    result = cli(home, "generate", "nosuchid", "hi")
    assert result.returncode == 2
    assert "neither a model in the store nor a model directory" in result.stderr and "models list" in result.stderr


def test_model_exists_names_the_way_out(home):
    assert cli(home, "models", "import", str(test_model_dir("tiny"))).returncode == 0
    again = cli(home, "models", "import", str(test_model_dir("tiny")))
    assert again.returncode == 2 and "--replace" in again.stderr and "--id" in again.stderr


def test_sizes_are_iec(home):
    cli(home, "models", "import", str(test_model_dir("tiny")))
    listing = cli(home, "models", "list").stdout
    assert "MiB" in listing and " MB" not in listing


def test_chat_keeps_a_line_history_per_model(home):
    cli(home, "models", "import", str(test_model_dir("tiny-scripted")), "--id", "scripted")
    env = {**os.environ, "MNN_ENGINE_HOME": str(home), "TERM": "dumb"}
    child = pexpect.spawn(sys.executable, ["-m", "mnn_engine", "chat", "scripted", "--temperature", "0",
                                           "--max-tokens", "4"], env=env, encoding="utf-8", timeout=60, cwd="/")
    try:
        child.expect_exact("you> ")
        child.sendline("first question")
        child.expect_exact("you> ")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close()
    history = (home / "history" / "scripted.txt").read_text()
    assert "first question" in history
