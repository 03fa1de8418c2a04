#!/usr/bin/env python3
"""Make a LoRA adapter for a Hugging Face Qwen3 model with ``peft``, and the
model it merges into.

Usage:
  random_lora.py --base HF_DIR --adapter OUT_DIR --merged OUT_DIR [--rank 8] [--seed 1]
  random_lora.py --base HF_DIR --adapter OUT_DIR --merged OUT_DIR --script "text" --script-base "text"

A random adapter: peft's LoRA on every projection of every layer (q, k, v, o,
gate, up, down), both factors drawn at random (peft starts B at zero, which
would change nothing), scaled so the adapter moves the logits clearly but
does not swamp the base. The merged model is peft's own
``merge_and_unload()`` of the same base and adapter, saved as a full model:
exported to MNN beside the base, it is what the adapter must reproduce.

A scripted adapter (``--script``) turns a scripted base (random_qwen3.py
``--script``, which says ``--script-base``) into one that says ``--script``,
a sentence spelled with the base's script tokens: the base is a bigram
machine whose output head maps each token of its script to the next, so a
LoRA on the first layer's ``down_proj`` (zero in the base) that moves the
hidden state of each new source token onto the base's predecessor of the
wanted next token makes greedy decoding follow the new sentence. The
factors come from a least-squares solve and an exact SVD (rank = the new
chain's length).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from random_qwen3 import CHAIN_START, IM_END, distinct_segmentation  # the scripted base's own chain
from transformers import AutoTokenizer, Qwen3ForCausalLM

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def random_adapter(model: Qwen3ForCausalLM, rank: int, alpha: int) -> torch.nn.Module:
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=PROJECTIONS, lora_dropout=0.0, bias="none",
                        task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                fan_in = parameter.shape[1]
                parameter.copy_(torch.randn_like(parameter) / fan_in ** 0.5)
    return peft_model


def chain_of(text: str, tokenizer, start: list[int], vocabulary: set[int]) -> list[int]:
    """``text`` as distinct tokens all in ``vocabulary`` (the base's script), from the chain's start."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(set(ids)) != len(ids) or not set(ids) <= vocabulary:
        raise SystemExit(f"{text!r} must be spelled with distinct tokens of the base's script: {ids}")
    return [*start, *ids, tokenizer.convert_tokens_to_ids(IM_END)]


def scripted_adapter(model: Qwen3ForCausalLM, tokenizer, script: str, base_script: str,
                     strength: float = 8.0) -> torch.nn.Module:
    start = tokenizer.encode(CHAIN_START, add_special_tokens=False)
    base_chain = [*start, *distinct_segmentation(base_script, tokenizer, set(start)),
                  tokenizer.convert_tokens_to_ids(IM_END)]
    predecessor = {target: source for source, target in itertools.pairwise(base_chain)}
    chain = chain_of(script, tokenizer, start[-1:], set(predecessor))
    pairs = list(itertools.pairwise(chain))
    layer = model.model.layers[0]
    embed = model.model.embed_tokens.weight.float()
    with torch.no_grad():
        sources = torch.tensor([s for s, _ in pairs])
        x = layer.post_attention_layernorm(embed[sources].unsqueeze(0)).squeeze(0).float()  # the MLP's input
        mlp = layer.mlp
        acts = (torch.nn.functional.silu(x @ mlp.gate_proj.weight.float().T) * (x @ mlp.up_proj.weight.float().T))
        unit = embed / embed.norm(dim=1, keepdim=True)
        # the residual after layer 0 must point at the base's predecessor of each wanted target
        wanted = torch.stack([strength * embed[s].norm() * unit[predecessor[t]] - embed[s] for s, t in pairs])
        delta = torch.linalg.lstsq(acts, wanted).solution.T  # hidden x intermediate, rank <= len(pairs)
        u, s, vh = torch.linalg.svd(delta, full_matrices=False)
        rank = len(pairs)
        lora_b = u[:, :rank] * s[:rank].sqrt()
        lora_a = s[:rank].sqrt().unsqueeze(1) * vh[:rank]
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=["down_proj"], layers_to_transform=[0],
                        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "layers.0.mlp.down_proj.lora_A" in name:
                parameter.copy_(lora_a)
            elif "layers.0.mlp.down_proj.lora_B" in name:
                parameter.copy_(lora_b)
    print("adapter chain:", json.dumps(chain))
    return peft_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--adapter", required=True, type=Path)
    parser.add_argument("--merged", required=True, type=Path)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--alpha", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--script", help="the sentence the adapted model says (a scripted base)")
    parser.add_argument("--script-base", help="the sentence the scripted base says")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.base)
    model = Qwen3ForCausalLM.from_pretrained(args.base, dtype=torch.float32).eval()
    if args.script is not None:
        peft_model = scripted_adapter(model, tokenizer, args.script, args.script_base)
    else:
        peft_model = random_adapter(model, args.rank, args.alpha)
    peft_model.save_pretrained(args.adapter, safe_serialization=True)
    count = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    merged = peft_model.merge_and_unload()
    merged.save_pretrained(args.merged, safe_serialization=True)
    tokenizer.save_pretrained(args.merged)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # the base's, verbatim
        (args.merged / name).write_bytes((args.base / name).read_bytes())
    print(f"wrote {args.adapter} ({count} adapter parameters) and {args.merged}")


if __name__ == "__main__":
    main()
