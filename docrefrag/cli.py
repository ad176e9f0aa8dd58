"""The `docrefrag` command line: parses, calls the API, prints. Errors are one line, no traceback.

`main` is the console entry point (and `python -m docrefrag`'s); the arguments are defined in
cli_parser.py, the commands in cli_store.py (ingest, docs, search, memory, demo), cli_ask.py (ask), cli_agent.py
(agent, evolve), cli_eval.py (eval, bench, train, models) and cli_serve.py (serve).
"""

from __future__ import annotations

import logging
import sys

from docrefrag.cli_agent import cmd_agent, cmd_evolve
from docrefrag.cli_ask import cmd_ask
from docrefrag.cli_common import EXIT_ERROR, one_line
from docrefrag.cli_eval import cmd_bench, cmd_eval, cmd_models, cmd_train
from docrefrag.cli_parser import build_parser
from docrefrag.cli_serve import cmd_serve
from docrefrag.cli_store import cmd_demo, cmd_docs, cmd_ingest, cmd_memory, cmd_search

RESUMABLE = ("ingest", "eval", "train")  # commands whose rerun continues where an interrupted one stopped


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    _quiet_libraries()
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("interrupted" + ("; rerun the same command to resume" if args.command in RESUMABLE else ""),
              file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # every error reaches the user as one line; -v adds the traceback
        if args.verbose:
            logging.getLogger("docrefrag").exception("failed")
        print(f"error: {one_line(e)}", file=sys.stderr)
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


COMMANDS = {"models": cmd_models, "ingest": cmd_ingest, "search": cmd_search, "docs": cmd_docs, "memory": cmd_memory,
            "ask": cmd_ask, "eval": cmd_eval, "bench": cmd_bench, "train": cmd_train, "demo": cmd_demo,
            "serve": cmd_serve, "agent": cmd_agent, "evolve": cmd_evolve}
