#!/usr/bin/env python3
"""Create a tiny random-weight Hugging Face Qwen2-VL model (a real vision
tower: patch embedding, two vision blocks, the patch merger), for llmexport
to export into ``llm.mnn`` + ``visual.mnn``.

Usage: random_qwen2_vl.py --tokenizer TOK_DIR --out OUT_DIR [--seed N]

The shapes are Qwen2-VL's with small widths: 14-pixel patches, 2x2 merging,
temporal patches of 2, multimodal RoPE (its sections scaled to the head
size). The tokenizer is the Qwen one the other test models use, which has
Qwen2-VL's vision tokens (<|vision_start|>, <|image_pad|>, <|vision_end|>).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen2VLConfig, Qwen2VLForConditionalGeneration

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 151652, 151653, 151655, 151656


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    for token, token_id in (("<|vision_start|>", VISION_START), ("<|vision_end|>", VISION_END),
                            ("<|image_pad|>", IMAGE_PAD), ("<|video_pad|>", VIDEO_PAD)):
        assert tokenizer.convert_tokens_to_ids(token) == token_id, token
    torch.manual_seed(args.seed)
    text = dict(vocab_size=151936, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768,
                rms_norm_eps=1e-6, tie_word_embeddings=True,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [4, 6, 6]},  # head 32: 16 rotary pairs, as 16/24/24 of 64
                bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)
    vision = dict(depth=2, embed_dim=64, hidden_size=128, num_heads=2, mlp_ratio=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, in_channels=3, hidden_act="quick_gelu")
    config = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_PAD,
                           video_token_id=VIDEO_PAD, vision_start_token_id=VISION_START,
                           vision_end_token_id=VISION_END, **text)
    model = Qwen2VLForConditionalGeneration(config).eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    (args.out / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
        "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
        "merge_size": 2}, indent=2))
    print(args.out)


if __name__ == "__main__":
    main()
