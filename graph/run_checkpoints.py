"""The run checkpoints of the ask graph: where they are kept, the ids of the runs, and the options each
run was started with, kept next to its checkpoints, so that a resume continues the run as it was started
and refuses an option that contradicts it.

`run_checkpoints` names the SQLite file (a store's, or a benchmark run's beside its rows) and `new_run_id`
makes a run's id (its thread in that file): the API, the server and the harness take both from here.
A table `docrefrag_runs` in the checkpoints' SQLite file holds, per run id, its chat model spec (the
`--llm` value, None when the model was passed as an object), its `AskConfig` fields and its reader
checkpoint. `resume_options` merges them with what a resume passes: a missing option takes the
stored value, a different one is refused with the stored value named.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from docrefrag.graph.context import AskConfig


def new_run_id(prefix: str = "") -> str:
    """A fresh run id: 12 hex characters, after `prefix` and a dash when given (a benchmark question's id)."""
    run_id = uuid.uuid4().hex[:12]
    return f"{prefix}-{run_id}" if prefix else run_id


def run_checkpoints(folder: Path, name: str = "") -> Path:
    """The SQLite file of the run checkpoints (and run options) kept in `folder`: a store's directory
    (`checkpoints.sqlite`), or a benchmark run's output folder (`NAME.checkpoints.sqlite`, beside NAME.jsonl)."""
    return Path(folder) / (f"{name}.checkpoints.sqlite" if name else "checkpoints.sqlite")


@dataclass(frozen=True)
class RunOptions:
    llm: str | None  # the --llm spec; None: a chat model object (it cannot be stored)
    config: AskConfig
    reader_checkpoint: str | None  # the reader's weights (--checkpoint); None: the ones shipped in the package


def record_run(db: Path, thread_id: str, options: RunOptions) -> None:
    values = {"llm": options.llm, "config": options.config.flat(), "checkpoint": options.reader_checkpoint}
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
    known = AskConfig.settings()
    return RunOptions(values["llm"], AskConfig.from_values({k: v for k, v in values["config"].items() if k in known}),
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
        given, was = config.flat(), stored.config.flat()
        for name in given:
            if given[name] != was[name]:
                raise conflict(name, was[name], given[name])
    if (checkpoint is not None and stored.reader_checkpoint is not None
            and Path(checkpoint) != Path(stored.reader_checkpoint)):
        raise conflict("checkpoint", stored.reader_checkpoint, checkpoint)
    return RunOptions(llm or stored.llm, stored.config, checkpoint or stored.reader_checkpoint)
