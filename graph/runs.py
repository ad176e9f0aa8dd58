"""The options each ask run was started with, kept next to its checkpoints, so that a resume continues
the run as it was started and refuses an option that contradicts it.

A table `docrefrag_runs` in the checkpoints' SQLite file holds, per run id, its chat model spec (the
`--llm` value, None when the model was passed as an object), its `AskConfig` fields and its reader
checkpoint. `resume_options` merges them with what a resume passes: a missing option takes the
stored value, a different one is refused with the stored value named.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import closing
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from docrefrag.graph.context import AskConfig


@dataclass(frozen=True)
class RunOptions:
    llm: str | None  # the --llm spec; None: a chat model object (it cannot be stored)
    config: AskConfig
    checkpoint: str | None  # the reader checkpoint; None: the one shipped in the package


def record_run(db: Path, thread_id: str, options: RunOptions) -> None:
    values = {"llm": options.llm, "config": asdict(options.config), "checkpoint": options.checkpoint}
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE IF NOT EXISTS docrefrag_runs (thread_id TEXT PRIMARY KEY, options TEXT NOT NULL, "
                     "started REAL NOT NULL)")
        conn.execute("INSERT OR REPLACE INTO docrefrag_runs VALUES (?, ?, ?)",
                     (thread_id, json.dumps(values), time.time()))


def recorded_run(db: Path, thread_id: str) -> RunOptions | None:
    """The options run `thread_id` was started with; None for an unknown run (or one started before
    runs recorded their options)."""
    if not db.is_file():
        return None
    with closing(sqlite3.connect(db)) as conn:
        try:
            row = conn.execute("SELECT options FROM docrefrag_runs WHERE thread_id = ?", (thread_id,)).fetchone()
        except sqlite3.OperationalError:  # no run recorded yet
            return None
    if row is None:
        return None
    values = json.loads(row[0])
    known = {f.name for f in fields(AskConfig)}
    return RunOptions(values["llm"], AskConfig(**{k: v for k, v in values["config"].items() if k in known}),
                      values["checkpoint"])


def resume_options(thread_id: str, stored: RunOptions | None, llm: str | None, config: AskConfig | None,
                   checkpoint: str | None, model_given: bool = False) -> RunOptions:
    """What a resume of `thread_id` runs with: the stored options, where the resume gave none; a given
    option that differs from the stored one raises ValueError naming both. `model_given`: the resume
    passes a chat model object (`llm` is then its spec, or None when it has none to compare)."""
    if stored is None:
        return RunOptions(llm, config or AskConfig(), checkpoint)

    def conflict(name: str, was: object, now: object) -> ValueError:
        return ValueError(f"run {thread_id} was started with {name} = {was!r}, not {now!r}; drop that option to "
                          "resume the run as it was started (or ask the question anew)")

    if llm is not None and stored.llm is not None and llm != stored.llm:
        raise conflict("llm", stored.llm, llm)
    if llm is None and stored.llm is None and not model_given:
        raise ValueError(f"run {thread_id} was started with a chat model passed as an object, which is not stored; "
                         "pass the same model again (--llm on the command line, llm= in Python)")
    if config is not None:
        for f in fields(AskConfig):
            if getattr(config, f.name) != getattr(stored.config, f.name):
                raise conflict(f.name, getattr(stored.config, f.name), getattr(config, f.name))
    if checkpoint is not None and stored.checkpoint is not None and Path(checkpoint) != Path(stored.checkpoint):
        raise conflict("checkpoint", stored.checkpoint, checkpoint)
    return RunOptions(llm or stored.llm, stored.config, checkpoint or stored.checkpoint)
