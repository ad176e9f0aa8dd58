"""Benchmark question sets: MMLongBench-Doc and LongDocURL, in one record type.

MMLongBench-Doc `samples.json`: doc_id, question, answer, evidence_pages (a string holding a
1-based list), evidence_sources (a string holding a list), answer_format (Int/Float/Str/List/None),
doc_type. LongDocURL: its native JSONL (question_id, doc_no, question, answer, evidence_pages,
evidence_sources, answer_format in Integer/Float/String/List/None, task_tag, start_end_idx) or its
MMLongBench-style conversion (with task_type). Documents are PDFs or folders of page images
(`<doc>/<doc>_<i>.png`, i 0-based; evidence pages are 1-based either way).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from docrefrag.agents.prompts import NOT_ANSWERABLE
from docrefrag.evals.score_common import list_field

logger = logging.getLogger(__name__)

Benchmark = Literal["mmlongbench", "longdocurl"]
_LDU_FORMATS = {"Integer": "Int", "String": "Str", "Float": "Float", "List": "List", "None": "None"}
_TO_LDU = {short: ldu for ldu, short in _LDU_FORMATS.items()}  # LongDocURL in MMLongBench-style fields: Int -> Integer


@dataclass(frozen=True)
class Question:
    qid: str
    benchmark: Benchmark
    doc_name: str  # the benchmark's document name, e.g. "2303.05039v2.pdf" or "4055915.pdf"
    question: str
    answer: str
    answer_format: str  # the benchmark's own format name
    evidence_pages: tuple[int, ...]  # 1-based
    evidence_sources: tuple[str, ...]
    doc_type: str = ""
    task: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def answerable(self) -> bool:
        return self.answer.strip() != NOT_ANSWERABLE


def load_questions(benchmark: Benchmark, path: Path) -> list[Question]:
    """Questions from a `samples.json` (either benchmark) or LongDocURL's native `.jsonl`."""
    path = Path(path)
    if path.is_dir():
        path = path / "samples.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no question file; pass the benchmark's samples.json (or .jsonl)")
    if path.suffix == ".jsonl":
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    else:
        records = json.loads(path.read_text())
    questions = []
    for i, r in enumerate(records):
        if "doc_no" in r:  # LongDocURL native
            questions.append(Question(
                qid=r["question_id"], benchmark="longdocurl", doc_name=f"{r['doc_no']}.pdf", question=r["question"],
                answer=json.dumps(r["answer"]) if isinstance(r["answer"], list) else str(r["answer"]),
                answer_format=r["answer_format"],
                evidence_pages=tuple(int(p) for p in list_field(r, "evidence_pages")),
                evidence_sources=tuple(list_field(r, "evidence_sources")), task=r.get("task_tag", ""),
                extra={"start_end_idx": r.get("start_end_idx"), "question_type": r.get("question_type")},
            ))
            continue
        fmt = _TO_LDU.get(r["answer_format"], r["answer_format"]) if benchmark == "longdocurl" else r["answer_format"]
        questions.append(Question(
            qid=str(r.get("id", f"{benchmark}-{i}")), benchmark=benchmark, doc_name=r["doc_id"], question=r["question"],
            answer=str(r["answer"]), answer_format=fmt,
            evidence_pages=tuple(int(p) for p in list_field(r, "evidence_pages")),
            evidence_sources=tuple(list_field(r, "evidence_sources")), doc_type=r.get("doc_type", ""),
            task=r.get("task_type", ""),
        ))
    return questions


def mmlongbench_format(q: Question | str) -> str:
    """A question's answer format (or a format name) in MMLongBench-Doc's vocabulary
    (LongDocURL's Integer -> Int, ...)."""
    fmt = q if isinstance(q, str) else q.answer_format
    return _LDU_FORMATS.get(fmt, fmt)


def document_sources(data_dir: Path) -> dict[str, Path]:
    """Benchmark document name (and its stem) -> a PDF or a page-image folder under `data_dir`."""
    found: dict[str, Path] = {}
    for pdf in sorted(Path(data_dir).rglob("*.pdf")):
        found.setdefault(pdf.name, pdf)
        found.setdefault(pdf.stem, pdf)
    images = (p for p in Path(data_dir).rglob("*") if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    for folder in sorted({p.parent for p in images}):
        found.setdefault(f"{folder.name}.pdf", folder)
        found.setdefault(folder.name, folder)
    return found


def split_available(questions: list[Question], sources: dict[str, Path]) -> tuple[list[Question], list[Question]]:
    """(questions whose document is present, questions whose document is missing)."""
    present = [q for q in questions if q.doc_name in sources]
    missing = [q for q in questions if q.doc_name not in sources]
    if missing:
        logger.warning("%d questions skipped: their documents are not under the data folder", len(missing))
    return present, missing
