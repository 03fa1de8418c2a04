#!/usr/bin/env python3
"""An 8-turn conversation with the prompt cache on and off.

Usage: python tools/bench/conversation.py [--models smollm2-135m qwen3-0.6b-shape] [--rounds 2]
                                          [--turns 8] [--answer 64]

Each round runs the whole conversation twice in fresh processes, cache on
and cache off, alternating which goes first. The conversation is fixed (long
user turns, answers of exactly --answer tokens, greedy), so both modes see
the same prompts; the cache-off run's answers are the history. Per turn:
time to first token, tokens prefilled (prompt minus what the cache held),
decode tok/s; per process: peak RSS. Medians over rounds. Targets (issue
#12): at the first turn whose prompt passes 1,000 tokens, TTFT with the cache
at least 5x lower; decode tok/s ratio >= 0.98; peak RSS within 10 MiB.
"""

from __future__ import annotations

import argparse

from common import machine, median, run_worker, save, test_model  # tools/bench is on sys.path

WORKER = """
import json, sys
from mnn_engine import Llm
from mnn_engine.runtime.device import default_threads
path, cache, turns, answer = sys.argv[1], sys.argv[2] == "on", int(sys.argv[3]), int(sys.argv[4])
llm = Llm(path, thread_num=default_threads(), prompt_cache=cache).load()
topics = ["the sea", "mountains", "rivers", "deserts", "forests", "glaciers", "volcanoes", "islands", "caves"]
chat = [{"role": "system", "content": "You are a patient geography teacher."}]
rows = []
for turn in range(turns):
    topic = topics[turn % len(topics)]
    chat.append({"role": "user", "content": f"Tell me everything about {topic}: " +
                 f"how {topic} form, how they change over time, who lives near {topic}, and why {topic} matter. " * 4})
    r = llm.generate(chat, temperature=0, max_tokens=answer, ignore_eos=True)
    rows.append({"turn": turn + 1, "prompt_tokens": r.prompt_tokens, "cached_tokens": r.cached_tokens,
                 "prefilled": r.prompt_tokens - r.cached_tokens, "ttft_ms": r.time_to_first_token_ms,
                 "decode_tps": r.decode_tokens_per_second})
    chat.append({"role": "assistant", "content": r.text})
hwm = 0.0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1]) / 1024
print(json.dumps({"rows": rows, "peak_rss_mib": hwm}))
"""


def run(model: str, cache: str, turns: int, answer: int) -> dict:
    return run_worker(WORKER, test_model(model), cache, turns, answer)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen3-0.6b-shape"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--answer", type=int, default=64)
    args = ap.parse_args()
    results = {}
    for model in args.models:
        samples: dict[str, list[dict]] = {"on": [], "off": []}
        for r in range(args.rounds):
            for cache in (("on", "off") if r % 2 == 0 else ("off", "on")):
                samples[cache].append(run(model, cache, args.turns, args.answer))
        table = []
        for t in range(args.turns):
            row = {"turn": t + 1, "prompt_tokens": samples["off"][0]["rows"][t]["prompt_tokens"]}
            for cache in ("on", "off"):
                for key in ("ttft_ms", "decode_tps", "prefilled"):
                    row[f"{key}_{cache}"] = median([s["rows"][t][key] for s in samples[cache]])
            row["ttft_ratio"] = row["ttft_ms_off"] / row["ttft_ms_on"]
            row["decode_ratio"] = row["decode_tps_on"] / row["decode_tps_off"]
            table.append(row)
        rss = {cache: median([s["peak_rss_mib"] for s in samples[cache]]) for cache in ("on", "off")}
        past = next((row for row in table if row["prompt_tokens"] > 1000), table[-1])
        results[model] = {"turns": table, "peak_rss_mib": rss, "turn_past_1000": past}
        print(f"{model}: turn  prompt  prefilled on/off   TTFT on/off ms   ratio  decode on/off tok/s")
        for row in table:
            print(f"{'':{len(model)}}  {row['turn']:4d}  {row['prompt_tokens']:6d}  {row['prefilled_on']:5.0f}/"
                  f"{row['prefilled_off']:<5.0f}  {row['ttft_ms_on']:7.1f}/{row['ttft_ms_off']:<7.1f}  "
                  f"{row['ttft_ratio']:5.1f}x  {row['decode_tps_on']:.1f}/{row['decode_tps_off']:.1f}", flush=True)
        print(f"{'':{len(model)}}  peak RSS on/off {rss['on']:.0f}/{rss['off']:.0f} MiB; first turn past 1,000 "
              f"tokens: turn {past['turn']}, TTFT {past['ttft_ratio']:.1f}x lower, decode {past['decode_ratio']:.3f}x",
              flush=True)
    print(f"saved {save('conversation', {'machine': machine(), 'answer_tokens': args.answer, 'models': results})}")


if __name__ == "__main__":
    main()
