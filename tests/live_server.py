"""A real server on loopback, with its own engine and an ``openai`` client."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Iterator

import openai
import pytest
from support import test_model_dir

from mnn_engine import Engine, ModelStore

KEY = "s3cret-key"


def free_port() -> int:
    """A TCP port free on loopback now (for a server started as a separate process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Live:
    """A server on 127.0.0.1 with its own engine."""

    def __init__(self, tmp, model: str, **server_options) -> None:
        self.engine = Engine(ModelStore(tmp))
        self.engine.load(str(test_model_dir(model)), threads=1)
        self.url = self.engine.start_server(port=0, **server_options)
        parts = urllib.parse.urlsplit(self.url)
        self.host, self.port = parts.hostname, parts.port
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=server_options.get("api_key") or "none",
                                    max_retries=0, timeout=60)

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            if isinstance(body, str):
                body = body.encode()
            hdrs = {"Content-Type": "application/json"} if body is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=body, headers=hdrs)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def post_json(self, payload, headers=None):
        status, hdrs, body = self.request("POST", "/v1/chat/completions", json.dumps(payload), headers)
        return status, hdrs, json.loads(body)

    def wait_idle(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.engine.snapshot()["generation"]["state"] != "idle":
            assert time.monotonic() < deadline, "generation did not end"
            time.sleep(0.01)

    def close(self) -> None:
        self.engine.close()


def assert_closing_the_stream_cancels(live: Live, path: str, payload: dict, opening: bytes) -> None:
    """A long streamed generation on ``path``: once ``opening`` has arrived the client leaves, and the
    generation ends cancelled (the engine's own record of it)."""
    conn = http.client.HTTPConnection(live.host, live.port, timeout=60)
    conn.request("POST", path, json.dumps({**payload, "stream": True}), {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    assert opening in response.read(256)
    conn.close()
    live.wait_idle()
    assert live.engine.llm.last_result.finish_reason == "cancelled"


def live_fixture(tmp_path_factory, model: str, **options) -> Iterator[Live]:
    live = Live(tmp_path_factory.mktemp("store"), model, **options)
    yield live
    live.close()


def server_fixture(model: str, **options):
    """A module-scoped fixture: a live server on ``model`` with these server options."""
    @pytest.fixture(scope="module")
    def server(tmp_path_factory):
        yield from live_fixture(tmp_path_factory, model, **options)

    return server


def sse_events(raw: bytes) -> list:
    """The data of each server-sent event (``[DONE]`` kept as the string)."""
    events = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[6:]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


SHORT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}
LONG = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1, "ignore_eos": True, "stream": True}


class Holder:
    """A streaming generation that keeps the model busy until ``release()``."""

    def __init__(self, live: Live) -> None:
        self.conn = http.client.HTTPConnection(live.host, live.port, timeout=60)
        self.conn.request("POST", "/v1/chat/completions", json.dumps(LONG), {"Content-Type": "application/json"})
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        self.response.read(64)  # the generation runs
        self.live = live

    def release(self) -> None:
        self.conn.close()  # the client leaves: its generation is cancelled
        self.live.wait_idle()
