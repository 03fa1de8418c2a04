"""The Python reader of MNN graph files (mnn_engine.runtime.mnn_graph)."""

from __future__ import annotations

import contextlib
import importlib.util
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO, test_model_dir

from mnn_engine.runtime import mnn_graph
from mnn_engine.runtime.mnn_graph import GraphError, read_graph, read_output_names

SCHEMA = REPO / "subprojects" / "MNN" / "schema" / "default"


@pytest.mark.parametrize("name", ["tiny", "smollm2-135m"])
def test_external_weights_reach_exactly_the_end_of_the_weight_file(name):
    model = test_model_dir(name)
    summary = read_graph((model / "llm.mnn").read_bytes())
    assert summary.ops > 100
    assert summary.weight_extent == (model / "llm.mnn.weight").stat().st_size


@pytest.mark.skipif(not SCHEMA.is_dir(), reason="MNN sources are not unpacked in subprojects/MNN")
def test_slots_match_mnn_schema():
    spec = importlib.util.spec_from_file_location("mnn_schema", REPO / "tools" / "mnn_schema.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    derived = tool.derive(SCHEMA)
    assert derived["external"] == {str(k): v for k, v in mnn_graph.EXTERNAL_SLOTS.items()}
    assert (derived["net_oplists"], derived["net_subgraphs"], derived["subgraph_nodes"]) == (
        mnn_graph.NET_OPLISTS, mnn_graph.NET_SUBGRAPHS, mnn_graph.SUBGRAPH_NODES)
    assert derived["net_output_names"] == mnn_graph.NET_OUTPUT_NAMES
    assert (derived["convolution2d"], derived["conv_common"]) == (mnn_graph.CONVOLUTION2D, mnn_graph.CONV_COMMON)
    assert derived["common"] == [mnn_graph.COMMON_KERNEL_X, mnn_graph.COMMON_KERNEL_Y, mnn_graph.COMMON_GROUP,
                                 mnn_graph.COMMON_OUTPUT_COUNT, mnn_graph.COMMON_INPUT_COUNT]
    assert (derived["op_inputs"], derived["op_main_type"], derived["op_main"], derived["op_outputs"]) == (
        mnn_graph.OP_INPUTS, mnn_graph.OP_MAIN_TYPE, mnn_graph.OP_MAIN, mnn_graph.OP_OUTPUTS)
    assert (derived["op_name"], derived["conv_weight"]) == (mnn_graph.OP_NAME, mnn_graph.CONV_WEIGHT)
    assert (derived["conv_quan"], derived["conv_external"]) == (mnn_graph.CONV_QUAN,
                                                                mnn_graph.EXTERNAL_SLOTS[mnn_graph.CONVOLUTION2D])
    assert derived["quan"] == [mnn_graph.QUAN_BUFFER, mnn_graph.QUAN_TYPE, mnn_graph.QUAN_SHAPE_INT32]


GRAPH = (test_model_dir("tiny") / "llm.mnn").read_bytes() if test_model_dir("tiny").is_dir() else b""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_graphs_are_refused_or_read_never_crash(data):
    """Truncations and byte flips anywhere: a GraphError or a reading, never
    another exception (and never MNN: it is not involved)."""
    graph = bytearray(GRAPH)
    if data.draw(st.booleans()):
        graph = graph[: data.draw(st.integers(0, len(graph) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 8))):
            graph[data.draw(st.integers(0, len(graph) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(GraphError):
        read_graph(bytes(graph))
    with contextlib.suppress(GraphError):
        read_output_names(bytes(graph))


@pytest.mark.parametrize(("name", "outputs"), [("tiny", ["logits", "hidden_states"]),
                                                ("tiny-embedding", ["sentence_embeddings"])])
def test_output_names_tell_a_language_model_from_an_embedding_model(name, outputs):
    assert read_output_names((test_model_dir(name) / "llm.mnn").read_bytes()) == outputs


def test_random_bytes_and_tiny_files_are_refused():
    for blob in (b"", b"\0" * 7, b"\xff" * 64, random.Random(7).randbytes(4096)):
        with pytest.raises(GraphError):
            read_graph(blob)


def test_the_parameter_count_is_the_source_models_own():
    # SmolLM2-135M (HuggingFaceTB/SmolLM2-135M config.json): hidden 576, 30 layers, 9 heads and 3 KV
    # heads of 64, MLP 1536, vocabulary 49152, tied embeddings. Its safetensors hold 134,515,008
    # values: these linear layers and the table, and 61 norm vectors of 576, which the count leaves out.
    from mnn_engine.runtime.model_files import parameter_count, parameter_size, read_config

    hidden, layers, kv, mlp, vocab = 576, 30, 3 * 64, 1536, 49152
    linear = layers * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * mlp) + vocab * hidden
    assert linear + (2 * layers + 1) * hidden == 134_515_008
    config = test_model_dir("smollm2-135m") / "config.json"
    assert parameter_count(config, read_config(config)) == linear
    assert parameter_size(linear) == "134.5M" and parameter_size(1_720_000_000) == "1.7B"


def test_a_separate_embedding_file_counts_as_its_bf16_values():
    from mnn_engine.runtime.model_files import parameter_count, read_config

    config = test_model_dir("tiny-scripted") / "config.json"
    graph_only = mnn_graph.read_graph_file(config.parent / "llm.mnn").conv_parameters
    table = (config.parent / "embeddings_bf16.bin").stat().st_size // 2
    assert parameter_count(config, read_config(config)) == graph_only + table > graph_only > 0


def _headers(name: str) -> list[tuple[mnn_graph.QuantizedWeights, bytes]]:
    model = test_model_dir(name)
    layers = read_graph((model / "llm.mnn").read_bytes()).quantized
    with open(model / "llm.mnn.weight", "rb") as f:
        found = []
        for layer in layers:
            f.seek(layer.offset)
            found.append((layer, f.read(mnn_graph.QUANTIZED_HEADER_BYTES)))
    return found


@pytest.mark.parametrize("name", ["tiny", "tiny-int8", "smollm2-135m"])
def test_every_quantised_layer_of_an_export_agrees_with_its_header(name):
    """llmexport's int4 (the generator's and the real SmolLM2-135M's) and int8 weights: one quantised
    blob per linear layer, each header naming the layer's own shape and exactly the blob's size."""
    headers = _headers(name)
    summary = read_graph((test_model_dir(name) / "llm.mnn").read_bytes())
    assert len(headers) > 10 and sum(layer.count for layer, _ in headers) == summary.conv_parameters
    assert [mnn_graph.quantized_weights_problem(layer, header) for layer, header in headers] == [None] * len(headers)


def test_any_change_to_a_header_is_a_problem():
    """Every single-byte change to the part of a header MNN sizes its buffers by (the dimension
    count, the dimensions, the sample count) is caught: each changes the weight count or the size."""
    for layer, header in _headers("tiny")[:3] + _headers("tiny-int8")[:2]:
        used = 1 + header[0] * (4 if layer.shape_int32 else 2) + 1
        for position in range(used):
            for value in range(256):
                if value != header[position]:
                    changed = header[:position] + bytes([value]) + header[position + 1:]
                    assert mnn_graph.quantized_weights_problem(layer, changed), (position, value)


def _with_group(data: bytes, layer: str, group: int) -> bytes:
    """``data`` with the group count of the convolution named ``layer`` replaced (it is stored: llmexport
    writes 1), found with the reader under test."""
    reader = mnn_graph._Reader(data)
    for op in reader.table(reader.u32(0)).tables(mnn_graph.NET_OPLISTS):
        if op.ubyte(mnn_graph.OP_MAIN_TYPE) == mnn_graph.CONVOLUTION2D and mnn_graph._op_name(op) == layer:
            at = op.table(mnn_graph.OP_MAIN).table(mnn_graph.CONV_COMMON).field(mnn_graph.COMMON_GROUP)
            assert at is not None and data[at:at + 4] == (1).to_bytes(4, "little")
            return data[:at] + group.to_bytes(4, "little") + data[at + 4:]
    raise AssertionError(f"no convolution {layer}")


def test_a_group_count_that_does_not_split_the_channels_is_refused(tmp_path):
    """Found by the fuzz test: one flipped byte in the vtable the convolutions' shapes share gave the head
    1,835,806,464 groups (and every layer thousands); MNN's load was still making one convolution per group
    13 minutes later. The graph reader refuses it, so Llm() does before any process touches it."""
    import shutil

    from mnn_engine import Llm, MnnEngineError

    damaged = _with_group(GRAPH, "/lm/lm_head/Linear", 1_835_806_464)
    with pytest.raises(GraphError, match="1835806464 groups"):
        read_graph(damaged)
    model = tmp_path / "groups"
    shutil.copytree(test_model_dir("tiny"), model)
    (model / "llm.mnn").write_bytes(damaged)
    with pytest.raises(MnnEngineError) as err:
        Llm(model)
    assert err.value.code == "invalid_model" and err.value.param == "llm_model", err.value
    # a count that splits the channels is a grouped convolution's: read (its header then disagrees)
    assert read_graph(_with_group(GRAPH, "/lm/lm_head/Linear", 2)).ops == read_graph(GRAPH).ops
