#!/usr/bin/env python3
"""Build a Qwen3-style Hugging Face tokenizer from the real Qwen BPE ranks.

Usage: qwen_tokenizer.py OUT_DIR --tiktoken qwen.tiktoken

The ranks file ships inside the PyPI package ``dashscope`` (2.0.2,
``dashscope/resources/qwen.tiktoken``, Apache-2.0): 151,643 byte-level BPE
tokens as ``base64 rank`` lines. A tiktoken rank table has no merge list, so
each token's merge is recovered by replaying BPE on its bytes with only the
lower-ranked merges allowed; the last step must split it in exactly two.
Qwen3's added tokens take ids 151643..151668, and a compact ChatML template
(system/user/assistant/tool, ``enable_thinking``, ``tools``) is attached.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
FIRST_ADDED_ID = 151643
# (token, special) in id order
ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True),
    ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]

# ChatML as Qwen3 uses it, trimmed to what the test models need.
CHAT_TEMPLATE = "".join([
    "{%- if tools %}",
    "{{- '<|im_start|>system\\n' }}",
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}",
    "{{- '# Tools\\n\\nYou may call one or more functions. Function signatures:\\n<tools>' }}",
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}",
    "{{- '\\n</tools>\\n\\nReturn each call as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>"
    "<|im_end|>\\n' }}",
    "{%- elif messages[0]['role'] == 'system' %}",
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}",
    "{%- endif %}",
    "{%- for message in messages %}",
    "{%- if message['role'] == 'user' or message['role'] == 'assistant' %}",
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}",
    "{%- elif message['role'] == 'tool' %}",
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}",
    "{%- endif %}",
    "{%- endfor %}",
    "{%- if add_generation_prompt %}",
    "{{- '<|im_start|>assistant\\n' }}",
    "{%- if enable_thinking is defined and enable_thinking is false %}",
    "{{- '<think>\\n\\n</think>\\n\\n' }}",
    "{%- endif %}",
    "{%- endif %}",
])


def byte_symbols() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def load_ranks(path: Path) -> dict[bytes, int]:
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def last_merge(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two parts BPE joins last when it builds ``token``."""
    limit = ranks[token]
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best = None
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < limit and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    if len(parts) != 2:
        raise ValueError(f"cannot recover the merge of {token!r}: {parts}")
    return parts[0], parts[1]


def build(ranks: dict[bytes, int]) -> Tokenizer:
    symbols = byte_symbols()

    def text(b: bytes) -> str:
        return "".join(symbols[x] for x in b)

    ordered = sorted(ranks.items(), key=lambda item: item[1])
    vocab = {text(token): rank for token, rank in ordered}
    merges = [tuple(map(text, last_merge(token, ranks))) for token, _ in ordered if len(token) > 1]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tokenizer.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    for offset, (content, special) in enumerate(ADDED_TOKENS):
        token = AddedToken(content, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
        (tokenizer.add_special_tokens if special else tokenizer.add_tokens)([token])
        assert tokenizer.token_to_id(content) == FIRST_ADDED_ID + offset, content
    return tokenizer


def tokenizer_config() -> dict:
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(FIRST_ADDED_ID + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                      "single_word": False, "special": s}
            for i, (t, s) in enumerate(ADDED_TOKENS)
        },
        "additional_special_tokens": [t for t, s in ADDED_TOKENS[1:14]],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 40960,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--tiktoken", type=Path, required=True)
    args = parser.parse_args()
    ranks = load_ranks(args.tiktoken)
    if len(ranks) != FIRST_ADDED_ID:
        raise SystemExit(f"{args.tiktoken}: expected {FIRST_ADDED_ID} ranks, found {len(ranks)}")
    tokenizer = build(ranks)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(args.out_dir / "tokenizer.json"))
    (args.out_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2, ensure_ascii=False))
    print(f"wrote {args.out_dir}: {tokenizer.get_vocab_size(with_added_tokens=True)} tokens")


if __name__ == "__main__":
    main()
