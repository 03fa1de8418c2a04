#!/usr/bin/env python3
"""Create a tiny random-weight Hugging Face Qwen2-Audio model (a real audio
tower: Whisper's two convolutions over 128 mel bins, two encoder layers, the
projector), for llmexport to export into ``llm.mnn`` + ``audio.mnn``.

Usage: random_qwen2_audio.py --tokenizer TOK_DIR --out OUT_DIR [--seed N]

MNN computes the Whisper features itself (``MNN::AUDIO::whisper_fbank``,
16 kHz) and puts the encoder's output where its audio pad ids are
(151646 between 151647 and 151648, Qwen2-Audio's ``<|AUDIO|>``,
``<|audio_bos|>``, ``<|audio_eos|>``), so only the ids matter to it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

AUDIO_PAD = 151646


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    torch.manual_seed(args.seed)
    text = dict(model_type="qwen2", vocab_size=151936, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768,
                rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
                pad_token_id=151643)
    audio = dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=128, d_model=64,
                 max_source_positions=1500)
    config = Qwen2AudioConfig(audio_config=audio, text_config=text, audio_token_index=AUDIO_PAD)
    model = Qwen2AudioForConditionalGeneration(config).eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
