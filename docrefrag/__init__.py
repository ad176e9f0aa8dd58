"""docrefrag: question answering over long, visually rich documents."""

from docrefrag.api import DocRefrag, default_store

__all__ = ["DocRefrag", "default_store"]
