"""What the server tests share: a server over a store with a scripted chat model (`Script`) and the
LLM key in the environment it starts in, and the server-sent events of a response."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import httpx
import pytest
from conftest import QUESTION
from fastapi.testclient import TestClient
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from docrefrag.graph.context import AskConfig
from docrefrag.server import create_app

KEY = "sk-test-0123456789abcdef"  # the LLM endpoint's key in the server's environment
TOKEN = "s3cret-token-for-tests"
CONFIG = AskConfig.of(answerer="chat", hyde="never", max_rounds=1)  # two chat calls an ask: answer, validate
NODES = ["plan", "retrieve", "rerank", "answer", "validate"]


class Script:
    """The server's chat model's replies, set by each test; an exception is raised instead of replying."""

    def __init__(self) -> None:
        self.replies: deque = deque()

    def set(self, *replies: str | Exception) -> None:
        self.replies = deque(replies)

    def __iter__(self) -> Script:
        return self

    def __next__(self) -> AIMessage:
        assert self.replies, "the chat model was called more often than scripted"
        reply = self.replies.popleft()
        if isinstance(reply, Exception):
            raise reply
        return AIMessage(reply)


def served(store: Path, **options):
    """(test client, script) of a server over `store`, with the key in the environment it starts in."""
    import torch

    torch.set_num_threads(1)  # as conftest's embedder: the machine's second core is busy
    script = Script()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", KEY)
        app = create_app(store, llm=GenericFakeChatModel(messages=script), config=CONFIG, workers=1, **options)
    return TestClient(app), script


def events(response: httpx.Response) -> list[tuple[str, dict]]:
    """The server-sent events of a response: (event name, data)."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    found = []
    for block in response.text.split("\n\n"):
        lines = [line for line in block.splitlines() if line and not line.startswith(":")]
        if lines:
            (name,) = [line[7:] for line in lines if line.startswith("event: ")]
            found.append((name, json.loads("".join(line[6:] for line in lines if line.startswith("data: ")))))
    return found


def ask(client: TestClient, question: str = QUESTION, **body) -> list[tuple[str, dict]]:
    return events(client.post("/ask", json={"question": question, **body}))
