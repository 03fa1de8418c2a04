"""A token's logits do not depend on the batch it is computed in.

Speculative verification (drafts checked in one batched forward) and the
prompt cache (a prefill over a kept KV cache) rely on it: the rows MNN
computes for tokens inside a batch of any size must be the rows it computes
for them one forward at a time, bit for bit, and so must the KV entries the
next forwards read. MNN 3.6.1 did not give that (a single row took another
quantisation scheme and, in float, a kernel that summed in another order);
subprojects/packagefiles/MNN/0002-batch-independent-rows.patch makes it so,
and ``Llm.batch_exact`` checks it at load. Every batch size 2..32 is tried,
at a random position among random others, after a prompt, in the int4
low-memory mode (the default) and with float weights; one case runs past
MNN's 64-position attention block so the blocked softmax is crossed too, and
prefill-sized batches (64..300 tokens, where MNN's float path cuts its sums
for the cache) are checked against 64-token chunks. A row alone decodes with
patch 0009's attention (a KV head's query heads as the rows of one pass)
where the KV heads divide among the threads: the tiny model on 2 threads,
SmolLM2 on 1 or 3; a batch's rows take MNN's pass per head.
"""

from __future__ import annotations

import random

import pytest
from support import MNN_BATCH_EXACT, MNN_PATCHED, test_model_dir

from mnn_engine import Llm, _mnn

PROMPT = "The history of the sea is long and full of storms, ships, and sailors who told stories about monsters. "
ROWS = 48


def _partitions(rng: random.Random, n: int):
    """For each batch size 2..32, cuts of n tokens with one batch of that size
    at a random position and random sizes (1..32) around it."""
    for size in range(2, 33):
        start = rng.randrange(0, n - size + 1)
        cuts, i = [], 0
        while i < start:
            step = min(rng.randint(1, 32), start - i)
            cuts.append((i, i + step))
            i += step
        cuts.append((i, i + size))
        i += size
        while i < n:
            step = min(rng.randint(1, 32), n - i)
            cuts.append((i, i + step))
            i += step
        yield size, cuts


def _differing_rows(alone: bytes, batched: bytes, rows: int) -> list[int]:
    width = len(alone) // rows
    return [r for r in range(rows) if alone[r * width:(r + 1) * width] != batched[r * width:(r + 1) * width]]


def _check(model: str, prompt_tokens: int, seed: int, threads: int = 2, **config: object) -> None:
    """Rows alone against every partition. Where patch 0002 is checked (our
    MNN on x86-64) they must be identical; anywhere else the load-time check
    must not claim what they refute (``batch_exact`` True only if identical)."""
    with Llm(test_model_dir(model), thread_num=threads, speculative="off", **config) as llm:
        ids = llm.tokenize(PROMPT * 12)
        assert len(ids) >= prompt_tokens + ROWS
        prompt, tail = ids[:prompt_tokens], ids[prompt_tokens:prompt_tokens + ROWS]
        core = llm._core
        alone = _mnn.forward_rows(core, prompt, [[t] for t in tail])
        assert len(alone) == ROWS * llm.vocab_size * 4
        assert llm.batch_exact or not MNN_BATCH_EXACT
        if not llm.batch_exact:
            pytest.skip("this MNN does not claim batch-independent rows (Llm.batch_exact is False)")
        for size, cuts in _partitions(random.Random(seed), ROWS):
            batched = _mnn.forward_rows(core, prompt, [tail[a:b] for a, b in cuts])
            bad = _differing_rows(alone, batched, ROWS)
            assert not bad, f"batch of {size} in {[b - a for a, b in cuts]}: rows {bad} differ from rows alone"


@pytest.mark.parametrize("memory", ["low", "normal"])
@pytest.mark.parametrize("model", ["tiny", "smollm2-135m"])
def test_rows_are_batch_independent(model, memory):
    _check(model, prompt_tokens=20, seed=1, memory=memory)


@pytest.mark.parametrize("memory", ["low", "normal"])
def test_prefill_sized_batches_give_the_rows_of_64_token_chunks(memory):
    n = 300
    with Llm(test_model_dir("smollm2-135m"), thread_num=2, speculative="off", memory=memory) as llm:
        ids = llm.tokenize(PROMPT * 30)
        prompt, tail = ids[:10], ids[10:10 + n]
        assert llm.batch_exact or not MNN_BATCH_EXACT
        if not llm.batch_exact:
            pytest.skip("this MNN does not claim batch-independent rows (Llm.batch_exact is False)")
        chunks = _mnn.forward_rows(llm._core, prompt, [tail[i:i + 64] for i in range(0, n, 64)])
        for size in (1, 96, 128, 200, 256, n):
            got = _mnn.forward_rows(llm._core, prompt, [tail[i:i + size] for i in range(0, n, size)])
            assert not _differing_rows(chunks, got, n), f"batches of {size}"


def test_rows_are_the_same_whatever_the_kv_cache_grew_through():
    """Patch 0006 sizes the KV cache by the length it holds (+64 tokens, or a quarter past 256): after a 10-token
    prompt, 640 rows one at a time grow it seven times (capacity 74, then 139, 204, 269, 337, 422, 528, 661
    tokens), 64-token chunks and one 640-row batch through other capacities. Attention must read the same rows
    from each, bit for bit."""
    n = 640
    with Llm(test_model_dir("tiny"), thread_num=2, speculative="off") as llm:
        ids = llm.tokenize(PROMPT * 60)
        prompt, tail = ids[:10], ids[10:10 + n]
        assert len(tail) == n
        assert llm.batch_exact or not MNN_BATCH_EXACT
        if not llm.batch_exact:
            pytest.skip("this MNN does not claim batch-independent rows (Llm.batch_exact is False)")
        alone = _mnn.forward_rows(llm._core, prompt, [[t] for t in tail])
        for size in (64, n):
            got = _mnn.forward_rows(llm._core, prompt, [tail[i:i + size] for i in range(0, n, size)])
            assert not _differing_rows(alone, got, n), f"batches of {size}"


def test_rows_are_batch_independent_past_an_attention_block():
    # 60 prompt tokens + 48 rows: kv crosses MNN_FLASH_ATTENTION_BLOCK_SIZE (64)
    _check("tiny", prompt_tokens=60, seed=2)


@pytest.mark.parametrize("threads", [1, 3])
def test_rows_are_batch_independent_with_three_query_heads_a_pass(threads):
    """Patch 0009: a decoding token's query heads that share a KV head are the rows of one pass where the KV heads
    divide evenly among the threads (the tiny model's 2 on 2 threads above: two rows a pass). SmolLM2 has 9 query
    heads on 3: on 1 or 3 threads, three rows a pass, each the row a batch (MNN's pass per head) gives."""
    _check("smollm2-135m", prompt_tokens=20, seed=4, threads=threads)


@pytest.mark.slow
@pytest.mark.parametrize("memory", ["low", "normal"])
def test_rows_are_batch_independent_on_the_qwen_shape(memory):
    _check("qwen3-0.6b-shape", prompt_tokens=20, seed=3, memory=memory)


@pytest.mark.skipif(MNN_PATCHED, reason="our MNN is patched")
def test_the_load_time_check_reports_an_unpatched_mnn():
    with Llm(test_model_dir("smollm2-135m"), thread_num=2) as llm:
        assert llm.batch_exact is False
        assert llm.speculative_default == "off"


def test_a_model_without_a_row_per_token_is_not_batch_exact(monkeypatch):
    """What forward_rows raises when MNN gives no logits or not a row per
    token (its RuntimeError, src/core/measure.pxi) makes the check say False
    instead of failing the load."""
    from mnn_engine.runtime import llm as llm_module

    class Tokens:
        def tokenize(self, text):
            return list(range(12))

    def no_rows(core, prompt, batches):
        raise RuntimeError("MNN returned 1 rows of logits for 6 tokens")

    monkeypatch.setattr(llm_module._mnn, "forward_rows", no_rows)
    assert llm_module._rows_batch_independent(Tokens()) is False
