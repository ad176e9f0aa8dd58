"""OpenAI-compatible endpoints served by real HTTP servers on 127.0.0.1 (answering, hanging, garbling,
refusing) reached through langchain-openai's own HTTP client: retries, and one LLMUnavailableError.

Servers bind to 127.0.0.1 on port 0, count their requests, and a hanging handler waits at most
10 s (released at teardown).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from docrefrag.agents.endpoint import LLMUnavailableError, OpenAIEndpoint, invoke_llm
from docrefrag.agents.llm_factory import make_llm

QUESTION = [SystemMessage("You answer briefly."), HumanMessage("What is the capital of France?")]

def _completion(content: str) -> dict:
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}


def _delta(content: str) -> str:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return f"data: {json.dumps(chunk)}\n\n"


class Server:
    """A ThreadingHTTPServer on 127.0.0.1 answering POST /v1/chat/completions in one `mode`."""

    def __init__(self, mode: str) -> None:
        self.mode, self.requests, self.release = mode, 0, threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                server.requests += 1
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.answer(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def answer(self, h: BaseHTTPRequestHandler, body: dict) -> None:
        if self.mode == "hang":
            self.release.wait(10)
            return
        status, ctype = 200, "application/json"
        if self.mode == "ok" and body.get("stream"):
            payload, ctype = (_delta("hello ") + _delta("from the server") + "data: [DONE]\n\n").encode(), \
                "text/event-stream"
        elif self.mode == "ok":
            payload = json.dumps(_completion("hello from the server")).encode()
        elif self.mode == "not-json":
            payload = b"<html>upstream exploded</html>"
        elif self.mode == "no-choices":
            payload = b'{"detail": "queued"}'
        elif self.mode == "bad-events":
            payload, ctype = _delta("hello ").encode() + b"data: {not json\n\n", "text/event-stream"
        elif self.mode == "bad-gateway":
            status, payload, ctype = 502, b"<html>502 Bad Gateway</html>", "text/html"
        elif self.mode == "bad-key":
            status, payload = 401, b'{"error": {"message": "invalid api key", "type": "auth"}}'
        else:
            raise AssertionError(self.mode)
        h.send_response(status)
        h.send_header("content-type", ctype)
        h.send_header("content-length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[str], Server]]:
    servers: list[Server] = []

    def start(mode: str) -> Server:
        servers.append(Server(mode))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def closed_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def test_endpoint_answers_invoke_and_stream(serve):
    server = serve("ok")
    llm = make_llm(f"openai:m@{server.url}", timeout=5)
    assert isinstance(llm, OpenAIEndpoint) and llm.max_retries == 0
    reply = invoke_llm(llm, QUESTION)
    assert reply.text == "hello from the server"
    assert reply.usage_metadata["output_tokens"] == 4
    assert "".join(c.text for c in llm.stream(QUESTION)) == "hello from the server"
    assert server.requests == 2


def test_endpoint_that_hangs_times_out(serve):
    server = serve("hang")
    llm = make_llm(f"openai:m@{server.url}", timeout=1, max_retries=1)
    t0 = time.perf_counter()
    with pytest.raises(LLMUnavailableError, match="timed out after 1 s") as caught:
        invoke_llm(llm, QUESTION)
    assert time.perf_counter() - t0 < 8
    assert server.url in str(caught.value) and "2 attempts" in str(caught.value)
    assert caught.value.attempts == server.requests == 2


@pytest.mark.parametrize("mode", ["not-json", "no-choices"])
def test_endpoint_with_malformed_answers(serve, mode):
    server = serve(mode)
    llm = make_llm(f"openai:m@{server.url}", timeout=5, max_retries=2, backoff=0.05)
    with pytest.raises(LLMUnavailableError, match="malformed") as caught:
        invoke_llm(llm, QUESTION)
    assert "3 attempts" in str(caught.value) and "--llm local" in str(caught.value)
    assert server.requests == 3
    with pytest.raises(LLMUnavailableError, match="malformed.*content-type 'application/json'"):
        list(llm.stream(QUESTION))  # a stream answered without an event stream
    with pytest.raises(LLMUnavailableError, match="malformed"):
        asyncio.run(llm.ainvoke(QUESTION))
    assert server.requests == 9


def test_stream_that_breaks_is_not_retried_after_its_start(serve):
    server = serve("bad-events")
    llm = make_llm(f"openai:m@{server.url}", timeout=5, max_retries=2, backoff=0.05)
    chunks = []
    with pytest.raises(LLMUnavailableError, match="malformed.*after the stream had begun"):
        for chunk in llm.stream(QUESTION):
            chunks.append(chunk.text)
    assert "".join(chunks) == "hello " and server.requests == 1


def test_server_errors_are_retried(serve):
    server = serve("bad-gateway")
    llm = make_llm(f"openai:m@{server.url}", timeout=5, max_retries=1, backoff=0.05)
    with pytest.raises(LLMUnavailableError, match="answered HTTP 502 .2 attempts."):
        invoke_llm(llm, QUESTION)
    assert server.requests == 2


def test_closed_port_is_refused(closed_url):
    llm = make_llm(f"openai:m@{closed_url}", timeout=2, max_retries=1, backoff=0.05)
    with pytest.raises(LLMUnavailableError, match="refused the connection") as caught:
        invoke_llm(llm, QUESTION)
    assert f"check that the server at {closed_url} is running" in str(caught.value)


def test_rejected_key_is_not_retried_nor_converted(serve):
    server = serve("bad-key")
    llm = make_llm(f"openai:m@{server.url}", timeout=5, max_retries=2)
    with pytest.raises(openai.AuthenticationError):
        invoke_llm(llm, QUESTION)
    assert server.requests == 1


def test_invoke_llm_converts_errors_of_models_built_elsewhere(closed_url):
    plain = ChatOpenAI(model="m", base_url=closed_url, api_key="x", timeout=2, max_retries=0)
    with pytest.raises(LLMUnavailableError, match="refused the connection") as caught:
        invoke_llm(plain, QUESTION)
    assert closed_url in str(caught.value)
    with pytest.raises(ValueError, match="messages list cannot be empty"):  # other errors pass through
        invoke_llm(ParrotFakeChatModel(), [])

