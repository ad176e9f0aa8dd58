"""The question routes: `GET /search`, `POST /ask` and `POST /runs/{id}/resume` (server-sent events:
`run` first, with the run id and what the store is busy with; one event per graph node as it finishes,
named by the node (plan, retrieve, enrich, rerank, answer, validate, refine) with its trace entries;
then `result`, the answer with its citations and the whole trace, or `error`), and `GET /runs/{id}`
for a finished or unfinished run as its checkpoints hold it.

Searches, asks and resumes run on the store's thread (`StoreWorker`): one sent during an ingest
waits for it. The chat model is the server's own (`docrefrag serve --llm`): a request cannot name one,
so no request can send the endpoint's key elsewhere.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from docrefrag.api import DocRefrag, check_question
from docrefrag.cli_common import one_line
from docrefrag.graph.context import AskConfig
from docrefrag.graph.run_checkpoints import new_run_id, run_checkpoints
from docrefrag.indexes.fusion import DEFAULT_METHOD, FusionMethod
from docrefrag.server.page_images import page_url

if TYPE_CHECKING:
    from docrefrag.graph.ask import AskResult
    from docrefrag.server.app import ServerState

KEEPALIVE_S = 15.0  # a comment line this often while a run waits or works, so that proxies keep the stream open
RunId = Annotated[str, PathParam(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the run id that POST /ask gave")]
SSE_RESPONSE = {200: {"content": {"text/event-stream": {}},
                      "description": "events run, then one per graph node, then result (or error)"}}


class AskRequest(BaseModel):
    question: str = Field(min_length=1, max_length=4000, description="the question, in words")
    doc: list[str] | None = Field(default=None, description="restrict to these documents (ids, id prefixes or names)")
    config: dict[str, Any] = Field(default_factory=dict, description="AskConfig settings over the server's "
                                                                     "(max_rounds, answerer, hyde, ...)")


def names_of(dr: DocRefrag) -> dict[str, str]:
    return {d.doc_id: d.name for d in dr.docs()}


def public_result(result: AskResult, names: dict[str, str]) -> dict:
    """The answer with its claims, every citation flattened (with its document's name and page image), the trace."""
    citations = [{**c, "claim": i, "name": names.get(c["doc_id"], c["doc_id"]),
                  "image": page_url(c["doc_id"], c["page"])}
                 for i, claim in enumerate(result.claims) for c in claim["citations"]]
    return {"run_id": result.thread_id, **asdict(result), "citations": citations}


def sse(event: str, data: dict, redact: Callable[[str], str]) -> str:
    return f"event: {event}\ndata: {redact(json.dumps(data, default=str))}\n\n"


async def stream_run(state: ServerState, what: str, run_id: str,
                     start: Callable[[DocRefrag, Callable[[str, dict], None]], AskResult]) -> AsyncIterator[str]:
    """Run `start(dr, on_event)` on the store's thread and relay its node events, then its result."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, dict]] = asyncio.Queue()

    def on_event(node: str, update: dict) -> None:
        event = {"node": node, "round": update.get("round"), "trace": update.get("trace", [])}
        loop.call_soon_threadsafe(queue.put_nowait, (node, event))

    def work(dr: DocRefrag) -> dict:
        return public_result(start(dr, on_event), names_of(dr))

    ahead = state.worker.ahead()
    done = asyncio.wrap_future(state.worker.submit(what, work))
    yield sse("run", {"run_id": run_id, "waiting_for": ahead}, state.redact)
    getter: asyncio.Future | None = None
    try:
        while True:
            getter = asyncio.ensure_future(queue.get())
            finished, _ = await asyncio.wait({getter, done}, timeout=KEEPALIVE_S,
                                             return_when=asyncio.FIRST_COMPLETED)
            if getter in finished:
                yield sse(*getter.result(), state.redact)
                continue
            getter.cancel()
            if done not in finished:
                yield ": working\n\n"
                continue
            while not queue.empty():  # events sent before the run returned
                yield sse(*queue.get_nowait(), state.redact)
            try:
                yield sse("result", done.result(), state.redact)
            except (Exception, asyncio.CancelledError) as e:  # cancelled: the server stops
                message = "the server stopped before the run" if isinstance(e, asyncio.CancelledError) else one_line(e)
                yield sse("error", {"run_id": run_id, "message": message}, state.redact)
            return
    finally:
        if getter is not None:
            getter.cancel()


def _events(stream: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def add_question_routes(router: APIRouter, state: ServerState) -> None:
    worker = state.worker

    @router.get("/search", summary="Rank pages for a query (BM25 + page-region vectors, fused)")
    async def search(q: Annotated[str, Query(min_length=1, max_length=2000, description="the words to search for")],
                     k: Annotated[int, Query(ge=1, le=100)] = 5,
                     doc: Annotated[list[str] | None, Query(description="ids, id prefixes or names")] = None,
                     fusion: FusionMethod = DEFAULT_METHOD) -> dict:
        def work(dr: DocRefrag) -> dict:
            hits = dr.search(q, k=k, doc=doc, method=fusion)
            names = names_of(dr)
            return {"query": q, "hits": [{**asdict(h), "name": names.get(h.doc_id, h.doc_id),
                                          "image": page_url(h.doc_id, h.page)} for h in hits]}

        return await worker.run(f"a search for {q[:60]!r}", work)

    @router.post("/ask", response_class=StreamingResponse, responses=SSE_RESPONSE,
                 summary="Answer a question; the agent's steps stream as server-sent events")
    async def ask(body: AskRequest) -> StreamingResponse:
        check_question(body.question)
        config = AskConfig.from_values(body.config, state.config, where="config")
        run_id = new_run_id()

        def start(dr: DocRefrag, on_event: Callable[[str, dict], None]) -> AskResult:
            return dr.ask(body.question, doc=body.doc, llm=state.chat_model(dr), config=config, on_event=on_event,
                          thread_id=run_id)

        return _events(stream_run(state, f"the question {body.question[:60]!r}", run_id, start))

    @router.get("/runs/{run_id}", summary="A run as its checkpoints hold it: finished (its result) or not")
    async def run(run_id: RunId) -> dict:
        def read() -> dict:
            with worker.fresh() as dr:
                stored = dr.stored_run(run_id) if run_checkpoints(dr.store_path).is_file() else None
                if stored is None:
                    raise HTTPException(404, f"no run {run_id} in this store")
                options = dr.run_options(run_id)
                names = names_of(dr)
            return {"run_id": run_id, "question": stored.question, "finished": stored.finished, "next": stored.next,
                    "config": options.config.flat() if options else None, "trace": stored.trace,
                    "result": public_result(stored.result, names) if stored.result else None}

        return await run_in_threadpool(read)

    @router.post("/runs/{run_id}/resume", response_class=StreamingResponse, responses=SSE_RESPONSE,
                 summary="Continue an unfinished run from its last checkpoint; events as POST /ask")
    async def resume(run_id: RunId) -> StreamingResponse:
        stored = await run(run_id)
        if stored["finished"]:
            raise HTTPException(409, f"run {run_id} has finished; there is nothing to resume (GET /runs/{run_id})")

        def start(dr: DocRefrag, on_event: Callable[[str, dict], None]) -> AskResult:
            return dr.resume(run_id, llm=state.chat_model(dr), on_event=on_event)

        return _events(stream_run(state, f"the resumed run {run_id}", run_id, start))
