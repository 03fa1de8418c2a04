#!/usr/bin/env python3
"""Derive, from MNN's FlatBuffers schema, the field slots that
``mnn_engine.runtime.mnn_graph`` reads (it has them as constants, so it needs no MNN
sources at run time; tests/runtime/test_mnn_graph.py checks they still match).

Usage: python tools/mnn_schema.py [subprojects/MNN/schema/default]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_BLOCK = re.compile(r"\b(table|struct|union|enum)\s+(\w+)\s*(?::\s*\w+\s*)?(?:\([^)]*\))?\s*\{(.*?)\}", re.S)


def parse(schema_dir: Path) -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[str]]]:
    """Tables as ordered (field, type) lists, unions as ordered member lists."""
    tables: dict[str, list[tuple[str, str]]] = {}
    unions: dict[str, list[str]] = {}
    for path in sorted(schema_dir.glob("*.fbs")):
        text = _COMMENT.sub("", path.read_text(encoding="utf-8"))
        for kind, name, body in _BLOCK.findall(text):
            if kind == "table":
                fields = []
                for decl in body.split(";"):
                    if ":" in decl:
                        field, _, ftype = decl.partition(":")
                        fields.append((field.strip(), ftype.split("=")[0].split("(")[0].strip()))
                tables[name] = fields
            elif kind == "union":
                members = [m.split("=")[0].strip() for m in body.split(",") if m.strip()]
                assert all("=" not in m for m in body.split(",")), f"explicit union values in {name}"
                unions[name] = members
    return tables, unions


def slot(tables: dict[str, list[tuple[str, str]]], unions: dict[str, list[str]], table: str, field: str) -> int:
    """The vtable slot of a field: union fields take two (type, then value)."""
    index = 0
    for name, ftype in tables[table]:
        if name == field:
            return index + (1 if ftype in unions else 0)
        index += 2 if ftype in unions else 1
    raise KeyError(f"{table}.{field}")


def derive(schema_dir: Path) -> dict[str, object]:
    tables, unions = parse(schema_dir)
    members = unions["OpParameter"]
    return {
        "net_oplists": slot(tables, unions, "Net", "oplists"),
        "net_output_names": slot(tables, unions, "Net", "outputName"),
        "net_tensor_name": slot(tables, unions, "Net", "tensorName"),
        "net_subgraphs": slot(tables, unions, "Net", "subgraphs"),
        "subgraph_nodes": slot(tables, unions, "SubGraphProto", "nodes"),
        "op_inputs": slot(tables, unions, "Op", "inputIndexes"),
        "op_main_type": slot(tables, unions, "Op", "main") - 1,
        "op_main": slot(tables, unions, "Op", "main"),
        "op_outputs": slot(tables, unions, "Op", "outputIndexes"),
        "op_name": slot(tables, unions, "Op", "name"),
        "conv_weight": slot(tables, unions, "Convolution2D", "weight"),
        "convolution2d": members.index("Convolution2D") + 1,
        "conv_common": slot(tables, unions, "Convolution2D", "common"),
        "conv_quan": slot(tables, unions, "Convolution2D", "quanParameter"),
        "conv_external": slot(tables, unions, "Convolution2D", "external"),
        "quan": [slot(tables, unions, "IDSTQuan", f) for f in ("buffer", "type", "shapeInt32")],
        "common": [slot(tables, unions, "Convolution2DCommon", f)
                   for f in ("kernelX", "kernelY", "group", "outputCount", "inputCount")],
        # union member number -> slot of its `external: [int64]` field
        "external": {str(members.index(name) + 1): slot(tables, unions, name, "external")
                     for name in members if name in tables and any(f == "external" for f, _ in tables[name])},
    }


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[1] / "subprojects/MNN/schema/default")
    print(json.dumps(derive(root), indent=1, sort_keys=True))
