"""A store opened with its ingest and hybrid search in one handle: the index of the Doc-REFRAG
reader's training corpus (`docrefrag.core.train` takes it through its `TrainingCorpus` interface, so
the model layer does not import this one)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from docrefrag.indexes.discovery import IngestResult
from docrefrag.indexes.hybrid import HybridSearcher
from docrefrag.indexes.ingest import Ingestor
from docrefrag.indexes.store import Store

if TYPE_CHECKING:
    from docrefrag.core.text_embedder import TextEmbedder


class CorpusIndex:
    """The store at `folder` (created if absent); `ingest` adds documents (resumable; unchanged files
    are skipped); `searcher` ranks pages for the hard negatives."""

    def __init__(self, folder: Path, embedder: TextEmbedder, show_progress: bool = False) -> None:
        self.store = Store(folder, create=True)
        self.searcher = HybridSearcher(self.store, embedder)
        self.show_progress = show_progress

    def ingest(self, paths: Iterable[Path | str]) -> list[IngestResult]:
        with Ingestor(self.store, show_progress=self.show_progress) as ingestor:
            return ingestor.ingest(paths)

    def close(self) -> None:
        self.store.close()
