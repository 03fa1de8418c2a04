"""What the terminal clients write of a model's or a server's text.

A model's output, or a hostile server's, can carry terminal control
sequences: ESC [2J clears the screen, OSC 0 sets the window title, OSC 52
writes the user's clipboard, CSI 6n makes the terminal type its answer into
the input line. On a terminal every C0/C1 control character other than
newline and tab (ESC among them, so no sequence survives) is written as a
visible escape (``\\x1b``); into a pipe or a file, or with ``--raw-output``,
the text is written as it came.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TextIO

# C0 controls but tab and newline, DEL, C1 controls
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with each control character (but newline and tab) as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def text_writer(stream: TextIO, *, raw: bool = False) -> Callable[[str], None]:
    """A callback writing pieces of text to ``stream`` (flushed each time):
    made visible where ``stream`` is a terminal, unless ``raw``."""
    safe = not raw and stream.isatty()

    def write(piece: str) -> None:
        stream.write(visible(piece) if safe else piece)
        stream.flush()

    return write

