"""A real server on loopback, with its own engine and an ``openai`` client."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse

import openai
from support import test_model_dir

from mnn_engine import Engine, ModelStore

KEY = "s3cret-key"


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
