"""The FastAPI application over one store: `create_app(store, ...)` wires the store's thread
(`StoreWorker`), the background ingests, the routes (documents.py, asking.py), the bearer token, the
errors as JSON (a ValueError is a 422, an unknown document a 404, a store that cannot serve a 409,
each message redacted of secrets) and the web page at `/` with its static files (docrefrag/web/,
shipped in the package: no build step, no CDN). The OpenAPI schema is FastAPI's, browsable at /docs
(Swagger UI served from fastapi-offline's bundled files, so it works offline too).
"""

from __future__ import annotations

import asyncio
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from docrefrag.api import DocRefrag
from docrefrag.cli_parser import installed_version
from docrefrag.graph.context import AskConfig
from docrefrag.indexes.errors import IngestError, StoreError, UnknownDocumentError
from docrefrag.server.asking import add_question_routes
from docrefrag.server.documents import add_document_routes
from docrefrag.server.jobs import IngestJobs
from docrefrag.server.security import Redactor, bearer_check
from docrefrag.server.worker import StoreWorker

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

WEB = Path(__file__).resolve().parent.parent / "web"
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; object-src 'none'; "
                                           "frame-ancestors 'none'; base-uri 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


@dataclass
class ServerState:
    """What the routes share: the store's thread, the ingests, the limits, the chat model and the secrets."""

    worker: StoreWorker
    jobs: IngestJobs
    redact: Redactor
    max_upload_bytes: int
    config: AskConfig  # the server's ask settings; a request's `config` overrides fields of it
    llm: str | BaseChatModel | None
    llm_timeout: float = 60.0
    llm_retries: int = 2
    _chat: BaseChatModel | None = None
    _chat_lock: threading.Lock = field(default_factory=threading.Lock)

    def chat_model(self, dr: DocRefrag) -> BaseChatModel:
        """The server's chat model, made on first use (on the store's thread, where the asks run)."""
        with self._chat_lock:
            if self._chat is None:
                self._chat = dr.llm(self.llm, timeout=self.llm_timeout, max_retries=self.llm_retries)
            return self._chat


def create_app(store: Path | str, token: str | None = None, max_upload_mb: float = 200.0,
               llm: str | BaseChatModel | None = None, config: AskConfig | None = None,
               qdrant_url: str | None = None, workers: int | None = None, llm_timeout: float = 60.0,
               llm_retries: int = 2) -> FastAPI:
    """The app serving the store at `store` (created by the first upload if it does not exist).

    `token`: the bearer token every API route requires (None: none, for a loopback server);
    `max_upload_mb`: the largest upload body; `llm`: the chat model spec or object of every ask (as
    `DocRefrag.ask`); `config`: the ask settings requests start from; `workers`: the ingests' page-parsing
    processes. A store that exists but cannot be used fails here, before the server starts.
    """
    if max_upload_mb <= 0:
        raise ValueError(f"max_upload_mb must be > 0, got {max_upload_mb}")
    path = Path(store).expanduser()
    if path.exists() and (not path.is_dir() or (path / "catalog.sqlite").is_file()):
        with DocRefrag(path, qdrant_url) as dr:  # a file, another schema, a lost index: refused now
            dr.docs()
    worker = StoreWorker(path, qdrant_url)
    redact = Redactor([token, worker.dr.qdrant_api_key])
    state = ServerState(worker, IngestJobs(worker, redact, workers), redact, int(max_upload_mb * 1e6),
                        config or AskConfig(), llm, llm_timeout, llm_retries)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await asyncio.to_thread(worker.close)

    app = FastAPIOffline(title="docrefrag", summary="Question answering over long, visually rich documents, "
                                             "with the pages and regions each answer rests on",
                  version=installed_version(), lifespan=lifespan)
    app.state.docrefrag = state
    api = APIRouter(dependencies=[Depends(bearer_check(token))])
    add_document_routes(api, state)
    add_question_routes(api, state)
    app.include_router(api)
    _add_error_handlers(app, redact)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(WEB / "index.html", headers=PAGE_HEADERS)

    app.mount("/static", StaticFiles(directory=WEB), name="static")
    return app


def _add_error_handlers(app: FastAPI, redact: Redactor) -> None:
    def handler(status: int):
        async def handle(request: Request, error: Exception) -> JSONResponse:
            return JSONResponse({"detail": redact(str(error))}, status_code=status)

        return handle

    # Starlette takes the handler of the error's nearest class: an UnknownDocumentError is a 404, not a 409
    app.add_exception_handler(UnknownDocumentError, handler(404))
    app.add_exception_handler(StoreError, handler(409))
    app.add_exception_handler(IngestError, handler(422))
    app.add_exception_handler(ValueError, handler(422))

