#!/usr/bin/env python3
"""Which ARM kernel families MNN's build linked into libMNN.so, read from the
link step in its build.ninja (tools/termux/replay.sh). The library itself is
stripped (MNN's Android link flags add -s), so its symbols cannot say.

Usage: linked_kernels.py BUILD_NINJA; prints a JSON object, exit status 1 when
a family is missing or KleidiAI is linked (the recipe leaves it out).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# object path fragments of each family (MNN's source/backend/cpu/arm and arm82 trees)
FAMILIES = {"armv82 (fp16, dot product)": "arm82/", "armv86 (i8mm)": "_ARMV86_", "int4 (low memory)": "/low_memory/",
            "sme2": "sme2_asm/", "arm64 neon": "/arm64/"}


def main(path: Path) -> int:
    link = re.search(r"^build libMNN\.so: \S+ (.*?)(?<!\$)\n", path.read_text(), re.M | re.S)
    objects = link.group(1).split() if link else []
    counts = {family: sum(fragment in o for o in objects) for family, fragment in FAMILIES.items()}
    kleidiai = sum("kleidiai" in o.lower() for o in objects)
    print(json.dumps({**counts, "kleidiai": kleidiai}))
    return 0 if all(counts.values()) and not kleidiai else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
