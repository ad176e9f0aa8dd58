"""The layout-grid page encoder and the contextual text embedder, with the real MiniLM, on pages
generated with PyMuPDF and parsed by indexes.pages.
"""

from __future__ import annotations

import random

import numpy as np
import pymupdf
import pytest

from docrefrag.core.chunking import chunk_box, merge_chunks, retrieval_vectors, split_chunks
from docrefrag.core.page import Block, PageInput
from docrefrag.core.page_encoder import VISUAL_FEATURES, grid_positions
from docrefrag.indexes.pages import DocSource, PageParser, ParsedPage

W, H, G = 595.0, 842.0, 18
CW, CH = W / G, H / G
RECT_CELLS = (12, 16, 2, 6)  # rows 12..15, columns 2..5
RECT = pymupdf.Rect(RECT_CELLS[2] * CW, RECT_CELLS[0] * CH, RECT_CELLS[3] * CW, RECT_CELLS[1] * CH)


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> tuple[ParsedPage, ParsedPage]:
    """The same words on two A4 pages; the second also has a dark filled rectangle on RECT_CELLS."""
    path = tmp_path_factory.mktemp("encoder") / "grid.pdf"
    with pymupdf.open() as doc:
        for filled in (False, True):
            page = doc.new_page(width=W, height=H)
            page.insert_text((4, 14), "Top", fontsize=10)  # cell 0
            page.insert_text((200, 400), "Quarterly harbour traffic rose sharply this spring", fontsize=11)
            page.insert_text((572, 838), "End", fontsize=8)  # cell 323
            if filled:
                page.draw_rect(RECT, color=(0.1, 0.1, 0.1), fill=(0.1, 0.1, 0.1))
        doc.save(path)
    parser = PageParser(DocSource("pdf", path))
    try:
        plain, filled = parser.parse(0), parser.parse(1)
    finally:
        parser.close()
    assert plain.error is None and not plain.ocr and filled.error is None and not filled.ocr
    return plain, filled


def assert_same_states(a: np.ndarray, b: np.ndarray) -> None:
    """Row-wise equal up to the embedder's precision: in bfloat16 (used on CPUs that support it) a
    window's states move slightly with the padding of its batch (cosine 0.9999, |diff| up to 0.03)."""
    assert a.shape == b.shape
    cosine = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    assert cosine.min() > 0.999, cosine.min()


def cell_of(word) -> int:
    col = min(int((word.x0 + word.x1) / 2 / CW), G - 1)
    row = min(int((word.y0 + word.y1) / 2 / CH), G - 1)
    return row * G + col


def feature(encoder, tokens: np.ndarray, name: str) -> np.ndarray:
    """(m,) one visual feature of every cell."""
    return tokens[:, encoder.text_dim + VISUAL_FEATURES.index(name)]


def rect_cells(margin: int = 0) -> set[int]:
    r0, r1, c0, c1 = RECT_CELLS
    return {r * G + c for r in range(r0 - margin, r1 + margin) for c in range(c0 - margin, c1 + margin)}


def test_tokens_are_in_raster_order(pages, encoder, embedder):
    page, _ = pages
    out = encoder.encode(page.to_input())
    assert out.tokens.shape == (324, encoder.dim) and out.tokens.dtype == np.float32
    assert encoder.m == 324 and encoder.dim == encoder.text_dim + len(VISUAL_FEATURES) + 16
    assert out.word_counts.shape == (324,)
    words = {w.text: w for w in page.words}
    assert cell_of(words["Top"]) == 0 and cell_of(words["End"]) == 323
    np.testing.assert_array_equal(out.word_counts, np.bincount([cell_of(w) for w in page.words], minlength=324))
    assert out.word_counts[0] == 1 and out.word_counts[323] == 1

    # a cell's text state is the mean contextual state of its words; empty cells are zero
    assert [w.text for w in page.words if w.block == words["Top"].block] == ["Top"]
    top_state = embedder.word_states([["Top"]])[0][0]  # (text_dim,)
    assert_same_states(out.tokens[0, : encoder.text_dim], top_state)
    empty = out.word_counts == 0
    assert not out.tokens[empty, : encoder.text_dim].any()
    assert np.abs(out.tokens[~empty, : encoder.text_dim]).sum(axis=1).min() > 0
    # positions: sinusoids of row and column, in raster order
    np.testing.assert_allclose(out.tokens[:, -16:], grid_positions(G, 4))


def test_filled_rectangle_changes_the_visual_features_of_its_cells(pages, encoder):
    plain, filled = pages
    a = encoder.encode(plain.to_input()).tokens
    b = encoder.encode(filled.to_input()).tokens
    np.testing.assert_allclose(a[:, : encoder.text_dim], b[:, : encoder.text_dim], atol=1e-6)  # same words
    visual = slice(encoder.text_dim, encoder.text_dim + len(VISUAL_FEATURES))
    changed = set(np.flatnonzero(np.abs(a[:, visual] - b[:, visual]).max(axis=1) > 1e-3))
    assert rect_cells() <= changed <= rect_cells(margin=1)
    inside = sorted(rect_cells())
    assert feature(encoder, b, "ink")[inside].min() > 0.8 and feature(encoder, a, "ink")[inside].max() < 0.01
    assert feature(encoder, b, "dark")[inside].min() > 0.9

    # drawing cover comes from the page's "drawing" blocks
    with_block = filled.to_input()
    with_block.blocks = [*with_block.blocks, Block("drawing", *RECT)]
    cover = feature(encoder, encoder.encode(with_block).tokens, "drawing_cover")
    np.testing.assert_allclose(cover[inside], 1.0, atol=1e-6)
    outside = sorted(set(range(324)) - rect_cells())
    np.testing.assert_allclose(cover[outside], 0.0, atol=1e-6)


def test_parser_reports_the_filled_rectangle_as_a_drawing(pages):
    _, filled = pages
    drawings = [b for b in filled.blocks if b.kind in ("drawing", "figure")]
    assert drawings and any(pymupdf.Rect(b.x0, b.y0, b.x1, b.y1).intersects(RECT) for b in drawings)


def test_blank_page_has_no_text_and_no_retrieval_vectors(encoder):
    blank = PageInput(W, H, [], [], np.full((200, 140, 3), 255, np.uint8))
    out = encoder.encode(blank)
    assert out.tokens.shape == (324, encoder.dim) and not out.word_counts.any()
    assert not out.tokens[:, : encoder.text_dim].any()
    assert np.abs(feature(encoder, out.tokens, "ink")).max() == 0.0
    pooled, vectors, ids = retrieval_vectors(out.tokens, out.word_counts, encoder.text_dim, 3)
    assert vectors.shape == (0, encoder.text_dim) and ids.shape == (0,) and not pooled.any()


def test_retrieval_vectors_are_unit_vectors_of_chunks_with_words(pages, encoder):
    page, _ = pages
    out = encoder.encode(page.to_input())
    pooled, vectors, ids = retrieval_vectors(out.tokens, out.word_counts, encoder.text_dim, 3)
    words_per_chunk = out.word_counts.reshape(108, 3).sum(axis=1)
    np.testing.assert_array_equal(ids, np.flatnonzero(words_per_chunk > 0))
    assert 0 in ids and 107 in ids  # the chunks holding "Top" and "End"
    assert vectors.shape == (len(ids), encoder.text_dim) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.linalg.norm(pooled) == pytest.approx(1.0, abs=1e-5)
    # chunk 0 holds only "Top": its vector is that cell's normalised text state
    state = out.tokens[0, : encoder.text_dim]
    np.testing.assert_allclose(vectors[0], state / np.linalg.norm(state), atol=1e-5)


def test_split_and_merge_chunks_round_trip(pages, encoder):
    tokens = encoder.encode(pages[0].to_input()).tokens
    for k in (1, 2, 3, 4, 6):
        chunks = split_chunks(tokens, k)
        assert chunks.shape == (324 // k, k, encoder.dim)
        np.testing.assert_array_equal(chunks[5], tokens[5 * k: 5 * k + k])
        np.testing.assert_array_equal(merge_chunks(chunks), tokens)
    with pytest.raises(ValueError, match="k=5"):
        split_chunks(tokens, 5)


def test_chunk_box(pages):
    assert chunk_box(0, 3, G, W, H) == pytest.approx((0.0, 0.0, 3 * CW, CH))
    top = {w.text: w for w in pages[0].words}["Top"]
    x0, y0, x1, y1 = chunk_box(0, 3, G, W, H)
    assert x0 <= (top.x0 + top.x1) / 2 <= x1 and y0 <= (top.y0 + top.y1) / 2 <= y1
    assert chunk_box(107, 3, G, W, H) == pytest.approx((15 * CW, 17 * CH, W, H))
    assert chunk_box(4, 4, G, W, H) == pytest.approx((0.0, 0.0, W, 2 * CH))  # cells 16..19 wrap a row


# ---------------------------------------------------------------------- the text embedder


def test_word_states_one_vector_per_word(embedder):
    blocks = [["Quarterly", "harbour", "traffic"], ["rose"], ["unbelievably", "sharply", "this", "spring"]]
    states = embedder.word_states(blocks)
    assert [s.shape for s in states] == [(3, embedder.dim), (1, embedder.dim), (4, embedder.dim)]
    assert all(s.dtype == np.float32 and np.isfinite(s).all() and (np.abs(s).sum(axis=1) > 0).all() for s in states)
    # batching and padding do not change a block's states
    for block, batched in zip(blocks, states, strict=True):
        assert_same_states(embedder.word_states([block])[0], batched)


def test_word_states_of_a_block_longer_than_the_window(embedder):
    rng = random.Random(0)
    vocab = ("harbour traffic committee reviewed programme targets delivery regional statistics audited "
             "independent estimates appendix capacity passengers treated megalitres clinic graduates").split()
    words = [rng.choice(vocab) for _ in range(300)]
    enc = embedder.tokenizer(words, is_split_into_words=True, add_special_tokens=False)
    assert len(enc["input_ids"]) > 2 * embedder.max_tokens  # three windows at least
    (states,) = embedder.word_states([words])
    assert states.shape == (300, embedder.dim)
    assert np.isfinite(states).all() and (np.abs(states).sum(axis=1) > 0).all()
    # windows are cut at word boundaries, at most max_tokens - 2 pieces each ([CLS] and [SEP]):
    # the words of one window get the states they get when embedded alone
    per_word = np.bincount(enc.word_ids(), minlength=300)  # (300,) pieces per word
    ends = []
    start = 0
    while start < 300:
        fits = np.flatnonzero(np.cumsum(per_word[start:]) <= embedder.max_tokens - 2)
        ends.append(start + int(fits[-1]) + 1)
        start = ends[-1]
    assert len(ends) >= 3
    for begin, end in zip([0, *ends[:-1]], ends, strict=True):
        (alone,) = embedder.word_states([words[begin:end]])
        assert_same_states(states[begin:end], alone)


def test_word_state_depends_on_context(embedder):
    river, money = embedder.word_states([["the", "river", "bank", "was", "muddy"],
                                         ["the", "bank", "approved", "the", "loan"]])
    a, b = river[2], money[1]  # "bank" in each
    cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert cosine < 0.95
    (alone,) = embedder.word_states([["the", "river", "bank", "was", "muddy"]])
    assert_same_states(alone, river)  # same sentence, same states
