"""``GET /metrics``: Prometheus text exposition (prometheus_client), one
registry per server. Requests by route and status, generations by how they
ended, tokens, time to first token and decode speed, busy refusals, the
queue, the model's load time and this process's memory."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from ..engine.events import Event
    from ..engine.protocol import ServedModels

from ..errors import MnnEngineError
from ..runtime.memory import rss_bytes
from .app import JsonHandler

TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
RATE_BUCKETS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 400)


class Metrics:
    """The server's counters; fed by its handlers and by the engines' events."""

    def __init__(self, models: ServedModels) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mnn_engine_http_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=r)
        self.generations = Counter("mnn_engine_generations", "Generations by how they ended", ["finish_reason"],
                                   registry=r)
        self.tokens = Counter("mnn_engine_tokens", "Tokens: prompt, cached (prompt tokens the KV cache held), "
                              "generated", ["kind"], registry=r)
        self.ttft = Histogram("mnn_engine_time_to_first_token_seconds", "Time to the first token", registry=r,
                              buckets=TTFT_BUCKETS)
        self.decode_rate = Histogram("mnn_engine_decode_tokens_per_second", "Decode speed per generation",
                                     registry=r, buckets=RATE_BUCKETS)
        self.busy = Counter("mnn_engine_busy_rejections", "Requests refused because a generation was running "
                            "(429)", registry=r)
        self.queue_depth = Gauge("mnn_engine_queue_depth", "Requests waiting for the model", registry=r)
        self.queue: Any = None  # server.queue.GenerationQueue, when the server has one
        self.queue_depth.set_function(lambda: self.queue.depth if self.queue is not None else 0)
        self.queue_timeouts = Counter("mnn_engine_queue_timeouts", "Queued requests that waited too long", registry=r)
        load = Gauge("mnn_engine_model_load_seconds", "How long the loaded model (the slowest, when several are "
                     "loaded) took to load", registry=r)

        def load_seconds() -> float:
            seconds = [0.0]
            for _, engine in models.loaded_engines():
                with contextlib.suppress(MnnEngineError):  # unloaded meanwhile
                    seconds.append(float(engine.loaded_model.load_seconds or 0.0))
            return max(seconds)

        load.set_function(load_seconds)
        loaded = Gauge("mnn_engine_models_loaded", "Models loaded now", registry=r)
        loaded.set_function(lambda: len(models.loaded_engines()))
        self.loads = Counter("mnn_engine_model_loads", "Model loads by how they ended (loaded, failed) and "
                             "unloads by why (expired, evicted, keep_alive)", ["event"], registry=r)
        rss = Gauge("mnn_engine_resident_memory_bytes", "Resident memory of the server process", registry=r)
        rss.set_function(rss_bytes)
        self._unsubscribe = models.events.subscribe(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.kind == "model":
            if event.state == "loaded":
                self.loads.labels(event="loaded").inc()
            elif event.state == "unloaded":
                self.loads.labels(event=str(event.data.get("reason") or ("failed" if event.data.get("error")
                                                                            else "unloaded"))).inc()
            return
        if event.kind != "generation" or event.state == "running":
            return
        self.generations.labels(finish_reason=event.state).inc()
        usage = event.data.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        self.tokens.labels(kind="prompt").inc(usage.get("prompt_tokens", 0))
        self.tokens.labels(kind="cached").inc(cached)
        self.tokens.labels(kind="generated").inc(usage.get("completion_tokens", 0))
        ttft = event.data.get("time_to_first_token_ms")
        if ttft:
            self.ttft.observe(ttft / 1000)
        rate = event.data.get("decode_tokens_per_second")
        if rate:
            self.decode_rate.observe(rate)

    def request(self, route: str, status: int) -> None:
        self.requests.labels(route=route, status=str(status)).inc()

    def close(self) -> None:
        self._unsubscribe()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsHandler(JsonHandler):
    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(self.ctx.metrics.exposition())


def routes(ctx: Any) -> list[tuple[str, type, dict[str, Any]]]:
    return [(r"/metrics", MetricsHandler, {"ctx": ctx})]
