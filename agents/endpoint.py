"""OpenAI-compatible LLM endpoints (vLLM, llama.cpp's server, a hosted API) and their failures.

Endpoint failures (connection refused, no answer within `timeout`, a body that is not a chat
completion, HTTP 5xx/429) are retried by `OpenAIEndpoint` with exponential backoff, then raised as
one `LLMUnavailableError` that says which URL, what happened, after how many attempts and what to
do. `invoke_llm` gives the same error for models built elsewhere, so a graph node catches one type.
Other exceptions (a rejected key, a bad request) pass through untouched. `make_llm("openai:...")`
(agents/llm_factory.py) builds an endpoint from an `--llm` value.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.exceptions import ModelConnectionError, ModelError, ModelTimeoutError
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_openai import ChatOpenAI
from pydantic import Field, model_validator

logger = logging.getLogger(__name__)


class LLMUnavailableError(RuntimeError):
    """An LLM endpoint was refused, timed out, or answered garbage, on every attempt.

    `attempts` is None when the provider's client made them (its own retries are unknown here);
    `url` is None when the provider's error does not name one.
    """

    def __init__(self, what: str, attempts: int | None, url: str | None = None,
                 provider: str = "OpenAI-compatible") -> None:
        self.what, self.attempts, self.url = what, attempts, url
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}" if attempts else f"{provider}'s own attempts"
        server = f"the server at {url}" if url else f"the {provider} server"
        super().__init__(f"LLM endpoint {url or 'of ' + provider} {what} ({tries}); "
                         f"check that {server} is running, or pass --llm local")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _diagnose(exc: BaseException, timeout: float | None = None) -> str | None:
    """What an endpoint failure was, in words (retrying may help), or None for any other exception.

    Covers the openai SDK's errors (which langchain-openai subclasses), httpx's and the builtin
    connection/timeout errors (other providers' clients), and LangChain's provider-neutral
    `ModelError`s that declare themselves retryable.
    """
    if isinstance(exc, openai.APIResponseValidationError):
        return f"sent a malformed response ({exc.message})"
    if isinstance(exc, openai.APITimeoutError | ModelTimeoutError | httpx.TimeoutException | TimeoutError):
        return f"timed out after {timeout:g} s" if timeout else "timed out"
    if isinstance(exc, openai.InternalServerError | openai.RateLimitError):
        return f"answered HTTP {exc.status_code}"
    if isinstance(exc, openai.APIConnectionError | ModelConnectionError | httpx.TransportError | ConnectionError):
        if any(isinstance(c, ConnectionRefusedError) for c in _chain(exc)):
            return "refused the connection"
        root = list(_chain(exc))[-1]
        return f"could not be reached ({type(root).__name__}: {root})"
    if isinstance(exc, ModelError) and exc.is_retryable:
        return f"failed ({type(exc).__name__}: {exc})"
    return None


def _malformed(response: Any, problem: str) -> openai.APIResponseValidationError:
    return openai.APIResponseValidationError(response, None, message=problem)


def _body_must_be_json(response: Any) -> bool:
    """Whether a successful answer's body is to be checked as JSON. A streamed request must be
    answered with an event stream (else this raises); status errors are left to the SDK."""
    if not response.is_success:
        return False
    ctype = response.headers.get("content-type", "")
    if json.loads(response.request.content or b"{}").get("stream") is True:
        if not ctype.startswith("text/event-stream"):
            raise _malformed(response, f"a stream was asked for; the answer has content-type {ctype!r}")
        return False
    return True


def _check_json_body(response: Any) -> None:
    try:
        body = json.loads(response.content)
    except ValueError:
        raise _malformed(response, f"the body is not JSON: {response.text[:80]!r}") from None
    if response.request.url.path.endswith("/chat/completions") and not (
            isinstance(body, dict) and isinstance(body.get("choices"), list) and body["choices"]):
        raise _malformed(response, f"the JSON holds no choices: {response.text[:80]!r}")


def _check_body(response: Any) -> None:
    """httpx response hook: a 2xx answer is an event stream when one was asked for, else JSON
    (a chat completion with choices for /chat/completions); otherwise APIResponseValidationError,
    which the openai SDK passes through as it is."""
    if _body_must_be_json(response):
        response.read()
        _check_json_body(response)


async def _acheck_body(response: Any) -> None:
    if _body_must_be_json(response):
        await response.aread()
        _check_json_body(response)


class OpenAIEndpoint(ChatOpenAI):
    """`ChatOpenAI` whose retries are ours: a refused connection, a timeout, HTTP 5xx/429 or a
    malformed body is retried `retries` times after `backoff`, 2*`backoff`, ... seconds (at most
    8 s), then raised as `LLMUnavailableError`. A stream is retried only before its first chunk.
    The SDK's own retries are off (`max_retries=0`); `timeout` bounds each read, not a whole stream.
    """

    retries: int = Field(default=2, ge=0)
    backoff: float = Field(default=0.5, ge=0, description="seconds before the first retry, doubled after each")

    @model_validator(mode="before")
    @classmethod
    def _checked_clients(cls, values: dict[str, Any]) -> dict[str, Any]:
        if values.get("max_retries") not in (None, 0):
            raise ValueError(f"OpenAIEndpoint retries by itself: pass retries={values['max_retries']}, not max_retries")
        return {"http_client": openai.DefaultHttpxClient(event_hooks={"response": [_check_body]}),
                "http_async_client": openai.DefaultAsyncHttpxClient(event_hooks={"response": [_acheck_body]}),
                **values, "max_retries": 0}

    @property
    def url(self) -> str:
        return self.openai_api_base or "https://api.openai.com/v1"

    def _failed(self, exc: Exception, attempt: int, stream: bool = False, streamed: bool = False) -> float | None:
        """Seconds to wait before attempt `attempt + 1`; None when `exc` is no endpoint failure.
        Raises LLMUnavailableError after the last attempt, or when a stream broke after its start."""
        timeout = self.request_timeout if isinstance(self.request_timeout, int | float) else None
        what = _diagnose(exc, timeout)
        if stream and isinstance(exc, json.JSONDecodeError):  # _check_body sees no event of a stream
            what = f"sent a malformed response (an event that is not JSON: {exc})"
        if what is None:
            return None
        if streamed or attempt > self.retries:
            raise LLMUnavailableError(what + (" after the stream had begun" if streamed else ""), attempt,
                                      url=self.url) from exc
        delay = min(self.backoff * 2 ** (attempt - 1), 8.0)
        logger.warning("LLM endpoint %s %s; retrying in %.1f s (attempt %d of %d)",
                       self.url, what, delay, attempt + 1, self.retries + 1)
        return delay

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        for attempt in itertools.count(1):
            try:
                return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            except Exception as e:
                delay = self._failed(e, attempt)
                if delay is None:
                    raise
            time.sleep(delay)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        for attempt in itertools.count(1):
            try:
                return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
            except Exception as e:
                delay = self._failed(e, attempt)
                if delay is None:
                    raise
            await asyncio.sleep(delay)

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        for attempt in itertools.count(1):
            streamed = False
            try:
                for chunk in super()._stream(messages, stop=stop, run_manager=run_manager, **kwargs):
                    streamed = True
                    yield chunk
                return
            except Exception as e:
                delay = self._failed(e, attempt, stream=True, streamed=streamed)
                if delay is None:
                    raise
            time.sleep(delay)

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        for attempt in itertools.count(1):
            streamed = False
            try:
                async for chunk in super()._astream(messages, stop=stop, run_manager=run_manager, **kwargs):
                    streamed = True
                    yield chunk
                return
            except Exception as e:
                delay = self._failed(e, attempt, stream=True, streamed=streamed)
                if delay is None:
                    raise
            await asyncio.sleep(delay)


def invoke_llm(model: Runnable, messages: LanguageModelInput, **kwargs: Any) -> BaseMessage:
    """`model.invoke(messages, **kwargs)`, with every endpoint failure raised as LLMUnavailableError
    (an `OpenAIEndpoint` raises it itself, after its retries); any other exception passes through."""
    try:
        return model.invoke(messages, **kwargs)
    except LLMUnavailableError:
        raise
    except Exception as e:
        what = _diagnose(e)
        if what is None:
            raise
        url = next((str(c.request.url) for c in _chain(e) if isinstance(c, openai.APIError)), None)
        raise LLMUnavailableError(what, None, url=url, provider=type(model).__name__) from e
