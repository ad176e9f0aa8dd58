"""`docrefrag evolve`: failure-driven evolution of the retrieval agent's instructions, measured on
questions the evolution never saw.

The benchmark's questions with evidence pages are split by document (`split_documents`: train,
validation, test; a document's questions stay together). Each round runs the agent (agents/tool_agent.py)
with the current instructions on the training questions, takes the failures (no evidence page among the
pages handed to the answer agent), lets the meta-agent (agents/meta_agent.py) probe and diagnose a sample
of them (a different sample each round) and rewrite the instructions, and keeps the rewrite only if it
raises evidence-page recall on the validation questions. Every round's candidate is stored in the store's
instruction history (kept or not, with its scores and diagnoses: `docrefrag agent history`); a kept one
becomes the active version. At the end the unevolved instructions, the evolved ones and the pipeline
search (the ask graph's hybrid search of the planned question, without HyDE) are measured on the test
questions. The objective is retrieval (the pages handed on), not answer accuracy: an answer costs
a generation per question and the reading is not what the instructions steer.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from docrefrag.agents import prompts
from docrefrag.agents.meta_agent import Diagnosis, Failure, RewriteError, diagnose, measure, rewrite, rule_rewrite
from docrefrag.agents.planner import extract_intents
from docrefrag.agents.retrieval import SEARCH_DEPTH, search_plan
from docrefrag.agents.tool_agent import find_pages, tool_use
from docrefrag.agents.tools import ToolRegistry
from docrefrag.evals.datasets import Question
from docrefrag.indexes.fusion import DEFAULT_METHOD
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.store import Store

logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
DIAGNOSES = ("llm", "measure", "rules")


@dataclass(frozen=True)
class Trajectory:
    qid: str
    question: str
    doc_id: str
    evidence: list[int]
    handed: list[int]  # pages handed to the answer agent, best first
    recall: float  # share of the evidence pages among `handed`
    calls: list[dict]  # tool_agent.Call.summary rows
    stopped: str

    @property
    def failed(self) -> bool:
        return not set(self.evidence) & set(self.handed)


def _key(seed: int, name: str) -> str:
    return hashlib.sha1(f"{seed}:{name}".encode()).hexdigest()


def split_documents(questions: Sequence[Question], seed: int = 0, per_split: int | None = None
                    ) -> dict[str, list[Question]]:
    """Train / validation / test by document (2 : 1 : 1 of the documents, in an order fixed by a hash of
    their names and `seed`); only questions with evidence pages; at most `per_split` questions each (the
    first by a hash of their ids, so a split's documents are sampled evenly)."""
    docs = sorted({q.doc_name for q in questions if q.evidence_pages}, key=lambda d: _key(seed, d))
    which = {d: ("train", "train", "validation", "test")[i % 4] for i, d in enumerate(docs)}
    splits = {s: sorted((q for q in questions if q.evidence_pages and which[q.doc_name] == s),
                        key=lambda q: _key(seed, q.qid)) for s in SPLITS}
    return {s: qs[:per_split] for s, qs in splits.items()}


def _trajectory(q: Question, doc_id: str, handed: list[int], calls: list[dict], stopped: str) -> Trajectory:
    evidence = sorted(set(q.evidence_pages))
    recall = len(set(evidence) & set(handed)) / len(evidence)
    return Trajectory(q.qid, q.question, doc_id, evidence, handed, recall, calls, stopped)


def run_agent(questions: Sequence[Question], doc_ids: dict[str, str], tools: ToolRegistry, llm, instructions: str,
              steps: int, pages: int) -> list[Trajectory]:
    """The agent on each question (its own document), the top `pages` of what it found handed on."""
    out = []
    for q in questions:
        doc_id = doc_ids[q.doc_name]
        found = find_pages(q.question, list(tools.tools.values()), llm, instructions, steps, [doc_id])
        out.append(_trajectory(q, doc_id, [p for _, p, _ in found.pages[:pages]], [c.summary() for c in found.calls],
                               found.stopped))
        logger.info("%s: handed %s, evidence %s", q.qid, out[-1].handed, out[-1].evidence)
    return out


def run_pipeline(questions: Sequence[Question], doc_ids: dict[str, str], searcher: HybridSearcher,
                 pages: int) -> list[Trajectory]:
    """The pipeline mode's first search (the planned question, fused branches), top `pages` handed on."""
    out = []
    for q in questions:
        doc_id = doc_ids[q.doc_name]
        hits, _ = search_plan(extract_intents(q.question), q.question, searcher, [doc_id], SEARCH_DEPTH,
                              DEFAULT_METHOD)
        out.append(_trajectory(q, doc_id, [h.page for h in hits[:pages]], [], "pipeline"))
    return out


def scores(trajectories: Sequence[Trajectory]) -> dict:
    """Evidence-page recall of the pages handed on, the share of questions with any evidence page handed,
    and tool use: calls per question, per tool, malformed replies, fallbacks, the commonest tool sequences."""
    n = len(trajectories) or 1
    use = [tool_use(t.calls) for t in trajectories]
    per_tool = sum((Counter(u["calls"]) for u in use), Counter())
    return {"questions": len(trajectories), "recall": round(sum(t.recall for t in trajectories) / n, 4),
            "hit": round(sum(not t.failed for t in trajectories) / n, 4),
            "calls_per_question": round(sum(sum(u["calls"].values()) for u in use) / n, 2),
            "tools": dict(per_tool.most_common()), "malformed": sum(u["malformed"] for u in use),
            "fallback": sum(u["fallback"] for u in use),
            "sequences": dict(Counter(u["sequence"] for u in use).most_common(3))}


def _usage(stats: dict) -> str:
    """Tool-use statistics in words, for the meta-agent."""
    tools = ", ".join(f"{name} {count} times" for name, count in stats["tools"].items()) or "no tool"
    return (f"over {stats['questions']} questions it called {tools}; {stats['malformed']} replies were malformed; "
            f"its commonest sequences: {', '.join(stats['sequences'])}")


def _failures(trajectories: Sequence[Trajectory], sample: int, round_no: int) -> list[Failure]:
    """`sample` failures, a different slice each round (rotating through them)."""
    failed = [t for t in trajectories if t.failed]
    if not failed:
        return []
    start = (round_no - 1) * sample % len(failed)
    chosen = (failed[start:] + failed[:start])[:sample]
    return [Failure(t.question, t.doc_id, t.evidence, t.handed, t.calls) for t in chosen]


def evolve(store: Store, searcher: HybridSearcher, llm, meta_llm, questions: Sequence[Question],
           doc_ids: dict[str, str], out_dir: Path, rounds: int = 3, steps: int = 5, pages: int = 3, sample: int = 3,
           probes: int = 2, seed: int = 0, per_split: int | None = None, extra_tools: str = "",
           diagnosis: str = "llm") -> dict:
    """Evolve the store's active instructions; writes evolution.json, .md and .png under `out_dir`. `diagnosis`:
    "llm" (the meta-agent probes the tools and states each lesson), "measure" (every search tool probed with
    the question and its key words; no model call but the rewrite) or "rules" (measured, and the best search
    written as the first rule from a template: no model call)."""
    if diagnosis not in DIAGNOSES:
        raise ValueError(f"diagnosis must be one of {', '.join(DIAGNOSES)}, got {diagnosis!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    versions = store.instructions
    tools = ToolRegistry.from_config(store, searcher, extra_tools)
    names = [*tools.tools]
    splits = split_documents([q for q in questions if q.doc_name in doc_ids], seed, per_split)
    start = current = versions.active(prompts.AGENT_SEED)
    val = scores(run_agent(splits["validation"], doc_ids, tools, llm, current.text, steps, pages))
    current = versions.score(current.version, {"validation": val})
    history = [{"round": 0, "version": current.version, "kept": True, "validation": val}]
    train: list[Trajectory] | None = None
    for round_no in range(1, rounds + 1):
        if train is None:  # the instructions changed (or round 1): the agent runs the training questions again
            train = run_agent(splits["train"], doc_ids, tools, llm, current.text, steps, pages)
        train_stats = scores(train)
        failures = _failures(train, sample, round_no)
        diagnoses: list[Diagnosis] = [diagnose(f, current.text, list(tools.tools.values()), meta_llm, probes)
                                      if diagnosis == "llm" else measure(f, list(tools.tools.values()))
                                      for f in failures]
        entry = {"round": round_no, "parent": current.version, "train": train_stats,
                 "diagnoses": [asdict(d) for d in diagnoses]}
        try:
            text = (rule_rewrite(current.text, diagnoses) if diagnosis == "rules" else
                    rewrite(current.text, diagnoses, _usage(train_stats), names, meta_llm,
                            temperature=0.7 if round_no > 1 else None))
        except RewriteError as e:
            entry.update(kept=False, refused=str(e))
            history.append(entry)
            logger.warning("round %d: %s", round_no, e)
            continue
        cand = scores(run_agent(splits["validation"], doc_ids, tools, llm, text, steps, pages))
        kept = (cand["recall"], cand["hit"]) > (val["recall"], val["hit"])
        stored = versions.add(text, parent=current.version, origin="evolve", kept=kept, activate=kept,
                              scores={"validation": cand, "train_parent": train_stats},
                              diagnoses=[asdict(d) for d in diagnoses], note=f"evolve round {round_no}")
        entry.update(version=stored.version, kept=kept, validation=cand)
        history.append(entry)
        if kept:
            current, val, train = stored, cand, None
    test = {"unevolved": scores(run_agent(splits["test"], doc_ids, tools, llm, start.text, steps, pages)),
            "pipeline": scores(run_pipeline(splits["test"], doc_ids, searcher, pages))}
    test["evolved"] = (test["unevolved"] if current.version == start.version else
                       scores(run_agent(splits["test"], doc_ids, tools, llm, current.text, steps, pages)))
    versions.score(current.version, {"test": test["evolved"]})
    report = {"splits": {s: sorted({q.doc_name for q in qs}) for s, qs in splits.items()},
              "questions": {s: len(qs) for s, qs in splits.items()}, "start": start.version,
              "final": current.version, "rounds": history, "test": test, "pages": pages, "steps": steps,
              "diagnosis": diagnosis}
    (out_dir / "evolution.json").write_text(json.dumps(report, indent=1))
    (out_dir / "evolution.md").write_text(evolution_markdown(report))
    evolution_plot(report, out_dir / "evolution.png")
    return report


def evolution_markdown(report: dict) -> str:
    lines = [f"Questions: {report['questions']} (by document); pages handed on: {report['pages']}; "
             f"agent steps: {report['steps']}; diagnosis: {report['diagnosis']}; instructions v{report['start']} -> "
             f"v{report['final']}", "",
             "| round | version | kept | validation recall | validation hit | train recall | calls/q | malformed |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["rounds"]:
        val, train = r.get("validation", {}), r.get("train", {})
        lines.append(f"| {r['round']} | {r.get('version', '-')} | {r['kept']} | {val.get('recall', '-')} | "
                     f"{val.get('hit', '-')} | {train.get('recall', '-')} | {val.get('calls_per_question', '-')} | "
                     f"{val.get('malformed', '-')} |")
    lines += ["", "Test split (documents the evolution never saw):", "",
              "| mode | recall | hit | calls/q | tools | commonest sequences |", "|---|---|---|---|---|---|"]
    for mode, s in report["test"].items():
        lines.append(f"| {mode} | {s['recall']} | {s['hit']} | {s['calls_per_question']} | {s['tools']} | "
                     f"{s['sequences']} |")
    return "\n".join(lines) + "\n"


def evolution_plot(report: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    rounds = [r for r in report["rounds"] if "validation" in r]
    left.plot([r["round"] for r in rounds], [r["validation"]["recall"] for r in rounds], "o--", color="grey",
              label="candidate")
    kept = [r for r in rounds if r["kept"]]
    left.plot([r["round"] for r in kept], [r["validation"]["recall"] for r in kept], "o-", color="C0", label="kept")
    left.set(xlabel="round", ylabel="evidence-page recall (validation)", title="evolution")
    left.legend()
    modes = list(report["test"])
    right.bar(modes, [report["test"][m]["recall"] for m in modes], color=["C1", "C0", "C2"][:len(modes)])
    right.set(ylabel="evidence-page recall (test)", title="test split", ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
