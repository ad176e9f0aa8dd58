"""Ingestion of one page: PDF page or page image -> words with boxes, blocks, markdown, render.

Per page: a render at 144 dpi (JPEG, cached in the store), the text layer's words with boxes,
markdown with tables (pymupdf4llm), layout blocks (text, table, figure, drawing) with boxes. A page
without a usable text layer is OCRed with RapidOCR. Coordinates are PDF points, origin top-left;
a page image counts as a 144 dpi render (1 px = 0.5 pt).
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

from docrefrag.core.page import Block, PageInput, Word
from docrefrag.core.pdf import pymupdf
from docrefrag.indexes.errors import IngestError

logger = logging.getLogger(__name__)

RENDER_DPI = 144
MAX_RENDER_SIDE = 4000  # px; larger pages are rendered at a lower dpi so memory stays bounded
MIN_TEXT_WORDS = 5  # fewer alphanumeric words than this and the page is OCRed
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
CHUNK_WORDS = (40, 160)  # BM25 chunks: merge blocks up to the first bound, split beyond the second

_WORDY = re.compile(r"\w", re.UNICODE)


@dataclass(frozen=True)
class DocSource:
    """Where a document's pages come from: a PDF file or a folder of page images."""

    kind: Literal["pdf", "images"]
    path: Path
    files: tuple[Path, ...] = ()  # page images in page order (kind == "images")

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class TextChunk:
    text: str
    bbox: tuple[float, float, float, float]


@dataclass
class ParsedPage:
    page: int  # 1-based
    width: float
    height: float
    words: list[Word]
    blocks: list[Block]
    markdown: str
    chunks: list[TextChunk]
    ocr: bool
    render_jpeg: bytes
    image: np.ndarray  # (H, W, 3) uint8
    error: str | None = None
    timings: dict = field(default_factory=dict)

    def to_input(self) -> PageInput:
        return PageInput(self.width, self.height, self.words, self.blocks, self.image)


def failed_page(page: int, reason: str) -> ParsedPage:
    """The record of a page that could not be parsed: no content, the reason and the remedy."""
    return ParsedPage(page, 1.0, 1.0, [], [], "", [], False, b"", np.zeros((1, 1, 3), np.uint8),
                      error=f"{reason}; fix or replace the page and rerun the ingest to retry it")


def page_number(path: Path) -> int:
    """The page number in an image's file name (the last number in the stem)."""
    numbers = re.findall(r"\d+", path.stem)
    if not numbers:
        raise IngestError(f"{path}: page images must carry their page number in the file name (e.g. page_3.png)")
    return int(numbers[-1])


def image_folder_source(folder: Path) -> DocSource:
    files = sorted((p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES), key=page_number)
    if not files:
        raise IngestError(f"{folder}: no PNG/JPEG page images in this folder; "
                          "point ingest at PDFs or at a folder of page images")
    numbers = [page_number(p) for p in files]
    if len(set(numbers)) != len(numbers):
        raise IngestError(f"{folder}: two page images carry the same page number; rename them so each is unique")
    return DocSource("images", folder, tuple(files))


def open_page_image(path: Path) -> Image.Image:
    """A page image file as RGB; ValueError, naming the file and the remedy, when it cannot be read."""
    try:
        with Image.open(path) as im:
            im.load()
            return im.convert("RGB")
    except Exception as e:  # PIL raises several types for unreadable input
        raise ValueError(f"{path.name} is not a readable image ({e}); re-export it as PNG or JPEG") from e


def open_pdf(path: Path) -> pymupdf.Document:
    """Open a PDF or raise IngestError with a one-line reason and a remedy."""
    if not path.is_file():
        raise IngestError(f"{path}: no such file; check the path")
    if path.stat().st_size == 0:
        raise IngestError(f"{path}: the file is empty (0 bytes); re-export or re-download it")
    try:
        doc = pymupdf.open(path, filetype="pdf")
    except Exception as e:  # PyMuPDF raises several types for unreadable input
        raise IngestError(f"{path}: not a readable PDF ({e}); "
                          "repair or re-export it (e.g. `qpdf in.pdf out.pdf`)") from e
    if doc.needs_pass:
        doc.close()
        raise IngestError(f"{path}: the PDF is encrypted; "
                          "decrypt it first (e.g. `qpdf --decrypt --password=PW in.pdf out.pdf`)")
    if doc.page_count == 0:
        doc.close()
        raise IngestError(f"{path}: the PDF has no pages; re-export it from its source application")
    return doc


def inspect_source(source: DocSource) -> tuple[int, str]:
    """(page count, a warning for the user or ""); raises IngestError for an unusable document."""
    if source.kind == "images":
        numbers = [page_number(p) for p in source.files]
        gaps = numbers != list(range(numbers[0], numbers[0] + len(numbers)))
        warning = (f"the page numbers in the file names are not consecutive ({numbers[0]}..{numbers[-1]} for "
                   f"{len(numbers)} images); pages are numbered 1..{len(numbers)} in file-name order, so add the "
                   "missing pages if citations must match the original numbering") if gaps else ""
        return len(source.files), warning
    with open_pdf(source.path) as doc:
        warning = ("the PDF was damaged and PyMuPDF repaired it, so pages may be incomplete; "
                   "re-export it if content is missing") if doc.is_repaired else ""
        return doc.page_count, warning


class PageParser:
    """Parses pages of one document; keeps the document open between pages (one per worker)."""

    def __init__(self, source: DocSource) -> None:
        self.source = source
        self._doc = open_pdf(source.path) if source.kind == "pdf" else None
        self._headers = None

    def close(self) -> None:
        if self._doc is not None:
            self._doc.close()

    def parse(self, index: int) -> ParsedPage:
        """Parse page `index` (0-based). Errors of this page are recorded, not raised."""
        try:
            if self._doc is not None:
                return self._parse_pdf_page(index)
            return self._parse_image_page(index)
        except Exception as e:  # a broken page must not stop the document
            logger.warning("page %d of %s failed: %s", index + 1, self.source.path, e)
            return failed_page(index + 1, f"page {index + 1} could not be parsed ({e})")

    def _parse_pdf_page(self, index: int) -> ParsedPage:
        page = self._doc[index]
        width, height = page.rect.width, page.rect.height
        dpi = min(RENDER_DPI, int(MAX_RENDER_SIDE * 72 / max(width, height, 1.0)))
        pix = page.get_pixmap(dpi=max(dpi, 18), colorspace=pymupdf.csRGB, alpha=False)
        image = np.frombuffer(pix.samples, dtype=np.uint8).reshape(pix.h, pix.w, 3).copy()
        raw = page.get_text("words")
        words = [Word(w[4], w[0], w[1], w[2], w[3], int(w[5])) for w in raw]
        if sum(1 for w in words if _WORDY.search(w.text)) >= MIN_TEXT_WORDS:
            ocr = False
            markdown, layout_blocks = self._markdown(index)
            blocks = _text_blocks(words) + layout_blocks
        else:
            ocr = True
            words = _ocr(image, scale=width / pix.w)
            blocks = _text_blocks(words) + _image_blocks(page)
            markdown = _plain_markdown(words)
        return ParsedPage(index + 1, width, height, words, blocks, markdown, _chunks(words), ocr,
                          pix.tobytes("jpeg", jpg_quality=88), image)

    def _markdown(self, index: int) -> tuple[str, list[Block]]:
        import pymupdf4llm

        pymupdf4llm.use_layout(False)  # the layout model costs ~1 s/page on 2 cores; legacy mode ~0.2 s
        if self._headers is None:
            pages = list(range(min(self._doc.page_count, 100)))
            self._headers = pymupdf4llm.IdentifyHeaders(self._doc, pages=pages)
        strategy = "lines_strict" if _has_ruling_grid(self._doc[index]) else None
        chunk = pymupdf4llm.to_markdown(self._doc, pages=[index], hdr_info=self._headers, page_chunks=True,
                                        show_progress=False, ignore_images=True, graphics_limit=5000,
                                        table_strategy=strategy)[0]
        page = self._doc[index]
        blocks = [Block("table", *t["bbox"]) for t in chunk.get("tables", [])]
        blocks += _image_blocks(page)
        blocks += [Block("drawing", *r) for r in page.cluster_drawings()]
        return chunk["text"].strip(), blocks

    def _parse_image_page(self, index: int) -> ParsedPage:
        rgb = open_page_image(self.source.files[index])
        scale = 72 / RENDER_DPI
        if max(rgb.size) > MAX_RENDER_SIDE:
            factor = MAX_RENDER_SIDE / max(rgb.size)
            scale /= factor
            rgb = rgb.resize((int(rgb.width * factor), int(rgb.height * factor)), Image.Resampling.LANCZOS)
        image = np.asarray(rgb, dtype=np.uint8).copy()
        words = _ocr(image, scale=scale)
        buf = io.BytesIO()
        rgb.save(buf, format="JPEG", quality=88)
        return ParsedPage(index + 1, image.shape[1] * scale, image.shape[0] * scale, words, _text_blocks(words),
                          _plain_markdown(words), _chunks(words), True, buf.getvalue(), image)


def _has_ruling_grid(page: pymupdf.Page) -> bool:
    """Whether the page draws at least two horizontal and two vertical rulings (or a filled box).

    pymupdf4llm's "lines_strict" table finder only finds tables built from such lines, and costs
    ~0.27 s on a page of vector plots; on 220 MMLongBench-Doc pages this gate skipped 65% of the
    pages and missed none of the tables the finder found (2026-11-30).
    """
    h = v = 0
    for path in page.get_cdrawings():
        for item in path["items"]:
            if item[0] == "l":
                (x0, y0), (x1, y1) = item[1], item[2]
                h += abs(y0 - y1) < 1 and abs(x0 - x1) > 5
                v += abs(x0 - x1) < 1 and abs(y0 - y1) > 5
            elif item[0] == "re":
                r = pymupdf.Rect(item[1])
                h += (r.height < 2 and r.width > 5) + 2 * (r.width > 5 and r.height > 5)
                v += (r.width < 2 and r.height > 5) + 2 * (r.width > 5 and r.height > 5)
            if h >= 2 and v >= 2:
                return True
    return False


def _ocr(image: np.ndarray, scale: float) -> list[Word]:
    from docrefrag.indexes.ocr import ocr_words

    return [Word(w.text, w.x0 * scale, w.y0 * scale, w.x1 * scale, w.y1 * scale, w.line) for w in ocr_words(image)]


def _image_blocks(page: pymupdf.Page) -> list[Block]:
    return [Block("figure", *info["bbox"]) for info in page.get_image_info()]


def _text_blocks(words: list[Word]) -> list[Block]:
    boxes: dict[int, list[float]] = {}
    for w in words:
        b = boxes.setdefault(w.block, [w.x0, w.y0, w.x1, w.y1])
        b[0], b[1], b[2], b[3] = min(b[0], w.x0), min(b[1], w.y0), max(b[2], w.x1), max(b[3], w.y1)
    return [Block("text", *b) for b in boxes.values()]


def _plain_markdown(words: list[Word]) -> str:
    lines: dict[int, list[str]] = {}
    for w in words:
        lines.setdefault(w.block, []).append(w.text)
    return "\n".join(" ".join(ws) for ws in lines.values())


def _chunks(words: list[Word]) -> list[TextChunk]:
    """BM25 units: consecutive text blocks merged up to CHUNK_WORDS[0] words, split past CHUNK_WORDS[1]."""
    groups: list[list[Word]] = []
    current: list[Word] = []
    last_block = None
    for w in words:
        if w.block != last_block and len(current) >= CHUNK_WORDS[0]:
            groups.append(current)
            current = []
        if len(current) >= CHUNK_WORDS[1]:
            groups.append(current)
            current = []
        current.append(w)
        last_block = w.block
    if current:
        groups.append(current)
    return [
        TextChunk(" ".join(w.text for w in g),
                  (min(w.x0 for w in g), min(w.y0 for w in g), max(w.x1 for w in g), max(w.y1 for w in g)))
        for g in groups
    ]
