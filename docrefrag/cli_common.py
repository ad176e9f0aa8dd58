"""What the command implementations share: exit codes, errors in one line, and the API objects the parsed
options name.

The API over --store/--qdrant-url, the chat model of --llm with --llm-timeout/--llm-retries, and the
ask settings of --config and the setting flags (ask and eval run the same graph).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docrefrag.graph.config import AskConfig

EXIT_OK, EXIT_PARTIAL, EXIT_ERROR = 0, 1, 2


def one_line(error: BaseException) -> str:
    """An error as the user reads it: its message and its notes (a failed run's id), not LangGraph's own."""
    notes = [n for n in getattr(error, "__notes__", ()) if not n.startswith("During task with name")]
    return " ".join([str(error), *notes])


def api(args: argparse.Namespace):
    from docrefrag.api import DocRefrag

    return DocRefrag(store=args.store, qdrant_url=args.qdrant_url)


def ask_api(args: argparse.Namespace):
    """The API with the chat models of --llm-timeout and --llm-retries (ask: the resumed run's stored --llm too)."""
    from docrefrag.api import DocRefrag

    check_llm_args(args)
    return DocRefrag(store=args.store, qdrant_url=args.qdrant_url, llm_timeout=args.llm_timeout,
                     llm_retries=args.llm_retries)


def check_llm_args(args: argparse.Namespace) -> None:
    if args.llm_timeout <= 0 or args.llm_retries < 0:
        raise ValueError(f"--llm-timeout must be > 0 and --llm-retries >= 0, "
                         f"got {args.llm_timeout} and {args.llm_retries}")


def chat_model(dr, args: argparse.Namespace, spec: str | None):
    check_llm_args(args)
    return dr.llm(spec, timeout=args.llm_timeout, max_retries=args.llm_retries)


def reranks(args: argparse.Namespace) -> bool | None:
    """--rerank / --no-rerank as given; --reranker alone turns reranking on."""
    return True if args.rerank is None and args.reranker else args.rerank


def ask_config(args: argparse.Namespace, base: AskConfig | None = None) -> AskConfig:
    """The settings of --config and the setting flags given (`cli_parser` makes one per AskConfig setting),
    over `base` (default: the defaults). --reranker alone turns reranking on; --pages sets the chosen
    answerer's pages (the reader's, reader_pages, with --answerer reader) unless --reader-pages is given."""
    from docrefrag.graph.config import AskConfig

    config = AskConfig.from_file(args.config, base) if args.config else base or AskConfig()
    given = {name: getattr(args, name) for name in AskConfig.settings() if getattr(args, name) is not None}
    if reranks(args) is not None:
        given["rerank"] = reranks(args)
    if "pages" in given and "reader_pages" not in given and given.get("answerer", config.reading.answerer) == "reader":
        given["reader_pages"] = given.pop("pages")
    return AskConfig.from_values(given, config, where="the options")
