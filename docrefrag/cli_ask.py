"""`docrefrag ask`: a question (or a resumed run) answered from the store, with cited pages and regions.

Node events stream to stderr, and on a terminal one progress line shows what a local model is
reading and writing.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from docrefrag.cli_common import EXIT_OK, ask_api, ask_config, check_llm_args


def cmd_ask(args: argparse.Namespace) -> int:
    progress = _ProgressLine() if sys.stderr.isatty() and not (args.quiet or args.json) else None

    def show(node: str, update: dict) -> None:
        if progress is not None:
            progress.clear()
            progress.round = update.get("round", progress.round)
        for entry in update.get("trace", []):
            detail = {k: v for k, v in entry.items()
                      if k in ("answer", "confidence", "query", "note", "round", "query_disagreement", "hyde",
                                   "sub_queries", "recalled")}
            if entry.get("hits"):
                detail["pages"] = [h["page"] for h in entry["hits"][:5]]
            print(f"[{node}] {json.dumps(detail, default=str)[:160]}", file=sys.stderr, flush=True)

    if (args.question is None) == (args.resume is None):
        raise ValueError("pass a question, or --resume RUN_ID to continue an unfinished run (not both)")
    events = None if args.quiet or args.json else show
    if args.resume and args.doc:
        raise ValueError("--resume continues a run on its own documents; drop --doc")
    check_llm_args(args)
    if args.question is not None:
        from docrefrag.api import check_question

        check_question(args.question)  # before the store is opened or the embedder loads
    from contextlib import nullcontext

    with ask_api(args) as dr, progress or nullcontext():
        dr.usable_store()  # a busy or empty store is refused before any model loads
        if args.resume:  # the options given here over the run's own (a conflicting one is refused, before a
            stored = dr.run_options(args.resume)  # model loads)
            result = dr.resume(args.resume, llm=args.llm, config=ask_config(args, stored and stored.config),
                               checkpoint=args.checkpoint, on_event=events)
        else:
            result = dr.ask(args.question, doc=args.doc, llm=args.llm, config=ask_config(args),
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
            print(f"  cited: {names.get(c['doc_id'], c['doc_id'])} page {c['page']}{box}: "
                  f"{' '.join(c['snippet'].split())[:100]}")
    print(f"confidence {result.confidence:.2f}, {result.rounds} round(s), {result.seconds:.1f} s, "
          f"run id {result.thread_id}")
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
