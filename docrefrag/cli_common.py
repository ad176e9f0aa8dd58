"""What the command implementations share: exit codes, errors in one line, and the API objects the parsed
options name.

The API over --store/--qdrant-url, the chat model of --llm with --llm-timeout/--llm-retries, and the
ask settings of --config and the answer and planner options (ask and eval run the same graph).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docrefrag.graph.context import AskConfig

EXIT_OK, EXIT_PARTIAL, EXIT_ERROR = 0, 1, 2


def one_line(error: BaseException) -> str:
    """An error as the user reads it: its message and its notes (a failed run's id), not LangGraph's own."""
    notes = [n for n in getattr(error, "__notes__", ()) if not n.startswith("During task with name")]
    return " ".join([str(error), *notes])


def api(args: argparse.Namespace):
    from docrefrag.api import DocRefrag

    return DocRefrag(store=args.store, qdrant_url=args.qdrant_url)


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
    """The settings of --config and the options given, over `base` (default: the defaults)."""
    from dataclasses import replace

    from docrefrag.graph.context import AskConfig

    config = AskConfig.from_file(args.config, base) if args.config else base or AskConfig()
    overrides = {"answerer": args.answerer, "rerank": reranks(args), "reranker": args.reranker,
                 "max_rounds": args.max_rounds, "hyde": getattr(args, "hyde_mode", None),
                 "decompose": getattr(args, "decompose_mode", None), "evidence": args.evidence,
                 "evidence_tokens": args.evidence_tokens, "evidence_steps": args.evidence_steps,
                 "evidence_seconds": args.evidence_seconds, "evidence_driver": args.evidence_driver,
                 "memory": args.memory, "retrieval": args.retrieval, "agent_steps": args.agent_steps}
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    if args.pages is not None:
        config = replace(config, **{"reader_pages" if config.answerer == "reader" else "pages": args.pages})
    return config
