"""The Responses API's stored responses (``store``, the default as OpenAI's):
a bounded in-memory store, lost when the server stops.

Each entry keeps the response object, its own input items (``GET
/v1/responses/{id}/input_items``) and the whole conversation up to and
including its output, as items: ``previous_response_id`` continues from
there, and since that conversation renders to exactly the prompt the last
turn held, the prompt cache prefills only the new input. The store keeps at
most ``max_count`` responses and ``max_bytes`` of their JSON; the oldest go
first. An unknown or evicted id is a 404 (``response_not_found``).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..errors import MnnEngineError

#: defaults: enough for many agents' conversations, small beside a model
MAX_COUNT = 1000
MAX_BYTES = 64 * 2**20


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    conversation: list[dict[str, Any]]  # every item up to and including the response's output
    size: int


class ResponseStore:
    """Stored responses by id, oldest evicted first; safe from any thread."""

    def __init__(self, max_count: int = MAX_COUNT, max_bytes: int = MAX_BYTES) -> None:
        self.max_count, self.max_bytes = max_count, max_bytes
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, response: dict[str, Any], input_items: list[dict[str, Any]],
            conversation: list[dict[str, Any]]) -> None:
        size = len(json.dumps([response, conversation]))
        if size > self.max_bytes:
            return  # larger than the whole store: not kept (a later previous_response_id to it is a 404)
        entry = StoredResponse(response, input_items, conversation, size)
        with self._lock:
            self._entries[response["id"]] = entry
            self._bytes += size
            while len(self._entries) > self.max_count or self._bytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.size

    def get(self, response_id: str) -> StoredResponse:
        with self._lock:
            entry = self._entries.get(response_id)
        if entry is None:
            raise MnnEngineError("response_not_found", f"Response with id '{response_id}' not found.",
                                 param="response_id")
        return entry

    def delete(self, response_id: str) -> None:
        with self._lock:
            entry = self._entries.pop(response_id, None)
            if entry is not None:
                self._bytes -= entry.size
        if entry is None:
            raise MnnEngineError("response_not_found", f"Response with id '{response_id}' not found.",
                                 param="response_id")

    def __len__(self) -> int:
        return len(self._entries)
