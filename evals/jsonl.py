"""Per-question JSONL logs: one JSON object per line, keyed by "qid", appended as a run goes, so a
rerun resumes where it stopped."""

from __future__ import annotations

import json
from pathlib import Path


def load_rows(path: Path) -> dict[str, dict]:
    """qid -> row of an existing log (empty if none); creates the log's folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {row["qid"]: row for row in rows}
