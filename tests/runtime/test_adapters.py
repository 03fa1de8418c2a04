"""LoRA adapters through MNN's ``Llm::create_lora`` (``Llm.with_adapter``),
checked against the real thing: peft's ``merge_and_unload()`` of the same base
and adapter, exported as a full model (tools/models: tiny-int8,
tiny-int8-lora-a, tiny-int8-merged-a; the adapter is rank 8 on every
projection of both layers, both factors random).

Tolerance: the adapter's projections run on the base's int8 weights plus its
own float factors; the merged model's on int8 weights of W + BA, quantised
once more. So the two agree within the base's quantisation error, not bit for
bit: each log-probability within ``TOLERANCE`` nats, while the adapter moves
them by more than ten times that from the base's (measured: 0.05 against 1.5
in the logits)."""

from __future__ import annotations

import json
import shutil

import pytest
from support import SCRIPTED_TEXT, test_model_dir

from mnn_engine import Llm, MnnEngineError

TOLERANCE = 0.05
PROMPT = [{"role": "user", "content": "Tell me about the sea."}]
CONTINUATION = "The sea is wide and deep, and its waves never rest."
ADAPTER_TEXT = "Hello! I am a test model."  # tools/models/build_test_models.py: tiny-scripted-lora's script


@pytest.fixture(scope="module")
def int8_base():
    with Llm(test_model_dir("tiny-int8"), thread_num=1, precision="high") as llm:
        yield llm


def _logprobs(llm: Llm) -> list[float]:
    return list(llm.score(PROMPT, CONTINUATION).logprobs)


def test_the_adapter_gives_what_peft_merged_model_gives(int8_base):
    adapter = int8_base.with_adapter(test_model_dir("tiny-int8-lora-a"))
    with Llm(test_model_dir("tiny-int8-merged-a"), thread_num=1, precision="high") as merged:
        want = _logprobs(merged)
        want_tokens = merged.generate(PROMPT, max_tokens=12, temperature=0).token_ids
    got = _logprobs(adapter)
    base = _logprobs(int8_base)
    moved = max(abs(a - b) for a, b in zip(got, base, strict=True))
    off = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert moved > 10 * TOLERANCE, f"the adapter barely moves the base ({moved:.3f}): it is not applied"
    assert off <= TOLERANCE, f"adapter vs merged: {off:.3f} nats at worst (the adapter moved them {moved:.3f})"
    assert adapter.generate(PROMPT, max_tokens=12, temperature=0).token_ids == want_tokens
    adapter.close()


def test_the_base_is_unchanged_by_its_adapters(int8_base):
    before = _logprobs(int8_base)
    text = int8_base.generate(PROMPT, max_tokens=8, temperature=0).text
    adapter = int8_base.with_adapter(test_model_dir("tiny-int8-lora-a"))
    adapter.generate(PROMPT, max_tokens=8, temperature=0)
    assert _logprobs(int8_base) == before  # no cross-talk through shared weights or caches
    assert int8_base.generate(PROMPT, max_tokens=8, temperature=0).text == text
    adapter.close()
    assert _logprobs(int8_base) == before


def test_a_scripted_adapter_says_its_own_sentence_and_the_base_keeps_its_own():
    with Llm(test_model_dir("tiny-scripted"), thread_num=1) as base:
        adapter = base.with_adapter(test_model_dir("tiny-scripted-lora"))
        for _ in range(2):  # alternating: each answers from its own weights every time
            assert adapter.generate(PROMPT, max_tokens=32, temperature=0).text == ADAPTER_TEXT
            assert base.generate(PROMPT, max_tokens=32, temperature=0).text == SCRIPTED_TEXT


def test_closing_the_base_closes_its_adapters_first():
    base = Llm(test_model_dir("tiny-scripted"), thread_num=1).load()
    adapter = base.with_adapter(test_model_dir("tiny-scripted-lora"))
    base.close()
    assert not adapter.is_loaded
    with pytest.raises(MnnEngineError) as err:
        adapter.generate(PROMPT, max_tokens=4)
    assert err.value.code == "model_not_loaded"


@pytest.mark.parametrize("damage", ["truncated", "garbage", "missing", "another-base"])
def test_a_damaged_or_foreign_adapter_is_a_clear_error_and_the_base_goes_on(tmp_path, damage):
    adapter_dir = tmp_path / "adapter"
    shutil.copytree(test_model_dir("tiny-scripted-lora"), adapter_dir)
    lora = adapter_dir / "lora.mnn"
    if damage == "truncated":
        lora.write_bytes(lora.read_bytes()[:5000])
    elif damage == "garbage":
        lora.write_bytes(b"\x10\x00\x00\x00" + bytes(range(256)) * 40)
    elif damage == "missing":
        lora.unlink()
    # another architecture: SmolLM2's graph is not the one the adapter was exported over
    with Llm(test_model_dir("smollm2-135m" if damage == "another-base" else "tiny-scripted"), thread_num=1) as base:
        with pytest.raises(MnnEngineError) as err:
            base.with_adapter(adapter_dir)
        assert err.value.code == "invalid_model" and "adapter" in err.value.message
        assert base.generate(PROMPT, max_tokens=4, temperature=0).text  # still serving


def test_an_adapter_records_its_base(int8_base):
    manifest = json.loads((test_model_dir("tiny-int8-lora-a") / "adapter.json").read_text())
    assert manifest["base"] == "tiny-int8" and manifest["rank"] == 8 and manifest["scale"] == 2.0
    adapter = int8_base.with_adapter(test_model_dir("tiny-int8-lora-a"))
    assert adapter.adapter is not None and adapter.adapter.scale == 2.0 and adapter.base is int8_base
    adapter.close()


def test_an_adapters_scale_is_its_strength_and_zero_is_the_base(tmp_path, int8_base):
    """``set_adapter_scale`` rescales the B factors in the graph from the exported one: 0 gives the base's own
    log-probabilities, half the export's halves every B factor (the factors peft's export at half lora_alpha
    has) and answers as peft's merged model at that strength does, and back to the export's scale gives the
    exported graph's bytes."""
    import struct

    from mnn_engine import ModelStore
    from mnn_engine.runtime.mnn_graph import conv_weights

    store = ModelStore(tmp_path)
    store.import_model(test_model_dir("tiny-int8"), model_id="base")
    store.import_adapter(test_model_dir("tiny-int8-lora-a"), "base", name="a")
    exported = (store.adapter_path("base", "a") / "lora.mnn").read_bytes()
    base = _logprobs(int8_base)

    def moved(scale: float) -> float:
        info = store.set_adapter_scale("base", "a", scale)
        assert info.scale == scale
        adapter = int8_base.with_adapter(store.adapter_path("base", "a"))
        try:
            return max(abs(a - b) for a, b in zip(_logprobs(adapter), base, strict=True))
        finally:
            adapter.close()

    assert moved(0.0) < 1e-5  # the adapter's term is gone: the base's output
    half = moved(1.0)  # the export's scale is 2 (alpha 16 / r 8)
    graph = (store.adapter_path("base", "a") / "lora.mnn").read_bytes()
    for (start, count), (start_0, count_0) in zip(conv_weights(graph, "_B"), conv_weights(exported, "_B"),
                                                  strict=True):
        assert count == count_0 and struct.unpack_from(f"<{count}f", graph, start) == tuple(
            w / 2 for w in struct.unpack_from(f"<{count}f", exported, start_0))  # exactly half: a power of two
    assert half > 10 * TOLERANCE
    # half the strength is peft's own adapter at lora_alpha 8: its export's factors, and its merged model's output
    halved = (test_model_dir("tiny-int8-lora-a-half") / "lora.mnn").read_bytes()
    assert [struct.unpack_from(f"<{c}f", graph, s) for s, c in conv_weights(graph, "_B")] == \
        [struct.unpack_from(f"<{c}f", halved, s) for s, c in conv_weights(halved, "_B")]
    adapter = int8_base.with_adapter(store.adapter_path("base", "a"))
    with Llm(test_model_dir("tiny-int8-merged-a-half"), thread_num=1, precision="high") as merged:
        off = max(abs(a - b) for a, b in zip(_logprobs(adapter), _logprobs(merged), strict=True))
    adapter.close()
    assert off <= TOLERANCE, f"the adapter at half its scale vs peft's merge at lora_alpha 8: {off:.3f} nats"
    moved(2.0)
    assert (store.adapter_path("base", "a") / "lora.mnn").read_bytes() == exported
    with pytest.raises(MnnEngineError) as err:
        store.set_adapter_scale("base", "a", -1)
    assert err.value.code == "invalid_argument"
