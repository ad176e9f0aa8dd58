"""Per-question JSONL logs: one JSON object per line, keyed by "qid", appended as a run goes, so a
rerun resumes where it stopped.

A log may be bound to its run's settings (models, checkpoint, ask configuration), kept beside it in
`NAME.settings.json`: a rerun with other settings is refused instead of silently reporting the
first run's rows as its own.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def settings_path(log: Path) -> Path:
    return log.with_name(f"{log.stem}.settings.json")


def load_rows(path: Path, settings: dict | None = None) -> dict[str, dict]:
    """qid -> row of an existing log (empty if none); creates the log's folder. With `settings`
    (JSON data), the log's rows are returned only if they were made with the same settings."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = {}
    if path.is_file():
        lines = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
        rows = {row["qid"]: row for row in lines}
    if settings is None:
        return rows
    settings = json.loads(json.dumps(settings, default=str))  # as it reads back from the file
    recorded = settings_path(path)
    if rows and recorded.is_file():
        before = json.loads(recorded.read_text())
        if before != settings:
            changed = sorted(k for k in {*before, *settings} if before.get(k) != settings.get(k))
            raise ValueError(f"{path} holds {len(rows)} rows made with other settings ({', '.join(changed)} "
                             f"differ, see {recorded.name}); pass another --out folder, or delete both files "
                             "to start this run afresh")
    elif rows:
        logger.warning("%s has no settings record (an older run): resuming it as made with the current settings", path)
    recorded.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    return rows
