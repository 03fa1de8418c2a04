#!/usr/bin/env python3
"""Dequantise a GGUF checkpoint into a Hugging Face safetensors directory.

Usage: gguf_to_hf.py MODEL.gguf OUT_DIR

transformers loads GGUF files (with the `gguf` package) but refuses to save a
model loaded that way, so the weights are copied into a freshly built model of
the same class first.
"""

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    gguf_path, out_dir = Path(sys.argv[1]).resolve(), sys.argv[2]
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    settings = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path"):
        settings.pop(key, None)
    config = type(loaded.config).from_dict(settings)
    model = type(loaded)(config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    print(f"copied weights; missing={missing} unexpected={unexpected}")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    print(f"wrote {out_dir} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters)")


if __name__ == "__main__":
    main()
