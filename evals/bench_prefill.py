"""How fast a decoder reads and writes on this CPU in each form it can run: float32, bfloat16, int8.

    python -m docrefrag.evals.bench_prefill --decoder qwen-coder-1.5b --form float32 --form int8 \
        --lengths 300 1000 --threads 2 --json out.json

Per form, in one process: the load time (int8: from its cache when one is there, else with the quantising),
then for each prompt length (random token ids after a 64-token warm-up) the prefill's seconds and tokens/s,
and the mean of 10 decode steps over the KV cache. A question's pages are a prefill of hundreds to
thousands of tokens, so the prefill is most of an `ask` on a CPU (docs/decisions/answers.md, "Decoders").
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from docrefrag.core.decoding import INT8, load_causal_lm, token_steps
from docrefrag.core.weights import model_dir

FORMS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int8": INT8}


def step_times(model: torch.nn.Module, length: int, steps: int = 10) -> tuple[float, float]:
    """(prefill seconds of `length` tokens, mean seconds of one decode step after it), through the decoding
    loop `ask` runs (`decoding.token_steps`), after a 64-token warm-up."""
    next(token_steps(model, torch.randint(100, 20000, (1, 64))))
    loop = token_steps(model, torch.randint(100, 20000, (1, length)))
    t0 = time.perf_counter()
    next(loop)
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        next(loop)
    return prefill, (time.perf_counter() - t0) / steps


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decoder", default="qwen-coder-1.5b")
    ap.add_argument("--form", action="append", choices=sorted(FORMS), help="repeat; default: float32 and int8")
    ap.add_argument("--lengths", type=int, nargs="+", default=[300, 1000])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for form in args.form or ["float32", "int8"]:
        t0 = time.perf_counter()
        model = load_causal_lm(model_dir(args.decoder), FORMS[form]).model
        row = {"form": form, "load_s": round(time.perf_counter() - t0, 1)}
        for length in args.lengths:
            prefill, decode = step_times(model, length)
            row[f"prefill_{length}_s"] = round(prefill, 2)
            row[f"prefill_{length}_tokens_per_s"] = round(length / prefill, 1)
            row[f"decode_{length}_ms_per_token"] = round(decode * 1000)
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.json:
        args.json.write_text(json.dumps({"decoder": args.decoder, "threads": args.threads,
                                         "machine": platform.processor() or platform.machine(), "rows": rows},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
