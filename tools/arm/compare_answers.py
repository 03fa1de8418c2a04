"""Compare the x86 and aarch64 answers of tools/arm/answers.py (for check.sh).

Usage: python compare_answers.py X86.json ARM64.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    x86, arm = (json.loads(Path(path).read_text()) for path in sys.argv[1:3])
    for name, ours in arm.items():
        theirs = x86[name]["tokens"]
        if theirs == ours["tokens"]:
            print(f"{name}: the same tokens on aarch64 and x86: {ours['text']!r}")
            continue
        first = next((i for i, (a, b) in enumerate(zip(theirs, ours["tokens"], strict=False)) if a != b),
                     min(len(theirs), len(ours["tokens"])))
        print(f"{name}: the tokens differ from token {first} on; the aarch64 engine gives its own answer "
              f"{ours['own_mean_logprob']:.3f} nats/token and x86's {ours['other_mean_logprob']:.3f}: "
              f"{ours['text']!r}")


if __name__ == "__main__":
    main()
