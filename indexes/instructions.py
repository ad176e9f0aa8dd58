"""The retrieval agent's instructions as versioned data in the store (the `agent_instructions` table).

Each version is a text (when to call which tool, how to combine results, when to stop), its parent
version, where it came from ("seed": the package's first text; "evolve": a meta-agent's rewrite; "user":
`docrefrag agent set`), the scores it was measured with, the diagnoses behind it, and whether evolution
kept it. One version is active: the one `ask --retrieval agent` follows (`docrefrag agent use VERSION`).
The seed text is the caller's (agents/prompts.py): this layer stores text and knows no agent. The Store
exposes it as `store.instructions`. Every query first makes the table if it is missing, so that it is made
on first use and again when it was dropped after the store opened (which resets the store to the seed).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field

ORIGINS = ("seed", "evolve", "user")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_instructions (
    version INTEGER PRIMARY KEY, created_at REAL NOT NULL, text TEXT NOT NULL, parent INTEGER,
    origin TEXT NOT NULL, kept INTEGER NOT NULL, active INTEGER NOT NULL DEFAULT 0, scores TEXT NOT NULL,
    diagnoses TEXT NOT NULL, note TEXT NOT NULL);
"""
_COLUMNS = "version, created_at, text, parent, origin, kept, active, scores, diagnoses, note"


@dataclass(frozen=True)
class Instructions:
    version: int
    created_at: float  # time.time() when stored
    text: str
    parent: int | None  # the version it was rewritten from
    origin: str  # one of ORIGINS
    kept: bool  # evolution kept it (a seed or a user's text: True)
    active: bool
    scores: dict = field(default_factory=dict)  # e.g. {"validation": {"recall": 0.6, ...}, "train": {...}}
    diagnoses: list = field(default_factory=list)  # the meta-agent's diagnoses that led to it
    note: str = ""


def _instructions(row: tuple) -> Instructions:
    version, created, text, parent, origin, kept, active, scores, diagnoses, note = row
    return Instructions(version, created, text, parent, origin, bool(kept), bool(active), json.loads(scores),
                        json.loads(diagnoses), note)


class AgentInstructions:
    """The versions of the agent's instructions in a store's catalog database."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._conn = db

    def _db(self) -> sqlite3.Connection:
        """The catalog's connection, with the table (made if it is missing)."""
        with self._conn:
            self._conn.executescript(_SCHEMA)
        return self._conn

    def history(self) -> list[Instructions]:
        """Every version, oldest first."""
        rows = self._db().execute(f"SELECT {_COLUMNS} FROM agent_instructions ORDER BY version")
        return [_instructions(r) for r in rows]

    def get(self, version: int) -> Instructions:
        row = self._db().execute(f"SELECT {_COLUMNS} FROM agent_instructions WHERE version = ?",
                                 (version,)).fetchone()
        if row is None:
            known = [str(i.version) for i in self.history()]
            raise ValueError(f"the store has no agent instructions version {version}; versions: "
                             f"{', '.join(known) or 'none yet'} (docrefrag agent history)")
        return _instructions(row)

    def active(self, seed: str) -> Instructions:
        """The active version; a store without any gets `seed` as version 1, active."""
        row = self._db().execute(f"SELECT {_COLUMNS} FROM agent_instructions WHERE active = 1").fetchone()
        if row is not None:
            return _instructions(row)
        return self.add(seed, parent=None, origin="seed", activate=True, note="the package's seed instructions")

    def add(self, text: str, parent: int | None, origin: str, kept: bool = True, activate: bool = False,
            scores: dict | None = None, diagnoses: list | None = None, note: str = "") -> Instructions:
        """Store a new version (made active when `activate`)."""
        if not text.strip():
            raise ValueError("agent instructions are empty; write what the agent should do, in words")
        if origin not in ORIGINS:
            raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, got {origin!r}")
        db = self._db()
        with db:
            cur = db.execute(
                "INSERT INTO agent_instructions (created_at, text, parent, origin, kept, active, scores, diagnoses, "
                "note) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?)",
                (time.time(), text.strip(), parent, origin, int(kept), json.dumps(scores or {}),
                 json.dumps(diagnoses or []), note))
        version = int(cur.lastrowid)
        if activate:
            self.use(version)
        return self.get(version)

    def use(self, version: int) -> Instructions:
        """Make `version` the active one."""
        self.get(version)  # a clear error for an unknown version
        db = self._db()
        with db:
            db.execute("UPDATE agent_instructions SET active = (version = ?)", (version,))
        return self.get(version)

    def score(self, version: int, scores: dict) -> Instructions:
        """Merge measured scores into a version's record."""
        merged = {**self.get(version).scores, **scores}
        db = self._db()
        with db:
            db.execute("UPDATE agent_instructions SET scores = ? WHERE version = ?", (json.dumps(merged), version))
        return self.get(version)
