#!/usr/bin/env python3
"""Create a random-weight Hugging Face Qwen3 model, optionally "scripted".

Usage:
  random_qwen3.py --tokenizer TOK_DIR --out OUT_DIR [shape options]
  random_qwen3.py --tokenizer TOK_DIR --out OUT_DIR --script "text to say"

A scripted model answers every chat prompt with exactly the given text, then
``<|im_end|>``, under greedy decoding. It is a bigram machine: the attention
and MLP outputs are zeroed, so the hidden state after the last layer is a
function of the last input token alone, and the (untied) output head maps each
token of the script to the next one. The chain starts at the newline that ends
the chat template's ``<|im_start|>assistant\\n``.

A bigram machine can hold each token only once as a source, so the script is
segmented into tokens that are all distinct (a repeated ``": "`` becomes other
byte-level pieces with the same bytes); detokenising the chain still gives the
exact text.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

IM_END = "<|im_end|>"
CHAIN_START = "\n"


def token_bytes_table(tokenizer) -> dict[bytes, int]:
    """Byte string of every ordinary (byte-level BPE) token."""
    symbols = {}
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = 0
    for b in range(256):
        if b in printable:
            symbols[chr(b)] = b
        else:
            symbols[chr(256 + extra)] = b
            extra += 1
    table = {}
    for piece, token_id in tokenizer.get_vocab().items():
        if all(ch in symbols for ch in piece):
            table[bytes(symbols[ch] for ch in piece)] = token_id
    return table


def distinct_segmentation(text: str, tokenizer, reserved: set[int]) -> list[int]:
    """Token ids spelling ``text`` in which no id repeats or is in ``reserved``.

    Special tokens written in the text (``<tool_call>``) are used whole.
    Elsewhere the longest unused token is preferred, backtracking when a
    choice leads to a dead end.
    """
    specials = {t: tokenizer.convert_tokens_to_ids(t) for t in tokenizer.get_added_vocab()}
    table = token_bytes_table(tokenizer)
    longest = max(len(b) for b in table)
    data = text.encode("utf-8")
    special_at = {}
    for content, token_id in specials.items():
        raw = content.encode("utf-8")
        start = data.find(raw)
        while start != -1:
            special_at[start] = (len(raw), token_id)
            start = data.find(raw, start + 1)
    sys.setrecursionlimit(10000)
    used = set(reserved)

    def solve(pos: int) -> list[int] | None:
        if pos == len(data):
            return []
        if pos in special_at:
            length, token_id = special_at[pos]
            options = [(length, token_id)]
        else:
            options = []
            for length in range(min(longest, len(data) - pos), 0, -1):
                if any(pos < s < pos + length for s in special_at):
                    continue
                token_id = table.get(data[pos:pos + length])
                if token_id is not None:
                    options.append((length, token_id))
        for length, token_id in options:
            if token_id in used:
                continue
            used.add(token_id)
            rest = solve(pos + length)
            if rest is not None:
                return [token_id, *rest]
            used.discard(token_id)
        return None

    ids = solve(0)
    if ids is None:
        raise SystemExit(f"cannot spell {text!r} with distinct tokens")
    assert tokenizer.decode(ids) == text, (tokenizer.decode(ids), text)
    return ids


def script(model: Qwen3ForCausalLM, chain: list[int], strength: float = 40.0) -> None:
    """Make greedy decoding follow ``chain`` (each id -> the next one)."""
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed = model.model.embed_tokens.weight
        unit = embed / embed.norm(dim=1, keepdim=True).clamp_min(1e-6)
        scale = strength / embed.shape[1] ** 0.5
        head = 0.5 * scale * unit.clone()  # every other token weakly repeats itself
        for source, target in itertools.pairwise(chain):
            head[target] = scale * unit[source]
        model.lm_head.weight.copy_(head)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--intermediate", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--script", help="make a scripted model that says exactly this")
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    torch.manual_seed(args.seed)
    config = Qwen3Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim, hidden_act="silu",
        max_position_embeddings=40960, initializer_range=0.02, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=args.script is None, attention_bias=False,
        bos_token_id=151643, eos_token_id=151645, pad_token_id=151643,
    )
    model = Qwen3ForCausalLM(config)
    if args.script is not None:
        start = tokenizer.encode(CHAIN_START, add_special_tokens=False)
        end = tokenizer.convert_tokens_to_ids(IM_END)
        chain = [*start, *distinct_segmentation(args.script, tokenizer, set(start)), end]
        script(model, chain)
        print("script chain:", json.dumps(chain))
    model = model.to(torch.bfloat16).eval()
    model.generation_config.eos_token_id = [151645, 151643]
    model.generation_config.pad_token_id = 151643
    model.generation_config.do_sample = False
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # keep ours verbatim
        (args.out / name).write_bytes((args.tokenizer / name).read_bytes())
    print(f"wrote {args.out}: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")


if __name__ == "__main__":
    main()
