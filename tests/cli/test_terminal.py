"""The terminal clients do not let a model's or a server's text drive the
terminal: control sequences (clear screen, OSC 0 window title, OSC 52
clipboard write, CSI 6n status report) are shown as visible escapes on a
terminal, and kept as they came in a pipe or with ``--raw-output``. The
hostile server is a stand-in that streams as OpenAI's API reference defines
a streamed chat completion (``data:`` server-sent events of
``chat.completion.chunk`` objects, then ``data: [DONE]``; openai-openapi's
CreateChatCompletionStreamResponse), the format our own server sends."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pexpect
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnn_engine.cli.terminal import text_writer, visible

HOSTILE = ["Hello \x1b[2J", "\x1b]0;pwned\x07", "\x1b]52;c;ZWNobyBwd25lZA==\x07", "\x1b[6n", "\r\x9b31m", "end\n\tok"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_visible_escapes_every_control_but_newline_and_tab():
    assert visible("a\x1b[2Jb\x07\x9b\x7f\n\t") == "a\\x1b[2Jb\\x07\\x9b\\x7f\n\t"


@given(st.text())
def test_nothing_a_terminal_acts_on_survives(text):
    shown = visible(text)
    assert not [c for c in shown if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f]
    clean = "".join(c for c in text if not ((ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f))
    assert visible(clean) == clean  # text without controls is written as it is


def test_the_writer_escapes_on_a_terminal_only():
    tty, pipe, raw = _Tty(), io.StringIO(), _Tty()
    for stream, kwargs in ((tty, {}), (pipe, {}), (raw, {"raw": True})):
        write = text_writer(stream, **kwargs)
        for piece in HOSTILE:
            write(piece)
    assert "\x1b" not in tty.getvalue() and "\\x1b]52;c;" in tty.getvalue()
    assert pipe.getvalue() == raw.getvalue() == "".join(HOSTILE)


@pytest.fixture()
def hostile_server():
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in HOSTILE:
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                         "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("raw", [False, True])
def test_generate_url_on_a_terminal(hostile_server, raw):
    child = pexpect.spawn(sys.executable, ["-m", "mnn_engine", "generate", "m", "hi", "--url", hostile_server,
                                           *(["--raw-output"] if raw else [])],
                          env={**os.environ, "TERM": "dumb"}, encoding="utf-8", timeout=60, cwd="/")
    out = child.read()
    child.close()
    assert child.exitstatus == 0, out
    if raw:
        assert "\x1b]52;c;" in out
    else:
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
        assert "Hello \\x1b[2J\\x1b]0;pwned\\x07" in out and "\\x1b[6n" in out


def test_generate_url_into_a_pipe_keeps_the_text(hostile_server):
    out = subprocess.run([sys.executable, "-m", "mnn_engine", "generate", "m", "hi", "--url", hostile_server],
                         capture_output=True, timeout=60, cwd="/")  # bytes: text mode would turn \r into \n
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode() == "".join(HOSTILE) + "\n"
