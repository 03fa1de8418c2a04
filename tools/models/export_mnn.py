#!/usr/bin/env python3
"""Run llmexport 0.0.5 (HF model -> MNN LLM directory), with two fixes.

1. llmexport imports its own submodules as top-level ``utils``: its package
   directory has to be on sys.path.
2. MNN's Python converter imports ``MNN.tools.utils.log``, whose fallback
   pip-installs a telemetry SDK and contacts a remote server. Registering the
   module as None makes that import fail cleanly, so conversion stays offline
   and leaves the environment alone.

3. llmexport 0.0.5 maps Qwen2-Audio's modules as transformers 4 laid them
   out (``language_model.model.embed_tokens``...); transformers 5 moved them
   under ``model.`` (``model.language_model.embed_tokens``, ``lm_head`` at the
   top). The map is replaced with transformers 5's layout before export,
   and its audio tower's layers are called as transformers 5 defines them
   (``layer(hidden_states, attention_mask)`` returning the tensor, not a tuple).

4. With no quantisation flag named, the export uses the settings the quality
   table chose (``export_settings.py``: int4 in blocks of 32, the output head
   at 8 bits) instead of llmexport's (blocks of 64, the head at 4 bits).

5. llmexport's split LoRA (``--lora_path DIR --lora_split`` -> ``lora.mnn``)
   adds ``W x + B (A x)`` after each adapted projection but hands the sum
   only to a ``ConvertTensor`` that reads the projection: where the fused
   attention reads ``v_proj`` directly, or the MLP's multiply reads
   ``gate_proj``/``up_proj``, the adapter's term is computed and dropped (its
   logits then match neither the base nor peft's merged model). Every reader
   of the projection's output now reads the sum. And it adapts a projection
   of every layer once any layer's is adapted (peft's ``layers_to_transform``
   fails with a KeyError): only the layers the adapter holds are adapted.

Usage: the same arguments as ``llmexport``.
"""

import importlib.util
import os
import sys

sys.modules["MNN.tools.utils.log"] = None  # type: ignore[assignment]
_spec = importlib.util.find_spec("llmexport")
if _spec is None or _spec.origin is None:
    sys.exit("llmexport is not installed in this environment")
sys.path.insert(0, os.path.dirname(_spec.origin))

from export_settings import with_quant_defaults  # noqa: E402 - beside this file (a script's directory is on sys.path)
from llmexport import main  # noqa: E402
from utils import audio as _audio  # noqa: E402 - llmexport's own modules (its directory is on sys.path)
from utils.lora import LoRA  # noqa: E402
from utils.model_mapper import ModelMapper  # noqa: E402

_qwen2_audio_map = ModelMapper.regist_qwen2audio


def _regist_qwen2audio_transformers5(self: ModelMapper) -> None:
    _qwen2_audio_map(self)
    self.mapper["qwen2_audio"]["model"] = {
        "lm": "lm_head",
        "embed": "model.language_model.embed_tokens",
        "blocks": "model.language_model.layers",
        "final_layernorm": "model.language_model.norm",
        "audio": "model.audio_tower",
        "audio.multi_modal_projector": "model.multi_modal_projector",
    }


ModelMapper.regist_qwen2audio = _regist_qwen2audio_transformers5


def _qwen2_audio_forward(self, input_features):  # llmexport's Qwen2Audio.forward, transformers 5's layer calls
    import torch

    tower = self.audio_tower
    input_features = input_features.to(dtype=tower.conv1.weight.dtype, device=tower.conv1.weight.device)
    embeds = torch.nn.functional.gelu(tower.conv2(torch.nn.functional.gelu(tower.conv1(input_features))))
    embeds = embeds.permute(0, 2, 1)
    hidden = embeds + tower.embed_positions.weight[:embeds.shape[1], :]
    for layer in tower.layers:
        out = layer(hidden, None)
        hidden = out[0] if isinstance(out, tuple) else out
    hidden = tower.avg_pooler(hidden.permute(0, 2, 1)).permute(0, 2, 1)
    return self.multi_modal_projector(tower.layer_norm(hidden))


_audio.Qwen2Audio.forward = _qwen2_audio_forward


def _lora_replace_input(self: LoRA, origin_idx: int, new_idx: int) -> None:
    """Every op of the base graph that reads ``origin_idx`` (a projection's
    output) reads ``new_idx`` (its sum with the adapter's term) instead. The
    new ops (the adapter's convolutions and the sum itself) are not in the
    base graph's list yet, so the sum still reads the projection."""
    for op in self.base_model["oplists"]:
        if origin_idx in op.get("inputIndexes", ()):
            op["inputIndexes"] = [new_idx if i == origin_idx else i for i in op["inputIndexes"]]


def _lora_has_lora(self: LoRA, op_name: str) -> bool:
    """Whether the adapter holds factors for this op's layer and projection
    (llmexport's tag: the layer's number and the projection's name)."""
    names = op_name.split("/")
    if op_name[:1] != "/" or len(names) < 4 or "." not in names[1]:
        return False
    return names[1].split(".")[1] + names[3] in self.lora_A


LoRA.replace_input = _lora_replace_input
LoRA.has_lora = _lora_has_lora

if __name__ == "__main__":
    sys.argv[1:] = with_quant_defaults(sys.argv[1:])
    sys.exit(main())
