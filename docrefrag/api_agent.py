"""The retrieval agent's part of the Python API: its versioned instructions and their evolution.

    with DocRefrag(store="s") as dr:
        print(dr.agent_instructions().text)          # the active version (the seed on a new store)
        dr.set_agent_instructions("1. Call bm25_search first ...")
        dr.evolve_agent("mmlongbench", "data/mmlongbench", "runs/evolve", rounds=3)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from docrefrag.evals.datasets import Benchmark
    from docrefrag.indexes.instructions import Instructions


class AgentWork:
    """Mixed into DocRefrag: needs `open_store`, `usable_store`, `embedder` and `llm`."""

    def agent_instructions(self, version: int | None = None) -> Instructions:
        """The active instructions of the retrieval agent (the package's seed on a store without any), or
        `version`."""
        from docrefrag.agents.prompts import AGENT_SEED

        versions = self.usable_store().instructions
        return versions.active(AGENT_SEED) if version is None else versions.get(version)

    def agent_history(self) -> list[Instructions]:
        """Every version of the instructions, oldest first (the seed stored if there is none yet)."""
        self.agent_instructions()
        return self.usable_store().instructions.history()

    def use_agent_instructions(self, version: int) -> Instructions:
        """Make `version` the active instructions."""
        self.agent_instructions()
        return self.usable_store().instructions.use(version)

    def set_agent_instructions(self, text: str, note: str = "") -> Instructions:
        """Store a team's own instructions as a new version, active."""
        parent = self.agent_instructions().version
        return self.usable_store().instructions.add(text, parent=parent, origin="user", activate=True, note=note)

    def evolve_agent(self, benchmark: Benchmark, data: Path | str, out: Path | str, rounds: int = 3,
                     llm: str | BaseChatModel | None = None, meta_llm: str | BaseChatModel | None = None,
                     limit: int | None = None, steps: int = 5, pages: int = 3, sample: int = 3, probes: int = 2,
                     seed: int = 0, per_split: int | None = None, tools: str = "",
                     diagnosis: str = "llm", show_progress: bool = False) -> dict:
        """Evolve the retrieval agent's instructions on the benchmark's questions (ingesting the documents the
        store lacks): `docrefrag.evals.evolve`. `meta_llm` (default: `llm`) diagnoses ("llm"; "measure": the
        search tools probed without a model) and rewrites."""
        from docrefrag.evals.evolve import evolve
        from docrefrag.evals.harness import prepare
        from docrefrag.indexes.hybrid import HybridSearcher

        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        chat = self.llm(llm)
        meta = chat if meta_llm is None else self.llm(meta_llm)
        store = self.open_store(create=True)
        questions, doc_ids, _ = prepare(benchmark, Path(data), store, limit, show_progress, self.embedder)
        return evolve(store, HybridSearcher(store, self.embedder), chat, meta, questions, doc_ids, Path(out),
                      rounds=rounds, steps=steps, pages=pages, sample=sample, probes=probes, seed=seed,
                      per_split=per_split, extra_tools=tools, diagnosis=diagnosis)
