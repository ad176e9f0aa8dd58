"""The decoder's perplexity as a selector, and the comparison tables of `reader_evals compare` and
`full-text`, on the tiny random Llama reader of test_reader (no weights beyond the SmolLM2 tokenizer)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_reader import (
    M,
    native_regions,
    pages,
    tiny_reader,
    tokenizer,  # noqa: F401 (the module-scoped fixture, used through `tok`)
)

from docrefrag.core.page import Word
from docrefrag.core.perplexity import PerplexitySelector, chunk_nll
from docrefrag.core.reader import ANSWER_SUFFIX
from docrefrag.core.selector import NoneSelector
from docrefrag.core.train_data import Example

QUESTION = "How many homes?"


@pytest.fixture(scope="module")
def tok(tokenizer):  # noqa: F811
    return tokenizer


def test_a_chunks_score_is_the_mean_nll_of_its_words_given_everything_before_them(tok):
    """Checked token by token: each token's log-probability from a forward pass over the text before it."""
    reader = tiny_reader(tok)
    _, regions = native_regions(reader, 2)
    with torch.no_grad():
        nll = chunk_nll(reader, QUESTION, regions)
        L = M // reader.config.k
        assert nll.shape == (2, L)
        ids = tok(f"Question: {QUESTION}\n", add_special_tokens=False)["input_ids"]
        spans = {}
        for i, page in enumerate(regions):
            ids += tok(f"Page {i + 1}:", add_special_tokens=False)["input_ids"]
            for j, region in enumerate(page):
                spans[i, j] = range(len(ids), len(ids) + len(region))
                ids += region
        for i, j in [(0, 0), (0, 4), (1, 7)]:
            by_hand = [-reader.decoder(input_ids=torch.tensor([ids[:t]])).logits[0, -1].log_softmax(-1)[ids[t]]
                       for t in spans[i, j]]
            assert float(nll[i, j]) == pytest.approx(float(torch.stack(by_hand).mean()), abs=1e-4)
        wordless = torch.tensor([[not r for r in page] for page in regions])
        assert torch.isnan(nll[wordless]).all() and not torch.isnan(nll[~wordless]).any()


@pytest.mark.parametrize("highest", [True, False])
def test_perplexity_selector_expands_the_least_or_most_predictable_chunks_with_words(tok, highest):
    reader = tiny_reader(tok)
    _, regions = native_regions(reader, 2)
    chunks = reader.chunks(pages(2))
    n, L = chunks.shape[:2]
    with torch.no_grad():
        nll = chunk_nll(reader, QUESTION, regions)
        selector = PerplexitySelector(reader, QUESTION, regions, highest=highest)
        expand = reader.select(QUESTION, chunks, 0.3, selector)
    assert int(expand.sum()) == math.floor(0.3 * n * L)
    worded = ~torch.isnan(nll)
    assert not (expand & ~worded).any()  # there are more chunks with words than the budget
    chosen, rest = nll[expand], nll[~expand & worded]
    assert (chosen.min() >= rest.max()) if highest else (chosen.max() <= rest.min())
    with pytest.raises(ValueError, match="one per reading"):
        selector.choose(torch.zeros(1), chunks[:1].reshape(L, *chunks.shape[2:]), 3)


class Labelled:
    """Expands exactly the labelled chunks of its reading."""

    def __init__(self, labels: list[tuple[int, int]], L: int) -> None:
        self.flat = torch.tensor(sorted(i * L + j for i, j in labels))

    def choose(self, question, chunks, T):
        return self.flat


def test_compare_gives_one_row_per_budget_and_selector_and_a_markdown_line_per_selector(tok):
    from docrefrag.evals.reader_compare import Reading, compare, compare_markdown

    reader = tiny_reader(tok)
    L = M // reader.config.k
    scored = []
    readings = []
    for s in range(3):
        _, regions = native_regions(reader, 2)
        ex = Example("qa", f"How many homes in row {s}?", [("d", 1), ("d", 2)], str(100 + s), labels=[(0, 1), (1, 4)])
        readings.append(Reading(ex, pages(2, seed=s), regions, lambda pred: scored.append(pred) or 0.5))
    factories = {"labelled": lambda r: Labelled(r.ex.labels, L), "none": lambda r: NoneSelector(),
                 "perplexity": lambda r: PerplexitySelector(reader, r.ex.prompt, r.regions)}
    rows = compare(reader, readings, factories, ps=(0.1, 0.2), answers=2, show_progress=False)

    assert [(r["p"], r["selector"]) for r in rows] == [(p, s) for p in (0.1, 0.2) for s in factories]
    by = {(r["p"], r["selector"]): r for r in rows}
    assert by[0.2, "labelled"]["recall"] == 1.0 and by[0.2, "none"]["recall"] == 0.0
    assert all(r["readings"] == 3 and r["answers"] == 2 and r["accuracy"] == 0.5 for r in rows)
    assert len(scored) == 2 * 2 * len(factories)  # the first `answers` readings, every (p, selector)
    with torch.no_grad():  # the log-likelihood is the reward of the selection's own built input
        first = reader.build(readings[0].ex.prompt, reader.chunks(readings[0].tokens),
                             torch.zeros(2, L, dtype=torch.bool), readings[0].regions, ANSWER_SUFFIX)
        second = reader.build(readings[1].ex.prompt, reader.chunks(readings[1].tokens),
                              torch.zeros(2, L, dtype=torch.bool), readings[1].regions, ANSWER_SUFFIX)
        expected = np.mean([reader.answer_reward(first, "100"), reader.answer_reward(second, "101")])
    assert by[0.1, "none"]["answer_logprob"] == pytest.approx(expected, abs=1e-3)
    assert by[0.1, "perplexity"]["select_ms_p50"] > 0

    table = compare_markdown(rows).splitlines()
    assert table[2].startswith("| selector | recall p=0.1 | recall p=0.2 | log-lik. p=0.1")
    assert [line.split(" | ")[0] for line in table[4:]] == ["| labelled", "| none", "| perplexity"]
    assert table[4].split(" | ")[2] == "1.000 ± 0.000"


def test_full_text_reads_the_same_top_pages_as_the_reader_and_tables_both(tok):
    from docrefrag.evals.reader_compare import full_text, full_text_embeds, full_text_markdown

    reader = tiny_reader(tok)
    record = SimpleNamespace(width=60.0, height=60.0, words=[Word(f"homes{c}", 10 * c + 1, 10 * r + 1, 10 * c + 9,
                                                                  10 * r + 9, r) for r in range(6) for c in range(6)])
    text = {1: "Homes: 120 in the north.", 2: "Offices: 45.", 3: "Nothing here."}

    class Pages:  # the store's `store.pages`
        def stacked_tokens(self, keys):
            return pages(len(keys)).numpy()

        def get(self, doc_id, page):
            return record

        def markdown(self, doc_id, page):
            return text[page]

    class Searcher:
        def candidates(self, question, doc_ids, k):
            assert doc_ids == ["doc-1"]
            return SimpleNamespace(ranked=lambda method: [("doc-1", 3), ("doc-1", 1), ("doc-1", 2)])

    questions = [SimpleNamespace(qid=f"q{i}", question=QUESTION, answer="120", doc_name="a.pdf", evidence_pages=(1,))
                 for i in range(2)]
    rows = full_text(reader, SimpleNamespace(pages=Pages()), Searcher(), questions, {"a.pdf": "doc-1"},
                     lambda q, pred: float(pred == q.answer), pages=2, show_progress=False)

    assert [r["pages"] for r in rows] == [[3, 1], [3, 1]] and all(r["evidence_read"] for r in rows)
    with torch.no_grad():
        assert rows[0]["full text"]["tokens"] == full_text_embeds(reader, QUESTION, [text[3], text[1]]).shape[0]
    for r in rows:
        for mode in ("reader", "full text", "full text, no LoRA"):
            assert r[mode]["ttft_s"] > 0 and r[mode]["score"] in (0.0, 1.0) and isinstance(r[mode]["pred"], str)
    table = full_text_markdown(rows).splitlines()
    assert table[0] == "questions: 2; an evidence page among the pages read: 2"
    assert [line.split(" | ")[0] for line in table[4:]] == ["| full text", "| full text, no LoRA", "| reader"]
    assert table[4].endswith("| 1.00x |")


def test_a_selector_checkpoint_over_other_page_tokens_is_refused_naming_both(tok):
    from docrefrag.core.reader import DEFAULT_CHECKPOINT
    from docrefrag.evals.reader_compare import checkpoint_selector

    with pytest.raises(ValueError, match="reads other chunks than the reader.*same page encoder"):
        checkpoint_selector(DEFAULT_CHECKPOINT, tiny_reader(tok))
