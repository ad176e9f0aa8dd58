"""From page tokens to the decoder's input space: the compressed form of a chunk.

`ChunkProjector`: a chunk of k consecutive grid tokens -> one embedding (a 2-layer MLP from k*d to
the decoder's hidden size). It reads tokens after the reader's LayerNorm (the encoder's alignment
layer), so the text, visual and position parts of a token, which live on very different scales,
reach the MLP comparably. An expanded chunk needs no projection: it is the decoder's own token
embeddings of its region's words (`reader.DocRefragReader.build`).
"""

from __future__ import annotations

import torch
from torch import nn

from docrefrag.core.config import ReaderConfig


class ChunkProjector(nn.Module):
    def __init__(self, config: ReaderConfig) -> None:
        super().__init__()
        self.k, self.dim = config.k, config.token_dim
        self.net = nn.Sequential(nn.Linear(config.k * config.token_dim, config.projector_hidden), nn.GELU(),
                                 nn.Linear(config.projector_hidden, config.hidden))

    def forward(self, chunks: torch.Tensor) -> torch.Tensor:
        """(..., k, d) normalised tokens -> (..., hidden)."""
        if chunks.shape[-2:] != (self.k, self.dim):
            raise ValueError(f"ChunkProjector expects (..., {self.k}, {self.dim}) chunks, got {tuple(chunks.shape)}")
        return self.net(chunks.flatten(-2))  # (..., k*d) -> (..., hidden)
