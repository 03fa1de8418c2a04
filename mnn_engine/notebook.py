"""Jupyter helpers: pick the example model, stream an answer as Markdown
into the cell, and a chat widget with a Stop button (``ipywidgets``, the
``notebook`` extra)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import config

if TYPE_CHECKING:
    from .engine.engine import Engine
    from .engine.pool import ModelPool

#: the catalog model the examples pull when the store is empty
DEFAULT_MODEL = "qwen3-0.6b"
_REFRESH_S = 0.1


def pick_model(engine: Engine, choice: str | None = None, default: str = DEFAULT_MODEL) -> str:
    """A store ID for the examples: ``choice`` (a model directory, a store ID
    or a catalog name; default ``$MNN_ENGINE_EXAMPLE_MODEL``), else the first
    model in the store, else ``default`` pulled from its catalog source."""
    choice = choice if choice is not None else config.example_model()
    if choice and os.path.isdir(os.path.expanduser(choice)):
        return engine.store.import_model(os.path.expanduser(choice), replace=True).id
    if choice:
        from .errors import MnnEngineError

        try:
            model_id, _ = engine.store.resolve(choice)
        except MnnEngineError:
            model_id = None
        return model_id or engine.pull(choice).id
    models = engine.store.list()
    return models[0].id if models else engine.pull(default).id


def stream_markdown(pieces: Iterable[str]) -> str:
    """Show ``pieces`` as Markdown in the cell as they come (redrawn at most
    ten times a second); returns the whole text."""
    from IPython.display import Markdown, display

    handle = display(Markdown(""), display_id=True)
    text, shown = "", 0.0
    for piece in pieces:
        text += piece
        if time.monotonic() - shown >= _REFRESH_S:
            handle.update(Markdown(text))
            shown = time.monotonic()
    handle.update(Markdown(text))
    return text


class ChatWidget:
    """A conversation in a cell: a text box, Send, Stop and New chat; answers
    stream in as Markdown. ``send(text)`` does what the button does and
    ``wait()`` blocks until the answer is complete (for scripts and tests).
    A stopped or failed answer keeps what was written, marked as such."""

    def __init__(self, engine: Engine | ModelPool, model: str | None = None, **options: Any) -> None:
        import ipywidgets as widgets

        from .engine.pool import ModelPool

        #: an Engine answers with its loaded model; a ModelPool with ``model`` (a name it serves),
        #: leased for each answer and loaded if need be, as a server's request leases it
        self.source = engine
        self.pool = engine if isinstance(engine, ModelPool) else None
        self.model = self.pool.resolve(model) if self.pool is not None else model
        self.engine: Any = engine if self.pool is None else None  # the engine of the answer being written
        self.options = options
        self.messages: list[dict[str, str]] = []
        self.prompt = widgets.Textarea(placeholder="Type a message…", layout=widgets.Layout(width="100%"))
        self.send_button = widgets.Button(description="Send", button_style="primary")
        self.stop_button = widgets.Button(description="Stop", disabled=True)
        self.new_button = widgets.Button(description="New chat")
        self.status = widgets.Label()
        self.output = widgets.Output()
        self.send_button.on_click(lambda _b: self.send(self.prompt.value))
        self.stop_button.on_click(lambda _b: self.stop())
        self.new_button.on_click(lambda _b: self.new_chat())
        self.box = widgets.VBox([self.output, self.prompt,
                                 widgets.HBox([self.send_button, self.stop_button, self.new_button, self.status])])
        self._thread: threading.Thread | None = None
        self._stopping = False

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)

    @property
    def answering(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop the answer being written (what Stop does); it keeps its text."""
        if self.answering:
            self._stopping = True
            if self.engine is not None:
                self.engine.cancel_generation()

    def new_chat(self) -> None:
        self.stop()
        self.wait()
        self.messages.clear()
        self.output.clear_output()
        self.status.value = ""

    def send(self, text: str) -> None:
        """Send ``text`` as the next user message (what Send does). Right after
        Stop, it waits for the stopped answer to end; while an answer is
        being written it does nothing (Send is disabled then)."""
        if not text.strip():
            return
        if self.answering:
            if not self._stopping:
                return
            self.wait()
        self.prompt.value = ""
        self.messages.append({"role": "user", "content": text})
        self._stopping = False
        self.send_button.disabled, self.stop_button.disabled = True, False
        self.status.value = "answering…"
        self._thread = threading.Thread(target=self._answer, name="mnn-engine-chat-widget", daemon=True)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def last_answer(self) -> str:
        return self.messages[-1]["content"] if self.messages and self.messages[-1]["role"] == "assistant" else ""

    def _render(self, streaming: str = "", note: str = "") -> None:
        from IPython.display import Markdown

        transcript = "\n\n".join(f"**{m['role']}:** {m['content']}" for m in self.messages)
        if streaming:
            transcript += f"\n\n**assistant:** {streaming}"
        if note:
            transcript += f"\n\n*{note}*"
        self.output.outputs = ()
        self.output.append_display_data(Markdown(transcript))

    def _pieces(self) -> Any:
        if self._stopping:  # Stop came while its model loaded: no answer
            return iter(())
        return self.engine.stream_chat(self.messages, context_overflow="truncate", **self.options)

    def _answer(self) -> None:
        text, shown, note = "", 0.0, ""
        lease = None
        try:
            if self.pool is not None:
                if self.model not in dict(self.pool.loaded_engines()):
                    self.status.value = f"loading {self.model}…"
                lease = self.pool.acquire(self.model)
                self.engine = lease.engine
                self.status.value = "answering…"
            for piece in self._pieces():
                text += piece
                if time.monotonic() - shown >= _REFRESH_S:
                    self._render(text)
                    shown = time.monotonic()
            result = self.engine.last_result
            stopped = result is not None and result.finish_reason == "cancelled"
            note = "(stopped)" if stopped else ""
            self.status.value = (f"{result.completion_tokens} tokens, {result.decode_tokens_per_second:.1f} tok/s"
                                 f"{' (stopped)' if stopped else ''}" if result is not None else "")
        except Exception as exc:  # shown in the widget: the kernel thread has no one to raise to
            note = f"(interrupted: {exc})"
            self.status.value = f"error: {exc}"
        finally:
            if lease is not None:
                lease.release()
            if text:  # what was written stays, marked
                self.messages.append({"role": "assistant", "content": text})
            elif self.messages and self.messages[-1]["role"] == "user":
                # nothing answered: the question goes back into the box, so the
                # next send is not two user turns in a row
                self.prompt.value = self.messages.pop()["content"]
            self._render(note=note)
            self.send_button.disabled, self.stop_button.disabled = False, True


def chat_widget(engine: Engine | ModelPool, model: str | None = None, **options: Any) -> ChatWidget:
    """A chat widget on the engine's loaded model, or on ``model`` of a
    ``ModelPool`` (a store's models by name, loaded when used; None: its
    default); ``options`` are sampling settings (``temperature``,
    ``max_tokens``, ...). Needs ``ipywidgets`` (``pip install 'mnn-engine[notebook]'``)."""
    try:
        import ipywidgets  # noqa: F401
    except ImportError as exc:
        from .checks import invalid

        raise invalid("notebook", "the chat widget needs ipywidgets: pip install 'mnn-engine[notebook]'") from exc
    return ChatWidget(engine, model, **options)
