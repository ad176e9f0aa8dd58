"""When the chat model writes a part of the plan (the HyDE passage, the sub-queries): a module of its own
so that the CLI offers the modes without importing the graph."""

from typing import Literal

PlanMode = Literal["disagreement", "always", "never"]
PLAN_MODES: tuple[PlanMode, ...] = ("disagreement", "always", "never")
