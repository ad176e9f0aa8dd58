"""Structured data passed between agents (pydantic models; JSON-serialisable for checkpoints)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

EvidenceType = Literal["text", "table", "chart", "figure", "layout"]


class Plan(BaseModel):
    """Retrieval intents for one question."""

    sub_queries: list[str] = Field(default_factory=list, description="self-contained questions, one per fact needed")
    keywords: list[str] = Field(default_factory=list, description="terms for the sparse (BM25) branch")
    entities: list[str] = Field(default_factory=list, description="names and numbers in the question")
    visual_anchors: list[str] = Field(default_factory=list, description='e.g. "Table 4", "the chart titled ..."')
    evidence_types: list[EvidenceType] = Field(default_factory=list)
    hyde: str = Field(default="", description="a hypothetical passage of the page that answers (dense branch)")


class Citation(BaseModel):
    doc_id: str
    page: int  # 1-based
    bbox: tuple[float, float, float, float] | None = None  # PDF points, origin top-left
    snippet: str = ""


class Claim(BaseModel):
    text: str
    citations: list[Citation] = Field(default_factory=list)


class Verdict(BaseModel):
    supported: bool
    confidence: float = Field(ge=0.0, le=1.0)
    missing: str = Field(default="", description="what the evidence lacks, for the query rewrite")
