"""Which chunks to expand: the question-guided selector and its baselines, behind one interface.

A selector scores every chunk of the n pages being read; the reader expands the top
T = floor(p * n * L) chunks into their regions' words and keeps the rest compressed.

- `ChunkSelector` (the learned policy): a 2-layer transformer encoder (d = 256, 8 heads) over the
  question embedding and one vector per chunk (the mean of its normalised tokens); a linear head
  gives one logit per chunk, added to a learned multiple of the chunk's question similarity (the
  similarity baseline's score, `question_similarity`). The head starts at zero, so the untrained
  policy is similarity, which reads pages of every kind, and training learns what to add (without
  it the selector learned the training generator's pages and fell below similarity on real PDFs:
  docs/decisions/selector.md). Inference takes the deterministic top-T; the warm start fits its
  softmax to the chunk labels; GRPO samples T chunks without replacement (Gumbel top-k, i.e.
  Plackett-Luce) and scores each draw's log-probability.
- `RandomSelector`, `SimilaritySelector` (question-token cosine over the fine tokens, the costly
  oracle), `NoneSelector` (all compressed) and `AllSelector` (all expanded).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import nn

from docrefrag.core.config import ReaderConfig


def budget(p: float, n_pages: int, chunks_per_page: int) -> int:
    """T = floor(p * n * L), the number of chunks expanded."""
    return int(math.floor(p * n_pages * chunks_per_page + 1e-9))


def candidates(present: torch.Tensor | None, n: int, L: int) -> torch.Tensor:
    """The flat indices (into n * L) of the chunks a selector chooses among: those of the decoder's input
    (`DocRefragReader.present`; None: all)."""
    return torch.arange(n * L) if present is None else present.flatten().nonzero().flatten()


class Selector(Protocol):
    def choose(self, question: torch.Tensor, chunks: torch.Tensor, T: int) -> torch.Tensor:
        """question (question_dim,), chunks (N, k, d) normalised tokens -> sorted indices (T,) of the
        chunks to expand."""
        ...


class ChunkSelector(nn.Module):
    def __init__(self, config: ReaderConfig) -> None:
        super().__init__()
        d = config.selector_dim
        self.question_in = nn.Linear(config.question_dim, d)
        self.chunk_in = nn.Linear(config.token_dim, d)
        layer = nn.TransformerEncoderLayer(d, config.selector_heads, config.selector_ff, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.selector_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 1)
        nn.init.zeros_(self.head.weight)  # untrained, the policy is the similarity baseline
        nn.init.zeros_(self.head.bias)
        self.text_dim = config.question_dim  # a token's text part shares the question's embedding space
        self.prior = nn.Parameter(torch.tensor(config.selector_prior))  # logits per unit of similarity

    def forward(self, question: torch.Tensor, chunks: torch.Tensor) -> torch.Tensor:
        """question (question_dim,), chunks (N, k, d) -> logits (N,)."""
        if chunks.ndim != 3 or question.ndim != 1:
            raise ValueError(f"ChunkSelector expects question (q,) and chunks (N, k, d), got "
                             f"{tuple(question.shape)} and {tuple(chunks.shape)}")
        q = self.question_in(question)[None, None]  # (1, 1, d_sel)
        c = self.chunk_in(chunks.mean(dim=1))[None]  # (1, N, d_sel)
        h = self.encoder(torch.cat([q, c], dim=1))  # (1, 1+N, d_sel)
        return self.head(h[0, 1:]).squeeze(-1) + self.prior * question_similarity(question, chunks, self.text_dim)

    @torch.no_grad()
    def choose(self, question: torch.Tensor, chunks: torch.Tensor, T: int) -> torch.Tensor:
        return top_t(self(question, chunks), T)


def top_t(scores: torch.Tensor, T: int) -> torch.Tensor:
    """Indices of the T highest scores, in sequence order."""
    T = min(max(T, 0), scores.numel())
    return torch.sort(torch.topk(scores, T).indices).values


def sample_selection(logits: torch.Tensor, T: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """T distinct indices drawn without replacement from softmax(logits) (Gumbel top-k), in draw order, on
    the logits' device (`generator` is a CPU generator, so a seed gives the same draw on any device)."""
    u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype).to(logits.device).clamp_(1e-9, 1 - 1e-9)
    gumbel = -torch.log(-torch.log(u))  # (N,)
    return torch.topk(logits.detach() + gumbel, T).indices  # (T,) in draw order


def draw_log_probs(logits: torch.Tensor, selection: torch.Tensor) -> torch.Tensor:
    """(T,) log-probabilities of each draw of `selection` (in its order) given the draws before it: their
    sum is the Plackett-Luce log-probability of the whole draw without replacement."""
    dev = logits.device
    selection = selection.to(dev)
    T = selection.numel()
    chosen = logits[selection]  # (T,)
    taken = torch.zeros(T, logits.numel(), dtype=torch.bool, device=dev)  # (T, N): drawn before step t
    if T > 1:
        rows = torch.arange(1, T, device=dev).repeat_interleave(torch.arange(1, T, device=dev),
                                                                output_size=T * (T - 1) // 2)  # no device sync
        cols = selection[torch.cat([torch.arange(t, device=dev) for t in range(1, T)])]
        taken[rows, cols] = True
    remaining = logits[None].masked_fill(taken, float("-inf"))  # (T, N)
    return chosen - torch.logsumexp(remaining, dim=1)  # (T,)


class RandomSelector:
    def __init__(self, seed: int = 0) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def choose(self, question: torch.Tensor, chunks: torch.Tensor, T: int) -> torch.Tensor:
        return top_t(torch.rand(chunks.shape[0], generator=self.generator), T)


def question_similarity(question: torch.Tensor, chunks: torch.Tensor, text_dim: int) -> torch.Tensor:
    """(N,) the best cosine between the question and any of a chunk's fine tokens' text part (the
    question embedding and the text states share the embedder's space)."""
    text = nn.functional.normalize(chunks[..., :text_dim], dim=-1)  # (N, k, text_dim)
    q = nn.functional.normalize(question[:text_dim], dim=0)  # (text_dim,)
    return (text @ q).amax(dim=1)  # (N, k) -> (N,)


class SimilaritySelector:
    """Score a chunk by its question similarity alone."""

    def __init__(self, text_dim: int) -> None:
        self.text_dim = text_dim

    def choose(self, question: torch.Tensor, chunks: torch.Tensor, T: int) -> torch.Tensor:
        return top_t(question_similarity(question, chunks, self.text_dim), T)


class NoneSelector:
    def choose(self, question: torch.Tensor, chunks: torch.Tensor, T: int) -> torch.Tensor:
        return torch.zeros(0, dtype=torch.long)


class AllSelector:
    def choose(self, question: torch.Tensor, chunks: torch.Tensor, T: int) -> torch.Tensor:
        return torch.arange(chunks.shape[0])
