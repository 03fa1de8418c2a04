"""The quantisation settings ``export_mnn.py`` uses when its caller names none.

llmexport's own defaults (int4, blocks of 64, the output head at the same 4
bits) lose the most of the settings measured in docs/benchmarks.md's quality
table (SmolLM2-135M from its Q4_1 GGUF: mean KL to the source 0.439 nats,
perplexity 37.2 against 22.9). Blocks of 32 with the output head at 8 bits
came closest among int4 exports (KL 0.032, perplexity 23.5, the multiple-choice
accuracy of the source and of llama.cpp's Q4_1) at 1.36x the size and 0.97x the
decode speed, as close as a full int8 export at three quarters of its size.

A caller that names any quantisation setting gets llmexport's meaning for the
ones it left out: the test models and tools/bench/quality.py's variants name
theirs, so their exports do not move with this choice.
"""

from __future__ import annotations

#: llmexport's quantisation flags: naming any of them turns the defaults below off
QUANT_FLAGS = ("--quant_bit", "--quant_block", "--lm_quant_bit", "--lm_quant_block", "--sym")
#: what a caller naming none of them gets (block 32 also divides every hidden size llmexport exports)
DEFAULT_QUANT = ("--quant_bit", "4", "--quant_block", "32", "--lm_quant_bit", "8")


def with_quant_defaults(argv: list[str]) -> list[str]:
    """``argv`` (llmexport's arguments) with ``DEFAULT_QUANT`` appended when it names no quantisation flag."""
    named = any(arg.split("=", 1)[0] in QUANT_FLAGS for arg in argv)
    return list(argv) if named else [*argv, *DEFAULT_QUANT]
