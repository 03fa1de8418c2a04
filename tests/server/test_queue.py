"""The optional request queue (serve --queue N): first come first served,
a full queue and a long wait answer 429, a client that leaves gives up its
place, stopping the server answers the waiting 503; /health and /metrics
show it."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest
from live_server import SHORT, Holder, Live

from mnn_engine import MnnEngineError


def _waiting(live: Live) -> int:
    return json.loads(live.request("GET", "/health")[2])["queue"]["waiting"]


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _background(live: Live, results: dict, name: str, body=SHORT) -> threading.Thread:
    def run() -> None:
        status, _, raw = live.request("POST", "/v1/chat/completions", json.dumps(body))
        results[name] = (status, json.loads(raw), time.monotonic())

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.fixture
def queued(tmp_path):
    live = Live(tmp_path, "tiny", queue=2, queue_timeout=30)
    yield live
    live.close()


def test_first_come_first_served_and_a_full_queue_is_429(queued):
    holder = Holder(queued)
    results: dict = {}
    threads = []
    # the order the generations ran in, told by the engine (the clients' clocks after their answers
    # can be read in either order: both answers arrive within a millisecond)
    ran: list[int] = []
    unsubscribe = queued.engine.events.subscribe(
        lambda e: ran.append(e.data["usage"]["prompt_tokens"]) if e.kind == "generation" and e.state == "length"
        else None)
    prompts = {"first": "hi", "second": "hi hi hi hi hi hi"}
    for i, name in enumerate(("first", "second")):
        body = {**SHORT, "messages": [{"role": "user", "content": prompts[name]}]}
        threads.append(_background(queued, results, name, body))
        _wait_for(lambda n=i + 1: _waiting(queued) == n)
    status, hdrs, raw = queued.request("POST", "/v1/chat/completions", json.dumps(SHORT))
    assert status == 429 and "2 requests are already waiting" in json.loads(raw)["error"]["message"]
    assert hdrs["retry-after"] == "1"
    holder.release()
    for thread in threads:
        thread.join(60)
    unsubscribe()
    assert results["first"][0] == results["second"][0] == 200
    tokens = {name: results[name][1]["usage"]["prompt_tokens"] for name in prompts}
    assert tokens["first"] != tokens["second"] and ran == [tokens["first"], tokens["second"]]  # in order of arrival
    assert _waiting(queued) == 0


def test_a_client_that_leaves_gives_up_its_place(queued):
    holder = Holder(queued)
    leaving = http.client.HTTPConnection(queued.host, queued.port, timeout=60)
    leaving.request("POST", "/v1/chat/completions", json.dumps(SHORT), {"Content-Type": "application/json"})
    _wait_for(lambda: _waiting(queued) == 1)
    results: dict = {}
    staying = _background(queued, results, "staying")
    _wait_for(lambda: _waiting(queued) == 2)
    leaving.close()
    _wait_for(lambda: _waiting(queued) == 1)
    holder.release()
    staying.join(60)
    assert results["staying"][0] == 200


def test_stopping_the_server_answers_the_waiting_503(queued):
    holder = Holder(queued)  # kept: dropping it would close its connection
    results: dict = {}
    waiting = _background(queued, results, "waiting")
    _wait_for(lambda: _waiting(queued) == 1)
    queued.engine.stop_server()
    waiting.join(60)
    assert results["waiting"][0] == 503 and results["waiting"][1]["error"]["code"] == "server_stopping"
    holder.conn.close()


def test_a_long_wait_is_429_and_counted(tmp_path):
    live = Live(tmp_path, "tiny", queue=1, queue_timeout=0.3)
    try:
        holder = Holder(live)
        started = time.monotonic()
        status, _, raw = live.request("POST", "/v1/chat/completions", json.dumps(SHORT))
        assert status == 429 and "waited 0.3 s" in json.loads(raw)["error"]["message"]
        assert time.monotonic() - started >= 0.3
        metrics = live.request("GET", "/metrics")[2].decode()
        assert "mnn_engine_queue_timeouts_total 1.0" in metrics
        holder.release()
        assert live.request("POST", "/v1/chat/completions", json.dumps(SHORT))[0] == 200
    finally:
        live.close()


def test_without_a_queue_busy_is_at_once(tmp_path):
    live = Live(tmp_path, "tiny", queue=0)
    try:
        holder = Holder(live)
        assert live.request("POST", "/v1/chat/completions", json.dumps(SHORT))[0] == 429
        assert json.loads(live.request("GET", "/health")[2])["queue"] == {"limit": 0, "waiting": 0,
                                                                          "timeout_s": 60.0}
        holder.release()
    finally:
        live.close()


@pytest.mark.parametrize(("options", "param"), [({"queue": -1}, "queue"), ({"queue_timeout": 0}, "queue_timeout")])
def test_queue_options_are_checked(tmp_path, options, param):
    with pytest.raises(MnnEngineError) as err:
        Live(tmp_path, "tiny", **options)
    assert err.value.param == param


def test_the_queue_is_on_by_default_so_concurrent_callers_all_get_answers(tmp_path):
    # langchain's batch() and litellm's batch_completion send their prompts at
    # once, from a thread pool, each expecting an answer: what OpenAI-compatible
    # clients expect of a local server (Ollama queues 512 by default).
    from concurrent.futures import ThreadPoolExecutor

    live = Live(tmp_path, "tiny")
    try:
        assert json.loads(live.request("GET", "/health")[2])["queue"] == {"limit": 16, "waiting": 0,
                                                                          "timeout_s": 60.0}

        def ask(i: int) -> str:
            reply = live.client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": f"prompt {i}"}], max_tokens=8, temperature=0)
            return reply.choices[0].finish_reason

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(ask, range(4))) == ["length"] * 4
    finally:
        live.close()


@pytest.mark.parametrize("queue", [0, None])
def test_cancel_a_stream_then_send_at_once_is_never_429(tmp_path, queue):
    # The SDK with max_retries=0: the disconnect cancels the generation, which
    # still counts as running until its next token; the next request waits for
    # that end instead of getting 429, with the queue on or off.
    live = Live(tmp_path, "tiny", **({} if queue is None else {"queue": queue}))
    try:
        for _ in range(50):
            stream = live.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                         max_tokens=2000, stream=True)
            next(iter(stream))
            stream.close()
            reply = live.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                        max_tokens=2)
            assert reply.choices[0].finish_reason == "length"
    finally:
        live.close()
