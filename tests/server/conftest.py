"""Every server test runs with a log handler that fails it on any ERROR
record with a traceback: a served request, whatever its outcome (401, a
client that leaves, a server stopped with /events open), never logs one
(issue 26). A test that provokes an internal error on purpose says so with
``@pytest.mark.tracebacks_expected(reason)``."""

from __future__ import annotations

import logging

import pytest


class _TracebackRecorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.stack_info or "Traceback (most recent call last)" in record.getMessage():
            self.records.append(record)


_recorder = _TracebackRecorder()
logging.getLogger().addHandler(_recorder)


def _check(new: list[logging.LogRecord], where: str) -> None:
    if new:
        shown = "\n".join(f"{r.name}: {r.getMessage()} ({r.exc_info[0].__name__ if r.exc_info else ''})"
                          for r in new)
        pytest.fail(f"the server logged {len(new)} traceback(s) {where}:\n{shown}")


@pytest.fixture(autouse=True, scope="module")
def no_traceback_when_servers_stop():
    """Set up before a module's servers, so it ends after they stop: what
    they log when they stop (after the module's last test) counts too."""
    start = len(_recorder.records)
    yield
    _check([r for r in _recorder.records[start:] if not getattr(r, "expected", False)], "while servers stopped")


@pytest.fixture(autouse=True)
def no_traceback_in_the_log(request):
    start = len(_recorder.records)
    yield
    new = _recorder.records[start:]
    if request.node.get_closest_marker("tracebacks_expected") is not None:
        for record in new:
            record.expected = True
        return
    _check(new, f"during {request.node.name}")
