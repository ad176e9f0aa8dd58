"""Page images: the stored render of a document's page (STORE/renders/DOC/N.jpg, written at ingest),
found through the catalog only (a document id is 16 hex digits, a page a number within the document),
so no request names a path; optionally with regions boxed, given in PDF points as citations and
search hits carry them and scaled to the render.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from fastapi import HTTPException
from PIL import Image, ImageDraw

from docrefrag.api import DocRefrag
from docrefrag.indexes.catalog import DocInfo
from docrefrag.indexes.errors import StoreError
from docrefrag.indexes.page_table import PageRecord

DOC_ID = re.compile(r"[0-9a-f]{16}")
MAX_BOXES = 50
BOX_COLOUR = (220, 20, 60)

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class StoredPage:
    doc: DocInfo
    record: PageRecord
    render: Path


def page_url(doc_id: str, page: int) -> str:
    return f"/documents/{doc_id}/pages/{page}.jpg"


def check_doc_id(doc_id: str) -> None:
    if not DOC_ID.fullmatch(doc_id):
        raise HTTPException(422, f"{doc_id[:40]!r} is not a document id (16 hex digits, as GET /documents lists)")


def find_page(dr: DocRefrag, doc_id: str, page: int) -> StoredPage:
    """The catalog's record and the render of page `page` (1-based) of `doc_id`; 404 when there is none."""
    check_doc_id(doc_id)
    if not (dr.store_path / "catalog.sqlite").is_file():
        raise HTTPException(404, f"no document {doc_id} in the store (it has none yet)")
    doc = next((d for d in dr.docs() if d.doc_id == doc_id), None)
    if doc is None:
        raise HTTPException(404, f"no document {doc_id} in the store; GET /documents lists them")
    if page > doc.n_pages:
        raise HTTPException(404, f"document {doc_id} has {doc.n_pages} pages; page {page} is past its end")
    try:
        record = dr.open_store().pages.get(doc.doc_id, page)
    except StoreError:
        raise HTTPException(404, f"page {page} of document {doc_id} is not ingested yet "
                                 f"({doc.pages_done} of {doc.n_pages} pages are)") from None
    if record.error:
        raise HTTPException(404, f"page {page} of document {doc_id} has no image: {record.error}")
    render = dr.open_store().pages.render_path(doc.doc_id, page)
    if not render.is_file():
        raise HTTPException(404, f"page {page} of document {doc_id} has no stored render; re-ingest the document")
    return StoredPage(doc, record, render)


def parse_boxes(text: str) -> list[Box]:
    """Boxes written 'x0,y0,x1,y1;x0,y0,x1,y1' (PDF points, origin top-left); 422 for anything else."""
    boxes = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        try:
            values = tuple(float(v) for v in part.split(","))
        except ValueError:
            values = ()
        if len(values) != 4 or not all(math.isfinite(v) for v in values) or not (
                values[0] < values[2] and values[1] < values[3]):
            raise HTTPException(422, f"boxes: {part[:60]!r} is not a box; write x0,y0,x1,y1 in PDF points with "
                                     "x0 < x1 and y0 < y1, boxes separated by ';'")
        boxes.append(values)
    if len(boxes) > MAX_BOXES:
        raise HTTPException(422, f"boxes: {len(boxes)} boxes; at most {MAX_BOXES}")
    return boxes


def render_size(page: StoredPage) -> tuple[int, int]:
    with Image.open(page.render) as im:
        return im.size


def boxed_jpeg(page: StoredPage, boxes: list[Box]) -> bytes:
    """The render with each box drawn (scaled from the page's points to the render's pixels)."""
    with Image.open(page.render) as im:
        image = im.convert("RGB")
    sx, sy = image.width / page.record.width, image.height / page.record.height
    draw = ImageDraw.Draw(image)
    line = max(2, round(image.width / 300))
    for x0, y0, x1, y1 in boxes:
        draw.rectangle([x0 * sx, y0 * sy, x1 * sx, y1 * sy], outline=BOX_COLOUR, width=line)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=88)
    return out.getvalue()
