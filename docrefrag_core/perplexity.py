"""The decoder's perplexity as a chunk selector: REFRAG's heuristic baseline for the learned policy.

REFRAG (Lin et al., 2025, the RL selective-compression experiments) sets its RL policy against random
and against heuristics that rank the context's chunks by the decoder's perplexity of their own tokens
and expand the chunks at one end of that order: the least predictable first (text the decoder could
not guess is what a compressed embedding would lose) or the most predictable first. Here a chunk's
text is the words of its region (`DocRefragReader.region_ids`); the decoder (the reader's, with its
LoRA) reads the reader's question prefix and every page's words in chunk order, one forward pass, and
a chunk's score is the mean negative log-likelihood of its tokens given everything before them (the
log of its perplexity). A chunk without words has no text: it ranks after every chunk with words
(the reader could not expand it anyway). The policy costs one full-text prefill per reading, more
than the reading it selects for: a baseline to measure the selector against, not a policy for `ask`
(docs/decisions/selector.md).
"""

from __future__ import annotations

import torch

from docrefrag.core.selector import top_t

SLICE = 512  # positions per log-softmax over the vocabulary (a long page text has large logits)


@torch.no_grad()
def chunk_nll(reader, question: str, regions: list[list[list[int]]]) -> torch.Tensor:
    """(n, L) mean negative log-likelihood of each chunk's region tokens, the decoder reading
    "Question: ...\\nPage 1:" and the pages' region tokens in chunk order; NaN for a chunk without words."""
    n, L = len(regions), len(regions[0]) if regions else 0
    tok = reader.tokenizer
    ids = tok(f"Question: {question}\n", add_special_tokens=False)["input_ids"]
    owner = [-1] * len(ids)  # flat chunk index i * L + j of each position, -1 for the prompt's text
    for i, page in enumerate(regions):
        if len(page) != L:
            raise ValueError(f"every page needs {L} chunks' token ids, page {i + 1} has {len(page)}")
        sep = tok(f"Page {i + 1}:", add_special_tokens=False)["input_ids"]
        ids, owner = ids + sep, owner + [-1] * len(sep)
        for j, region in enumerate(page):
            ids, owner = ids + list(region), owner + [i * L + j] * len(region)
    dev = reader.norm.weight.device
    x = torch.tensor(ids, device=dev)  # (S,)
    logits = reader.decoder(input_ids=x[None]).logits[0, :-1]  # (S-1, vocab): position s predicts x[s + 1]
    nll = torch.cat([-logits[s:s + SLICE].log_softmax(-1).gather(1, x[s + 1:s + 1 + SLICE, None]).squeeze(1)
                     for s in range(0, logits.shape[0], SLICE)])  # (S-1,)
    who = torch.tensor(owner[1:], device=dev)  # (S-1,) the chunk of each predicted token
    keep = who >= 0
    sums = torch.zeros(n * L, device=dev).index_add_(0, who[keep], nll[keep])  # (n*L,)
    counts = torch.zeros(n * L, device=dev).index_add_(0, who[keep], torch.ones_like(nll[keep]))  # (n*L,)
    return (sums / counts).reshape(n, L).cpu()  # 0/0 = NaN where a chunk has no words


class PerplexitySelector:
    """The `Selector` of one reading (its question and pages' region token ids): the top T chunks by the
    decoder's perplexity of their text, the highest first (`highest=True`) or the lowest. The scores are
    computed on the first `choose` and kept for the reading's other budgets."""

    def __init__(self, reader, question: str, regions: list[list[list[int]]], highest: bool = True) -> None:
        self.reader, self.question, self.regions, self.highest = reader, question, regions, highest
        self.scores: torch.Tensor | None = None  # (n * L,) higher = expanded first; -inf without words

    def choose(self, question: torch.Tensor, chunks: torch.Tensor, T: int) -> torch.Tensor:
        if self.scores is None:
            nll = chunk_nll(self.reader, self.question, self.regions).flatten()  # (n * L,)
            self.scores = (nll if self.highest else -nll).nan_to_num(nan=float("-inf"))
        if chunks.shape[0] != self.scores.numel():
            raise ValueError(f"this PerplexitySelector scores the {self.scores.numel()} chunks of its reading's "
                             f"pages, got {chunks.shape[0]} chunks; build one per reading")
        return top_t(self.scores, T)
