"""The document routes: uploads (`POST /documents`, ingested in the background), the document list with
the uploads' progress (`GET /documents`), and each page's record and image (`GET
/documents/{id}/pages/{n}` and `.../{n}.jpg`, `?boxes=` drawing regions). None of them waits behind
an ingest: they read the catalog afresh (`StoreWorker.fresh`)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool

from docrefrag.indexes.catalog import DocInfo
from docrefrag.server.page_images import boxed_jpeg, find_page, page_url, parse_boxes, render_size
from docrefrag.server.uploads import UploadRefused, UploadTooLarge, read_form, stage

if TYPE_CHECKING:
    from docrefrag.server.app import ServerState

PageNumber = Annotated[int, PathParam(ge=1, description="1-based page number")]
UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["files"], "properties": {
        "files": {"type": "array", "items": {"type": "string", "format": "binary"},
                  "description": "PDF files (one document each) and/or the page images (PNG/JPEG, the page "
                                 "number in each file name) of one document"},
        "name": {"type": "string", "description": "the page images' document name (default page-images)"}}}}}}}


def public_doc(d: DocInfo) -> dict:
    """A document as the API shows it: no server path, no process id; its state in words."""
    state = "ready" if d.status == "ready" else "ingesting" if d.writer_pid else "interrupted"
    hidden = ("source", "writer_pid")
    return {**{k: v for k, v in asdict(d).items() if k not in hidden}, "state": state}


def add_document_routes(router: APIRouter, state: ServerState) -> None:
    worker = state.worker

    def read_docs() -> list[DocInfo]:
        if not (worker.store_path / "catalog.sqlite").is_file():  # no document uploaded yet
            return []
        with worker.fresh() as dr:
            return dr.docs()

    @router.post("/documents", status_code=202, openapi_extra=UPLOAD_BODY,
                 summary="Upload PDFs or page images; they are ingested in the background")
    async def upload(request: Request) -> dict:
        """Checks every file first (type, size, a PDF that opens, readable page images): a refused upload
        writes nothing. The answer lists the queued ingests; `GET /documents` shows their progress."""
        tmp = Path(tempfile.mkdtemp(prefix="docrefrag-upload-"))
        try:
            files, name = await read_form(request, state.max_upload_bytes)
            uploads = await stage(files, name, tmp)
            ahead = worker.ahead()
            jobs = await run_in_threadpool(state.jobs.start, uploads)
        except UploadTooLarge as e:
            raise HTTPException(413, str(e)) from None
        except UploadRefused as e:
            raise HTTPException(e.status, str(e)) from None
        finally:
            await asyncio.to_thread(shutil.rmtree, tmp, True)
        return {"ingests": [job.public({}) for job in jobs], "waiting_for": ahead}

    @router.get("/documents", summary="The store's documents and the uploads' ingests")
    async def documents() -> dict:
        docs = await run_in_threadpool(read_docs)
        by_id = {d.doc_id: d for d in docs}
        return {"documents": [public_doc(d) for d in docs], "ingests": [j.public(by_id) for j in state.jobs.all()]}

    @router.get("/documents/{doc_id}/pages/{page}.jpg", summary="A page's stored render, regions boxed",
                response_class=Response, responses={200: {"content": {"image/jpeg": {}}}})
    async def page_image(doc_id: str, page: PageNumber,
                         boxes: Annotated[str | None, Query(description="x0,y0,x1,y1;... in PDF points")] = None
                         ) -> Response:
        regions = parse_boxes(boxes) if boxes else []

        def read() -> bytes:
            with worker.fresh() as dr:
                stored = find_page(dr, doc_id, page)
                return boxed_jpeg(stored, regions) if regions else stored.render.read_bytes()

        return Response(await run_in_threadpool(read), media_type="image/jpeg",
                        headers={"Cache-Control": "private, max-age=3600"})

    @router.get("/documents/{doc_id}/pages/{page}", summary="A page's size in PDF points and its render's in pixels")
    async def page_info(doc_id: str, page: PageNumber) -> dict:
        def read() -> dict:
            with worker.fresh() as dr:
                stored = find_page(dr, doc_id, page)
                width, height = render_size(stored)
            return {"doc_id": doc_id, "name": stored.doc.name, "page": page, "n_pages": stored.doc.n_pages,
                    "width": stored.record.width, "height": stored.record.height, "ocr": stored.record.ocr,
                    "render": {"width": width, "height": height}, "image": page_url(doc_id, page)}

        return await run_in_threadpool(read)
