"""One predicate says whether a chat model is local (`agents.llm.is_local_model`), and the decisions that
depend on it (the chat reranker, the validator's judge, the answer extractor's options) follow it. No
weights are loaded: a LocalChatModel reads its directory only when it first replies."""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from docrefrag.agents.llm import LocalChatModel, is_local_model
from docrefrag.agents.llm_factory import make_llm
from docrefrag.agents.rerank import check_reranker


@pytest.fixture
def local(tmp_path) -> LocalChatModel:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    return LocalChatModel(path=tmp_path)


def test_a_local_model_is_local_and_others_are_not(local):
    assert is_local_model(local)
    assert not is_local_model(GenericFakeChatModel(messages=iter([AIMessage("Yes")])))
    assert not is_local_model(make_llm("openai:m@http://127.0.0.1:8000/v1"))
    assert not is_local_model(None)


def test_the_chat_reranker_takes_a_local_model_only(local):
    check_reranker("chat", None, local)
    with pytest.raises(ValueError, match="the chat model is GenericFakeChatModel: use --llm local"):
        check_reranker("chat", None, GenericFakeChatModel(messages=iter([])))


def test_a_remote_judge_is_asked_for_its_word_not_its_probabilities():
    """The validator asks a non-local judge for a reply and reads "Yes" from it (a local one: P("Yes"))."""
    from docrefrag.agents.answer import PageText
    from docrefrag.agents.schemas import Claim
    from docrefrag.agents.validation import validate

    pages = [PageText("d", 1, "Revenue in 2025 was 4812 million.", [])]
    claim = Claim(text="4812", citations=[])
    judge = GenericFakeChatModel(messages=iter([AIMessage("Yes")]))
    verdict = validate("What was revenue in 2025?", "4812", [claim], pages, judge)
    assert verdict.supported and verdict.confidence == 1.0
