"""Reading an MNN graph file (``llm.mnn``) in Python, before MNN sees it.

MNN reads the FlatBuffers graph without verifying it: a truncated or random
file crashes the process (SIGSEGV). This reader walks the parts MNN walks
first (the ops of the graph and of its subgraphs, their tensor index lists
and parameters), checking every offset against the file's size, and
collects how far into the weight file the ops' external weights reach and
where each quantised linear layer's weights lie in it (MNN trusts their
headers too: ``quantized_weights_problem`` checks one). It needs neither MNN
nor its converter, so it works with every build.

The field slots come from MNN 3.6.1's schema (``tools/mnn_schema.py`` derives
them; a test checks they still match the sources).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Slots in MNN's schema (tools/mnn_schema.py).
NET_OPLISTS = 3
NET_OUTPUT_NAMES = 4
NET_SUBGRAPHS = 10
SUBGRAPH_NODES = 4
OP_INPUTS = 0
OP_MAIN_TYPE = 1
OP_MAIN = 2
OP_NAME = 3
OP_OUTPUTS = 4
#: OpParameter member number -> slot of its ``external: [int64]`` field
#: (Blob, Convolution2D, Scale, Convolution3D, LayerNorm, GroupNorm).
EXTERNAL_SLOTS = {7: 9, 9: 6, 58: 3, 80: 3, 88: 5, 95: 6}
#: OpParameter member number of Convolution2D (llmexport's linear layers), its ``common``
#: slot, and Convolution2DCommon's kernelX, kernelY, group, outputCount, inputCount slots
CONVOLUTION2D = 9
CONV_COMMON = 0
#: Convolution2D's ``weight: [float]`` slot (weights held in the graph itself, as a LoRA's factors are)
CONV_WEIGHT = 1
COMMON_KERNEL_X, COMMON_KERNEL_Y, COMMON_GROUP, COMMON_OUTPUT_COUNT, COMMON_INPUT_COUNT = 2, 3, 9, 10, 11
#: Convolution2D's ``quanParameter`` slot, and IDSTQuan's buffer, type and shapeInt32 slots
CONV_QUAN = 3
QUAN_BUFFER, QUAN_TYPE, QUAN_SHAPE_INT32 = 0, 2, 11
#: IDSTQuan type of llmexport's int4/int8 weights ("idstQuanInt8": an index per weight into a table of samples)
QUAN_IDST = 1

MAX_OPS = 10_000_000


class GraphError(ValueError):
    """The file is not a well-formed MNN graph."""


@dataclass(frozen=True)
class QuantizedWeights:
    """Where one quantised linear layer's weights lie in the external weight file."""

    layer: str
    offset: int
    size: int  # bytes, the header included
    count: int  # the weights the layer's shape says it has (0: no shape given)
    shape_int32: bool  # the header's dimensions are 32-bit (else 16-bit)


@dataclass(frozen=True)
class GraphSummary:
    ops: int
    weight_extent: int  # bytes of the external weight file the ops refer to
    #: weights of the graph's convolutions, which hold every linear layer of an llmexport
    #: model; the embedding table, when it is a file of its own, is not in the graph
    conv_parameters: int = 0
    quantized: tuple[QuantizedWeights, ...] = ()
    outputs: tuple[str, ...] = ()  # the graph's output names


class _Reader:
    """Bounds-checked little-endian FlatBuffers access."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)

    def _unpack(self, fmt: str, pos: int) -> int:
        width = struct.calcsize(fmt)
        if pos < 0 or pos + width > self.size:
            raise GraphError(f"offset {pos} is outside the file ({self.size} bytes)")
        return struct.unpack_from(fmt, self.data, pos)[0]

    def u32(self, pos: int) -> int:
        return self._unpack("<I", pos)

    def table(self, pos: int) -> _Table:
        vtable = pos - self._unpack("<i", pos)
        vsize = self._unpack("<H", vtable)
        if vsize < 4 or vsize % 2:
            raise GraphError(f"bad vtable at {vtable}")
        self._unpack("<H", vtable + vsize - 2)  # the whole vtable is inside
        return _Table(self, pos, vtable, vsize)

    def vector(self, pos: int, element_size: int) -> tuple[int, int]:
        """(start, length) of the vector at ``pos``, all of it inside the file."""
        length = self.u32(pos)
        start = pos + 4
        if start + length * element_size > self.size:
            raise GraphError(f"a vector at {pos} runs past the end of the file")
        return start, length


class _Table:
    def __init__(self, reader: _Reader, pos: int, vtable: int, vsize: int) -> None:
        self.r, self.pos, self.vtable, self.vsize = reader, pos, vtable, vsize

    def field(self, slot: int) -> int | None:
        """Absolute position of a field, or None when it is absent."""
        entry = 4 + 2 * slot
        if entry >= self.vsize:
            return None
        offset = self.r._unpack("<H", self.vtable + entry)
        return self.pos + offset if offset else None

    def ubyte(self, slot: int) -> int:
        pos = self.field(slot)
        return 0 if pos is None else self.r._unpack("<B", pos)

    def int32(self, slot: int, default: int) -> int:
        pos = self.field(slot)
        return default if pos is None else self.r._unpack("<i", pos)

    def table(self, slot: int) -> _Table | None:
        pos = self.field(slot)
        return None if pos is None else self.r.table(pos + self.r.u32(pos))

    def vector(self, slot: int, element_size: int) -> tuple[int, int]:
        pos = self.field(slot)
        return (0, 0) if pos is None else self.r.vector(pos + self.r.u32(pos), element_size)

    def tables(self, slot: int) -> Iterator[_Table]:
        start, length = self.vector(slot, 4)
        if length > MAX_OPS:
            raise GraphError(f"implausibly many entries ({length})")
        for i in range(length):
            element = start + 4 * i
            yield self.r.table(element + self.r.u32(element))

    def strings(self, slot: int) -> list[str]:
        start, length = self.vector(slot, 4)
        if length > MAX_OPS:
            raise GraphError(f"implausibly many entries ({length})")
        names = []
        for i in range(length):
            element = start + 4 * i
            begin, size = self.r.vector(element + self.r.u32(element), 1)
            names.append(self.r.data[begin:begin + size].decode("utf-8", "replace"))
        return names

    def int64s(self, slot: int) -> list[int]:
        start, length = self.vector(slot, 8)
        return list(struct.unpack_from(f"<{length}q", self.r.data, start)) if length else []


def read_graph(data: bytes) -> GraphSummary:
    """Walk a graph; raises GraphError when it is damaged."""
    reader = _Reader(data)
    if reader.size < 8:
        raise GraphError(f"the file is too short ({reader.size} bytes)")
    net = reader.table(reader.u32(0))
    ops = list(net.tables(NET_OPLISTS))
    for subgraph in net.tables(NET_SUBGRAPHS):
        ops.extend(subgraph.tables(SUBGRAPH_NODES))
    if not ops:
        raise GraphError("the graph has no operators")
    extent = 0
    parameters = 0
    quantized = []
    for op in ops:
        op.vector(OP_INPUTS, 4)
        op.vector(OP_OUTPUTS, 4)
        kind = op.ubyte(OP_MAIN_TYPE)
        main = op.table(OP_MAIN) if kind else None
        external: list[int] = []
        if main is not None and kind in EXTERNAL_SLOTS:
            external = main.int64s(EXTERNAL_SLOTS[kind])
            if external:
                if any(v < 0 for v in external):
                    raise GraphError("negative external weight offset or size")
                extent = max(extent, sum(external))
        if main is not None and kind == CONVOLUTION2D:
            count = _conv_parameters(main)
            parameters += count
            quan = main.table(CONV_QUAN)
            # (MNN reads such weights with IDSTDecoder::ReadQuanData_c from the weight file)
            if quan is not None and len(external) >= 2 and external[1] and quan.int32(QUAN_TYPE, 0) == QUAN_IDST \
                    and quan.field(QUAN_BUFFER) is None:
                quantized.append(QuantizedWeights(_op_name(op), external[0], external[1], count,
                                                  bool(quan.ubyte(QUAN_SHAPE_INT32))))
    return GraphSummary(len(ops), extent, parameters, tuple(quantized), tuple(net.strings(NET_OUTPUT_NAMES)))


def _op_name(op: _Table) -> str:
    name_at = op.field(OP_NAME)
    if name_at is None:
        return "(unnamed)"
    begin, size = op.r.vector(name_at + op.r.u32(name_at), 1)
    return op.r.data[begin:begin + size].decode("utf-8", "replace")


#: the most a quantised layer's header takes: its dimension count, four 32-bit dimensions, its sample count
QUANTIZED_HEADER_BYTES = 1 + 4 * 4 + 1


def quantized_weights_problem(weights: QuantizedWeights, header: bytes) -> str | None:
    """What is wrong with a quantised layer's weights, from the first
    ``QUANTIZED_HEADER_BYTES`` of them (None: nothing). MNN 3.6.1 trusts this
    header (IDSTDecoder::ReadQuanData_c in source/core/ConvolutionCommon.cpp):
    a dimension count, the dimensions, a sample count (0 meaning 256), the
    samples, then one index per weight of as many bits as the sample count
    needs. Damaged, it makes MNN fail the layer and load the model without
    it (random weights "loaded" so, every layer failed), or size what it
    allocates, reads and, where its caller hands it the layer's own buffer,
    writes by the header's dimensions rather than the layer's."""
    if not header:
        return "no header"
    dims = header[0]
    width = 4 if weights.shape_int32 else 2
    if not 1 <= dims <= 4 or len(header) < 2 + dims * width:
        return f"a header of {dims} dimensions"
    shape = struct.unpack_from(f"<{dims}{'I' if weights.shape_int32 else 'H'}", header, 1)
    count = math.prod(shape)
    if weights.count and count != weights.count:
        return f"a header of shape {list(shape)} for {weights.count} weights"
    samples = header[1 + dims * width] or 256
    bits = max(1, (samples - 1).bit_length())  # (MNN's atLestBitsCnt: the bits an index below ``samples`` needs)
    expected = 1 + dims * width + 1 + samples + (bits * count + 7) // 8
    if expected != weights.size:
        return f"{weights.size} bytes where its header says {expected}"
    return None


def _conv_parameters(conv: _Table) -> int:
    """The weights of one convolution, from its shape (whatever their quantisation)."""
    common = conv.table(CONV_COMMON)
    if common is None:
        return 0
    outputs, inputs = common.int32(COMMON_OUTPUT_COUNT, 0), common.int32(COMMON_INPUT_COUNT, 0)
    kernel = common.int32(COMMON_KERNEL_X, 1) * common.int32(COMMON_KERNEL_Y, 1)
    group = common.int32(COMMON_GROUP, 1)
    # MNN splits the channels evenly among the groups, one convolution each: a damaged count
    # (1,835,806,464 groups for a language model's head) kept a load busy making them (still at it after 13 minutes)
    if group < 1 or (inputs > 0 and inputs % group) or (outputs > 0 and outputs % group):
        raise GraphError(f"a convolution of {inputs} inputs and {outputs} outputs in {group} groups")
    if min(outputs, inputs, kernel) <= 0:
        return 0
    return outputs * (inputs // group) * kernel


def read_graph_file(path: Path) -> GraphSummary:
    return read_graph(path.read_bytes())


def conv_weights(data: bytes, suffix: str) -> list[tuple[int, int]]:
    """(byte offset, count) of the float weights held in the graph by every
    convolution whose name ends with ``suffix`` (llmexport's LoRA ops:
    ``<layer><projection>_B``); raises GraphError when the file is damaged."""
    reader = _Reader(data)
    if reader.size < 8:
        raise GraphError(f"the file is too short ({reader.size} bytes)")
    net = reader.table(reader.u32(0))
    found = []
    for op in net.tables(NET_OPLISTS):
        if op.field(OP_NAME) is None or op.ubyte(OP_MAIN_TYPE) != CONVOLUTION2D:
            continue
        main = op.table(OP_MAIN)
        if main is not None and _op_name(op).endswith(suffix):
            start, count = main.vector(CONV_WEIGHT, 4)
            if count:
                found.append((start, count))
    return found


def read_output_names(data: bytes) -> list[str]:
    """The names of the graph's outputs (``logits`` for a language model,
    ``sentence_embeddings`` for a text-embedding model); raises GraphError
    when the file is damaged."""
    reader = _Reader(data)
    if reader.size < 8:
        raise GraphError(f"the file is too short ({reader.size} bytes)")
    return reader.table(reader.u32(0)).strings(NET_OUTPUT_NAMES)
