#!/usr/bin/env python3
"""Create a tiny random-weight Hugging Face multimodal model with a real
encoder, for llmexport to export into ``llm.mnn`` and ``visual.mnn`` or
``audio.mnn``; the text layers are the tiny Qwen shape of the other test models.

Usage: random_multimodal.py {vision,audio} --tokenizer TOK_DIR --out OUT_DIR [--seed N]

- vision: Qwen2-VL. 14-pixel patches, two vision blocks, the 2x2 patch
  merger, temporal patches of 2, multimodal RoPE (its sections scaled to
  the head size). The Qwen tokenizer the other test models use has
  Qwen2-VL's vision tokens (<|vision_start|>, <|image_pad|>, <|vision_end|>).
- audio: Qwen2-Audio. Whisper's two convolutions over 128 mel bins, two
  encoder layers, the projector. MNN computes the Whisper features itself
  (``MNN::AUDIO::whisper_fbank``, 16 kHz) and puts the encoder's output
  where its audio pad ids are (151646 between 151647 and 151648,
  Qwen2-Audio's <|AUDIO|>, <|audio_bos|>, <|audio_eos|>): only the ids
  matter to it, not the tokenizer's names for them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    Qwen2AudioConfig,
    Qwen2AudioForConditionalGeneration,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
)

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 151652, 151653, 151655, 151656
AUDIO_PAD = 151646
#: the tiny Qwen text shape (build_test_models.TINY_SHAPE)
TEXT = dict(vocab_size=151936, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6,
            tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)
#: Qwen2-VL's image processor, as its preprocessor_config.json has it
PREPROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
                "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
                "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                "merge_size": 2}


def vision_model(tokenizer) -> torch.nn.Module:
    for token, token_id in (("<|vision_start|>", VISION_START), ("<|vision_end|>", VISION_END),
                            ("<|image_pad|>", IMAGE_PAD), ("<|video_pad|>", VIDEO_PAD)):
        assert tokenizer.convert_tokens_to_ids(token) == token_id, token
    text = {**TEXT, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                        "mrope_section": [4, 6, 6]}}  # head 32: 16 rotary pairs, as 16/24/24 of 64
    vision = dict(depth=2, embed_dim=64, hidden_size=128, num_heads=2, mlp_ratio=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, in_channels=3, hidden_act="quick_gelu")
    config = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_PAD,
                           video_token_id=VIDEO_PAD, vision_start_token_id=VISION_START,
                           vision_end_token_id=VISION_END, **text)
    return Qwen2VLForConditionalGeneration(config)


def audio_model(_tokenizer) -> torch.nn.Module:
    audio = dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=128, d_model=64,
                 max_source_positions=1500)
    config = Qwen2AudioConfig(audio_config=audio, text_config={**TEXT, "model_type": "qwen2"},
                              audio_token_index=AUDIO_PAD)
    return Qwen2AudioForConditionalGeneration(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("vision", "audio"))
    parser.add_argument("--tokenizer", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    torch.manual_seed(args.seed)
    model = (vision_model if args.kind == "vision" else audio_model)(tokenizer).eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    if args.kind == "vision":
        (args.out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    print(args.out)


if __name__ == "__main__":
    main()
