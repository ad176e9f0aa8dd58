"""The retrieval agent's commands: `agent show|history|use|set` (its versioned instructions in the store)
and `evolve` (rewrite them from the agent's failures on a benchmark's questions: evals/evolve.py)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import datetime

from docrefrag.cli_common import EXIT_OK, api, chat_model


def _when(created_at: float) -> str:
    return datetime.fromtimestamp(created_at).strftime("%Y-%m-%d %H:%M")


def cmd_agent(args: argparse.Namespace) -> int:
    with api(args) as dr:
        if args.agent_command == "show":
            shown = dr.agent_instructions(args.instructions_version)
            print(json.dumps(asdict(shown), indent=2) if args.json else shown.text)
            return EXIT_OK
        if args.agent_command == "use":
            used = dr.use_agent_instructions(args.instructions_version)
            print(f"version {used.version} ({used.origin}, {_when(used.created_at)}) is now the active instructions")
            return EXIT_OK
        if args.agent_command == "set":
            try:
                text = args.file.read_text()
            except OSError as e:
                raise ValueError(f"cannot read {args.file} ({e.strerror}); pass a text file of instructions") from None
            added = dr.set_agent_instructions(text, note=f"from {args.file}")
            print(f"stored as version {added.version} (parent {added.parent}), now active")
            return EXIT_OK
        versions = dr.agent_history()
    if args.json:
        print(json.dumps([asdict(v) for v in versions], indent=1))
        return EXIT_OK
    for v in versions:
        val = v.scores.get("validation", {})
        score = f"validation recall {val['recall']} (hit {val['hit']})" if val else "not measured"
        print(f"{'*' if v.active else ' '} v{v.version}  {_when(v.created_at)}  {v.origin:<6} parent "
              f"{v.parent if v.parent is not None else '-'}  {'kept' if v.kept else 'not kept'}  {score}  "
              f"{len(v.diagnoses)} diagnoses  {v.note}")
    print("(* active; docrefrag agent show --version N prints one, docrefrag agent use N makes it active)")
    return EXIT_OK


def cmd_evolve(args: argparse.Namespace) -> int:
    from docrefrag.evals.evolve import evolution_markdown

    with api(args) as dr:
        report = dr.evolve_agent(args.benchmark, args.data, args.out, rounds=args.rounds,
                                 llm=chat_model(dr, args, args.llm),
                                 meta_llm=chat_model(dr, args, args.meta_llm) if args.meta_llm else None,
                                 limit=args.limit, steps=args.steps, sample=args.sample, probes=args.probes,
                                 seed=args.seed, per_split=args.per_split, tools=args.agent_tools,
                                 diagnosis=args.diagnosis, show_progress=sys.stderr.isatty())
    print(evolution_markdown(report))
    print(f"reports in {args.out}; docrefrag agent history shows every version")
    return EXIT_OK
