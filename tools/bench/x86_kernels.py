#!/usr/bin/env python3
"""MNN's AVX-512 kernels against its AVX2 kernels on one CPU: decode and prefill.

Usage: python tools/bench/x86_kernels.py [--models qwen3-0.6b-shape smollm2-135m] [--rounds 6]

MNN picks its kernels by the CPU's features: on a CPU with AVX-512 (VNNI) the
int4 GEMMs of both prefill and decode run the AVX-512 ones. This runs the same
engine with our default libMNN and with the same library built without AVX-512
code (build/avx2-kernels/none, as ``patch_cost.py --kernels avx2`` builds it),
in fresh processes alternating, the way ``patch_cost.py`` measures (int4
low-memory mode, 2 threads, speculation and the prompt cache off). The ratio
says which kernel family is faster here for each phase; a CPU kind is one run.
Without AVX-512 it says so and saves nothing.
"""

from __future__ import annotations

import argparse

from common import alternating, machine, median, paired_ratio, save, test_model  # tools/bench is on sys.path
from patch_cost import avx2_build, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["qwen3-0.6b-shape", "smollm2-135m"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--gen", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=128, help="prefill length (tokens)")
    args = parser.parse_args()
    if "(AVX-512)" not in machine()["cpu"]:
        print("this CPU has no AVX-512: MNN runs its AVX2 kernels either way (nothing measured)")
        return
    libs = {"avx512": None, "avx2": str(avx2_build("none"))}
    results = {}
    for model in args.models:
        path = str(test_model(model))
        runs: dict[str, list[dict]] = {name: [] for name in libs}
        for name in alternating(args.rounds, list(libs)):
            runs[name].append(run(path, args.gen, args.prompt, libs[name]))
        row = {}
        for key in ("decode_tps", "prefill_tps"):
            avx512, avx2 = ([x[key] for x in runs[name]] for name in ("avx512", "avx2"))
            row[key] = {"avx512": median(avx512), "avx2": median(avx2), "avx2_over_avx512": paired_ratio(avx2, avx512)}
        results[model] = row
        print(f"{model}: decode AVX-512 {row['decode_tps']['avx512']:.1f}, AVX2 {row['decode_tps']['avx2']:.1f} tok/s "
              f"({row['decode_tps']['avx2_over_avx512']:.3f}x); prefill AVX-512 {row['prefill_tps']['avx512']:.0f}, "
              f"AVX2 {row['prefill_tps']['avx2']:.0f} tok/s ({row['prefill_tps']['avx2_over_avx512']:.3f}x)",
              flush=True)
    report = {"machine": machine(), "gen": args.gen, "prompt": args.prompt, "rounds": args.rounds, "models": results}
    print(f"saved {save('x86_kernels', report)}")


if __name__ == "__main__":
    main()
