"""docrefrag: question answering over long, visually rich documents.

The package is imported by every layer below the face (`docrefrag.core` is installed under it), so
importing it does no work: `DocRefrag` and `default_store` load `docrefrag.api` (and through it the
indexes) on first use, and `import docrefrag.core.reader` loads the model code alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docrefrag.api import DocRefrag, default_store

__all__ = ["DocRefrag", "default_store"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from docrefrag import api

        return getattr(api, name)
    raise AttributeError(f"module 'docrefrag' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
