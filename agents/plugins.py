"""Loading a team's own code by configuration: "package.module:name" -> that object (a graph node,
a tool factory, a chat-model factory)."""

from __future__ import annotations

import importlib
from typing import Any


def load_object(path: str, form: str = "package.module:function") -> Any:
    """The object `path` ("package.module:name") names; ValueError saying what was expected otherwise.
    `form` is how the expected path is spelled in the message (e.g. "package.module:factory")."""
    module, _, name = path.partition(":")
    if not module or not name.isidentifier():
        raise ValueError(f"expected {form!r}, got {path!r}")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot import {path!r} (expected {form!r}): {e}") from e
