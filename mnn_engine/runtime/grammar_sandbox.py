"""A child process that compiles each new grammar once before the engine does.

llguidance is native code: a grammar can crash it (a 30,000-name ``required``
list overflowed the stack of the thread compiling it and killed the server
with SIGSEGV; on Android, whose threads get 1 MiB stacks, 4,000 names did).
Every grammar that has not been seen before is therefore first compiled,
and its first token mask computed, in this child process, on a thread with
the same stack size the engine uses for its own compile
(``COMPILE_STACK_BYTES``). A grammar that kills the child is
refused, and so is one that takes longer than ``CHECK_TIMEOUT_S``; the
answer is remembered by the grammar's hash, so a schema an application sends
with every request costs one check per process. The child is started on
first use and kept; one that died is replaced for the next check.

The child holds the model's vocabulary (the bytes of every token), sent once
per vocabulary; it tokenizes byte by byte (every byte-level BPE vocabulary
has a token per byte), which is all a compile and a first mask need.
"""

from __future__ import annotations

import hashlib
import pickle
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from typing import IO, Any, Protocol

from ..errors import MnnEngineError
from .grammar import COMPILE_STACK_BYTES, compile_matcher, llguidance_module, make_tokenizer

#: a compile that takes longer is refused (the largest schema the limits allow takes ~5 s here)
CHECK_TIMEOUT_S = 60.0
#: how often a waiting check looks whether its request was cancelled
CANCEL_POLL_S = 0.05
#: verdicts remembered, by grammar hash (least recently used forgotten first)
REMEMBERED = 1024


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)  # our own child, over its own pipes


class GrammarSandbox:
    """The parent side: ``check(grammar, vocab_key, vocabulary)`` returns None
    (the grammar compiles) or the reason it is refused."""

    def __init__(self, stack_bytes: int | None = None) -> None:
        #: the child's compile thread stack (None: the engine's own, ``COMPILE_STACK_BYTES``)
        self.stack_bytes = stack_bytes
        self._lock = threading.Lock()  # one check at a time (one child)
        self._verdicts_lock = threading.Lock()  # the remembered verdicts, read without waiting for a check
        self._child: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None  # the child's stderr: a file, so its warnings never fill a pipe
        self._vocabularies: set[str] = set()
        self._verdicts: OrderedDict[str, str | None] = OrderedDict()

    def known(self, grammar: str, vocab_key: str) -> bool:
        """Whether the verdict on ``grammar`` is remembered (``check`` returns at once)."""
        with self._verdicts_lock:
            return _key(grammar, vocab_key) in self._verdicts

    def check(self, grammar: str, vocab_key: str, vocabulary: Any,
              cancelled: CancelFlag | None = None) -> str | None:
        """``vocabulary()`` gives ``(tokens, stop_ids)``, called only when the
        child does not hold that vocabulary yet. ``cancelled`` set while the
        child compiles: the child is ended, nothing is remembered and
        ``generation_cancelled`` is raised (the next check starts a new child)."""
        key = _key(grammar, vocab_key)
        with self._lock:
            with self._verdicts_lock:
                if key in self._verdicts:
                    self._verdicts.move_to_end(key)
                    return self._verdicts[key]
            if cancelled is not None and cancelled.is_set():  # its request ended while it waited for the child
                raise _cancelled()
            try:
                verdict = self._ask(grammar, vocab_key, vocabulary, cancelled)
            except _NotAVerdict as exc:  # not remembered: the next check tries a new child
                raise MnnEngineError("structured_output_unavailable", "the grammar checker's process failed to run: "
                                     f"{exc.args[0][0]}", param="response_format") from None
            with self._verdicts_lock:
                self._verdicts[key] = verdict
                while len(self._verdicts) > REMEMBERED:
                    self._verdicts.popitem(last=False)
            return verdict

    def _start(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            stack = [] if self.stack_bytes is None else [str(self.stack_bytes)]
            # run from / with the current directory off the path: a source checkout there would shadow the
            # installed package (as for the first-touch child)
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child; closed by close()
            self._child = subprocess.Popen(
                [sys.executable, "-c", "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
                 "from mnn_engine.runtime.grammar_sandbox import serve; serve()", *stack],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd="/")
            self._vocabularies = set()
        return self._child

    def _ask(self, grammar: str, vocab_key: str, vocabulary: Any, cancelled: CancelFlag | None) -> str | None:
        child = self._start()
        assert child.stdin is not None and child.stdout is not None
        outcome: dict[str, Any] = {}

        def talk() -> None:
            try:
                if vocab_key not in self._vocabularies:
                    tokens, stops = vocabulary()
                    _send(child.stdin, ("vocabulary", vocab_key, tokens, stops))
                    self._vocabularies.add(vocab_key)
                _send(child.stdin, ("check", vocab_key, grammar))
                outcome["answer"] = _receive(child.stdout)
            except (EOFError, OSError, pickle.PickleError) as exc:
                outcome["died"] = exc

        talker = threading.Thread(target=talk, name="mnn-engine-grammar-check", daemon=True)
        talker.start()
        deadline = time.monotonic() + CHECK_TIMEOUT_S
        while talker.is_alive() and time.monotonic() < deadline:
            talker.join(CANCEL_POLL_S)
            if cancelled is not None and cancelled.is_set() and talker.is_alive():
                self.close()
                talker.join(5)
                raise _cancelled()
        if talker.is_alive() or "died" in outcome:
            timed_out = talker.is_alive()
            returncode, stderr = self.close()
            talker.join(5)
            if timed_out:
                return f"the grammar compiler did not finish within {CHECK_TIMEOUT_S:g} s"
            if returncode is not None and returncode >= 0:  # it failed to start or exited: not the grammar's doing
                raise _NotAVerdict(stderr.strip().splitlines()[-1:] or [f"exit {returncode}"])
            return "the grammar crashes the grammar compiler (llguidance)"
        return outcome["answer"]

    def close(self) -> tuple[int | None, str]:
        """End the child (the next check starts another); its exit status and
        what it wrote on stderr."""
        child, self._child = self._child, None
        if child is None:
            return None, ""
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
        stderr = b""
        if self._stderr is not None:
            self._stderr.seek(max(0, self._stderr.seek(0, 2) - 2000))
            stderr = self._stderr.read()
            self._stderr.close()
            self._stderr = None
        return child.returncode, stderr.decode("utf-8", "replace")


class CancelFlag(Protocol):
    """What stops a waiting check: ``threading.Event`` or anything with ``is_set``."""

    def is_set(self) -> bool: ...


def _cancelled() -> MnnEngineError:
    return MnnEngineError("generation_cancelled", "the request was cancelled while its grammar was checked")


def _key(grammar: str, vocab_key: str) -> str:
    return hashlib.sha256(vocab_key.encode() + b"\0" + grammar.encode()).hexdigest()


class _NotAVerdict(Exception):
    """The child ended by itself (it could not start): no verdict on the grammar."""


# ---------------------------------------------------------------- the child
def byte_tokenizer(tokens: list[bytes]) -> Any:
    """Tokenize byte by byte with a vocabulary's single-byte tokens (enough to compile a grammar)."""
    ids = {token: i for i, token in enumerate(tokens) if len(token) == 1}
    fallback = len(tokens) - 1

    def tokenize(text: bytes | str) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        return [ids.get(data[i:i + 1], fallback) for i in range(len(data))]

    return tokenize


def serve() -> None:  # pragma: no cover - runs in the child (tests drive it through GrammarSandbox)
    """The child's loop: a vocabulary or a grammar in, a verdict out."""

    ll = llguidance_module()
    stack_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else COMPILE_STACK_BYTES
    tokenizers: dict[str, Any] = {}
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            message = _receive(stdin)
        except EOFError:
            return
        if message[0] == "vocabulary":
            _, key, tokens, stops = message
            tokenizers[key] = make_tokenizer(ll, tokens, stops, byte_tokenizer(tokens))
            continue
        _, key, grammar = message
        try:
            compile_matcher(tokenizers[key], grammar, "grammar", stack_bytes)
            answer = None
        except MnnEngineError as exc:  # the compile's own refusal: "grammar: not supported: ..."
            answer = exc.message.removeprefix("grammar: ")
        except Exception as exc:  # the verdict, whatever went wrong
            answer = f"not supported: {exc}"
        _send(stdout, answer)


if __name__ == "__main__":
    serve()
