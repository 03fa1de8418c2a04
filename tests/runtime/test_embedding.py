"""Text embeddings (mnn_engine.runtime.embedding, Llm.embed) on the real MNN engine
with the tiny Qwen3-Embedding-shaped test model."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import cancelling, test_model_dir

from mnn_engine import Llm, MnnEngineError
from mnn_engine.runtime.embedding import MAX_INPUTS, embedding_inputs, template_wrap, vector_from

END_OF_TEXT = 151643
CONTEXT = 96


@pytest.fixture(scope="module")
def embedder():
    with Llm(test_model_dir("tiny-embedding"), thread_num=1, max_all_tokens=CONTEXT) as llm:
        yield llm


def _cosine(a, b):
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))


# ---------------------------------------------------------------- inputs and templates
@pytest.mark.parametrize(("template", "wrap"), [
    ("{{ messages | map(attribute='content') | join('') }}<|endoftext|>", ("", "<|endoftext|>")),
    ("[CLS]{{ messages | map(attribute='content') | join('') }}[SEP]", ("[CLS]", "[SEP]")),
    ("<s> {{messages|map(attribute=\"content\")|join(\"\")}}</s>", ("<s> ", "</s>")),
    ("{% for m in messages %}{{ m.content }}{% endfor %}", None),
    ("{{ messages | map(attribute='content') | join('') }}{{ eos }}", None),
    ("", None),
    (None, None),
])
def test_llmexport_embedding_templates_are_read_as_a_prefix_and_a_suffix(template, wrap):
    assert template_wrap(template) == wrap


_IDS = st.lists(st.integers(0, 1000), min_size=1, max_size=5)
_TEXTS = st.text(min_size=1, max_size=8)


@given(st.one_of(_TEXTS, _IDS, st.lists(_TEXTS, min_size=1, max_size=4), st.lists(_IDS, min_size=1, max_size=4)))
def test_the_four_input_shapes_keep_their_items_in_order(value):
    items = embedding_inputs(value)
    if isinstance(value, str) or all(isinstance(v, int) for v in value):
        assert items == [value]
    else:
        assert items == [list(v) if isinstance(v, list) else v for v in value]


@pytest.mark.parametrize(("value", "code"), [
    ("", "empty_prompt"), ([], "invalid_argument"), ([[]], "empty_prompt"), (["a", ""], "empty_prompt"),
    ([True, 1], "invalid_argument"), (["a", 3], "invalid_argument"), ([[1, "a"]], "invalid_argument"),
    (3, "invalid_argument"), (b"bytes", "invalid_argument"), (["x"] * (MAX_INPUTS + 1), "invalid_argument"),
])
def test_malformed_inputs_are_refused(value, code):
    with pytest.raises(MnnEngineError) as err:
        embedding_inputs(value)
    assert err.value.code == code and err.value.param == "input"


def test_vectors_are_scaled_to_unit_length_and_a_zero_vector_stays_zero():
    import array
    raw = array.array("f", [3.0, 4.0]).tobytes()
    assert vector_from(raw, True) == pytest.approx([0.6, 0.8])
    assert vector_from(raw, False) == [3.0, 4.0]
    assert vector_from(array.array("f", [0.0, 0.0]).tobytes(), True) == [0.0, 0.0]


# ---------------------------------------------------------------- the engine
def test_an_embedding_model_is_recognised_by_its_graph(embedder):
    assert embedder.kind == "embedding"
    assert embedder.embedding_dim == 128
    assert embedder.vocab_size == 151936


def test_identical_texts_give_identical_unit_vectors(embedder):
    result = embedder.embed(["The cat sat on the mat.", "The cat sat on the mat.", "Stock prices fell sharply."])
    first, second, other = result.vectors
    assert first == second == embedder.embed("The cat sat on the mat.").vectors[0]
    assert len(first) == result.dim == 128
    for vector in result.vectors:
        assert math.fsum(v * v for v in vector) == pytest.approx(1.0, abs=1e-5)
    assert -1.0 <= _cosine(first, other) <= 1.0
    assert _cosine(first, other) < 0.9999


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40),
                min_size=1, max_size=5))
def test_a_batch_keeps_its_order_and_each_vector_is_the_single_inputs_vector(embedder, texts):
    batch = embedder.embed(texts)
    assert batch.vectors == [embedder.embed(text).vectors[0] for text in texts]


def test_text_is_wrapped_as_the_template_says_and_ids_are_used_as_given(embedder):
    ids = embedder.tokenize("Hello world<|endoftext|>")
    assert ids[-1] == END_OF_TEXT
    by_text = embedder.embed("Hello world")
    assert by_text.prompt_tokens == len(ids)
    assert embedder.embed(ids).vectors == by_text.vectors
    assert embedder.embed(ids[:-1]).vectors != by_text.vectors  # ids get no end-of-text added


def test_unnormalised_vectors_point_the_same_way(embedder):
    raw = embedder.embed("direction", normalize=False).vectors[0]
    unit = embedder.embed("direction").vectors[0]
    assert math.sqrt(math.fsum(v * v for v in raw)) != pytest.approx(1.0, abs=1e-3)
    assert _cosine(raw, unit) == pytest.approx(1.0, abs=1e-6)


def test_an_input_longer_than_the_context_is_refused_or_truncated_keeping_the_end_marker(embedder):
    long_text = "word " * (CONTEXT * 2)
    with pytest.raises(MnnEngineError) as err:
        embedder.embed(["short", long_text])
    assert err.value.code == "context_length_exceeded"
    with pytest.raises(MnnEngineError) as err:
        embedder.embed([list(range(1, CONTEXT + 2))])
    assert err.value.code == "context_length_exceeded"
    cut = embedder.embed(long_text, truncate=True)
    assert cut.prompt_tokens == CONTEXT
    head = [*embedder.tokenize(long_text)[:CONTEXT - 1], END_OF_TEXT]
    assert cut.vectors == embedder.embed(head).vectors
    assert embedder.embed([list(range(1, CONTEXT + 2))], truncate=True).prompt_tokens == CONTEXT


def test_token_ids_outside_the_vocabulary_are_refused(embedder):
    with pytest.raises(MnnEngineError) as err:
        embedder.embed([[1, embedder.vocab_size]])
    assert err.value.code == "invalid_argument"


def test_cancel_stops_a_batch_between_inputs(embedder):
    texts = [f"sentence number {i}" for i in range(MAX_INPUTS)]
    with cancelling(embedder.cancel), pytest.raises(MnnEngineError) as err:
        embedder.embed(texts)
    assert err.value.code == "generation_cancelled"
    assert embedder.embed("still works").dim == 128


def test_each_model_kind_refuses_the_other_kinds_work(embedder):
    for call in (lambda: embedder.generate("Hi", max_tokens=2), lambda: embedder.score("Hi", " there")):
        with pytest.raises(MnnEngineError) as err:
            call()
        assert err.value.code == "wrong_model_kind"
    with Llm(test_model_dir("tiny"), thread_num=1) as chat:
        assert chat.kind == "chat"
        with pytest.raises(MnnEngineError) as err:
            chat.embed("Hi")
        assert err.value.code == "wrong_model_kind" and "makes text embeddings" in err.value.message
