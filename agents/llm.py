"""The chat models of the agent layer: the local SmolLM2, OpenAI-compatible endpoints, any LangChain provider.

`make_llm(spec)` turns an `--llm` value into a LangChain chat model:

- `None` / `"local"`: `LocalChatModel` on the cached SmolLM2-135M-Instruct (`model_dir("smollm2")`);
- `"local:/path/to/hf-dir"`: `LocalChatModel` on any causal LM directory with a chat template;
- `"local:NAME"`: `LocalChatModel` on a cached registry decoder (`weights.DECODERS`, e.g. qwen-coder-1.5b);
- `"openai:MODEL@BASE_URL"`: an OpenAI-compatible server (vLLM, llama.cpp's server, a hosted API)
  through langchain-openai's real HTTP client; the key comes from `$OPENAI_API_KEY`;
- `"package.module:factory"`: `factory()` from an importable module, for any other LangChain provider.

Endpoint failures (connection refused, no answer within `timeout`, a body that is not a chat
completion, HTTP 5xx/429) are retried by `OpenAIEndpoint` with exponential backoff, then raised as
one `LLMUnavailableError` that says which URL, what happened, after how many attempts and what to
do. `invoke_llm` gives the same error for models built elsewhere, so a graph node catches one type.
Other exceptions (a rejected key, a bad request) pass through untouched.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import torch
from docrefrag.agents.plugins import load_object
from docrefrag.core.decoding import load_causal_lm, token_steps
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.exceptions import ModelConnectionError, ModelError, ModelTimeoutError
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.chat_models import BaseChatModel, generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_openai import ChatOpenAI
from pydantic import Field, model_validator

logger = logging.getLogger(__name__)

SPEC_FORMS = ('"local"', '"local:/path/to/hf-model-dir"', '"local:qwen-coder-1.5b" (a fetched decoder)', '"openai:MODEL@http://HOST:PORT/v1"',
              '"package.module:factory"')


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


# ---------------------------------------------------------------- the local model


_ROLES = {SystemMessage: "system", HumanMessage: "user", AIMessage: "assistant"}


def _chat_turns(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    turns = []
    for m in messages:
        role = next((r for kind, r in _ROLES.items() if isinstance(m, kind)), None)
        if role is None:
            raise ValueError(f"LocalChatModel reads system, human and AI messages; got a {type(m).__name__}")
        if isinstance(m.content, list) and any(isinstance(b, dict) and b.get("type") != "text" for b in m.content):
            raise ValueError(f"LocalChatModel reads text only; a {type(m).__name__} holds non-text content blocks")
        turns.append({"role": role, "content": str(m.text)})
    return turns


def _holdback(text: str, stops: Sequence[str]) -> int:
    """How many trailing characters of `text` to keep back while streaming: an incomplete UTF-8
    character (decoded as U+FFFD) or the beginning of a stop sequence."""
    keep = len(text) - len(text.rstrip("\ufffd"))
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), keep, -1):
            if text.endswith(s[:k]):
                keep = k
                break
    return keep


class LocalChatModel(BaseChatModel):
    """A transformers causal LM from a local directory (default: the cached SmolLM2-135M-Instruct)
    as a LangChain chat model.

    Greedy decoding unless `temperature > 0`; `stop` sequences cut the reply (the stop text is not
    returned); `usage_metadata` counts prompt tokens and sampled tokens. Invoke and stream run the
    same token loop (`decoding.token_steps`: KV cache, logits of the last position only), so a
    greedy stream concatenates to the invoke text. The last chunk's `response_metadata["logprobs"]`
    holds the model's own log-probability (temperature 1) of each sampled token before the
    end-of-sequence token (the token a stop sequence begins in is included). The weights are loaded
    once per process (`decoding.load_causal_lm`) and shared with every LocalChatModel and reader
    over the same directory and dtype; a reader's LoRA never acts on these replies.
    `max_new_tokens` and `temperature` can be overridden per call
    (`model.invoke(msgs, max_new_tokens=32)` or `.bind(...)`). A trailing AI message is a prefill:
    the reply continues it (as the benchmark's answer extractor expects). Torch's thread count is
    left as the process configured it.
    """

    path: Path | None = Field(default=None, description="Hugging Face model directory; None: the cached SmolLM2")
    max_new_tokens: int = Field(default=96, gt=0, description="answers, HyDE passages and verdicts are short")
    temperature: float | None = Field(default=None, ge=0, description="None or 0: greedy")

    @model_validator(mode="after")
    def _resolve_path(self) -> LocalChatModel:
        if self.path is None:
            from docrefrag.core.weights import model_dir

            self.path = model_dir("smollm2")
        self.path = Path(self.path).expanduser().resolve()
        if not (self.path / "config.json").is_file():
            raise ValueError(f"no Hugging Face model at {self.path} (config.json missing)")
        return self

    @property
    def _llm_type(self) -> str:
        return "docrefrag-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"path": str(self.path), "max_new_tokens": self.max_new_tokens, "temperature": self.temperature}

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        # No token callbacks here: BaseChatModel calls _stream itself when a handler streams.
        return generate_from_stream(self._stream(messages, stop=stop, **kwargs))

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        max_new_tokens = kwargs.pop("max_new_tokens", self.max_new_tokens)
        temperature = kwargs.pop("temperature", self.temperature)
        if kwargs:
            raise TypeError(f"LocalChatModel takes max_new_tokens and temperature per call; got {sorted(kwargs)}")
        stops = [s for s in stop or [] if s]
        lm = load_causal_lm(self.path, chat=True)
        prefill = bool(messages) and isinstance(messages[-1], AIMessage)  # a trailing AI message is continued
        prompt = lm.tokenizer.apply_chat_template(_chat_turns(messages), tokenize=False, add_generation_prompt=not prefill,
                                                  continue_final_message=prefill)
        ids = lm.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]  # (1, T)
        n_in = ids.shape[1]
        if n_in + max_new_tokens > lm.max_positions:
            raise ValueError(f"the prompt has {n_in} tokens; with max_new_tokens={max_new_tokens} that exceeds the "
                             f"{lm.max_positions} positions of {self.path.name}; shorten the prompt or lower max_new_tokens")
        tokens: list[int] = []
        logprobs: list[float] = []
        text, sent, finish, n_out = "", 0, "length", 0
        steps = token_steps(lm.model, input_ids=ids, temperature=temperature)
        for n_out, (nxt, logp) in enumerate(itertools.islice(steps, max_new_tokens), 1):  # noqa: B007 (n_out counts after the loop)
            if int(nxt[0]) in lm.stop_ids:
                finish = "stop"
                break
            tokens.append(int(nxt[0]))
            logprobs.append(float(logp[0]))
            # without clean-up, decoding more tokens never changes the text already decoded
            text = lm.tokenizer.decode(tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            cut = min((i for i in (text.find(s, sent) for s in stops) if i >= 0), default=-1)
            if cut >= 0:  # a stop sequence never starts in text already sent: it was held back
                text, finish = text[:cut], "stop"
                break
            end = len(text) - _holdback(text, stops)
            if end > sent:
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=text[sent:end]))
                if run_manager:
                    run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                yield chunk
                sent = end
        usage = UsageMetadata(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out)
        last = ChatGenerationChunk(message=AIMessageChunk(
            content=text[sent:], usage_metadata=usage, chunk_position="last",
            response_metadata={"model_name": self.path.name, "finish_reason": finish,
                               "token_usage": {"prompt_tokens": n_in, "completion_tokens": n_out},
                               "logprobs": logprobs},
        ))
        if run_manager:
            run_manager.on_llm_new_token(last.text, chunk=last)
        yield last

    def yes_probabilities(self, prompts: Sequence[str], batch: int = 4) -> list[float]:
        """P("Yes") against "No" as the first token of the reply to each user prompt (the model's
        next-token logits once the assistant turn opens; "Yes"/" Yes" and "No"/" No" pooled), in
        batches with left padding (positions counted from each prompt's first token)."""
        lm = load_causal_lm(self.path, chat=True)
        tok = lm.tokenizer
        yes, no = ([*{tok.encode(w, add_special_tokens=False)[0] for w in (word, f" {word}")}] for word in ("Yes", "No"))
        texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
                 for p in prompts]
        out: list[float] = []
        for i in range(0, len(texts), batch):
            enc = [tok(t, add_special_tokens=False)["input_ids"] for t in texts[i:i + batch]]
            longest = max(len(ids) for ids in enc)
            if longest > lm.max_positions:
                raise ValueError(f"a prompt has {longest} tokens, more than the {lm.max_positions} positions of "
                                 f"{self.path.name}; read fewer characters per page")
            pad = tok.pad_token_id if tok.pad_token_id is not None else next(iter(lm.stop_ids), 0)
            ids = torch.tensor([[pad] * (longest - len(e)) + e for e in enc])  # (b, T)
            mask = torch.tensor([[0] * (longest - len(e)) + [1] * len(e) for e in enc])  # (b, T)
            positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
            with torch.inference_mode():
                logits = lm.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                  logits_to_keep=1).logits[:, -1].float()  # (b, V)
            log_odds = torch.logsumexp(logits[:, yes], dim=1) - torch.logsumexp(logits[:, no], dim=1)
            out += torch.sigmoid(log_odds).tolist()
        return out


# ---------------------------------------------------------------- endpoints


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


def _local_model_problem(path: Path) -> str | None:
    """What a model directory lacks to be loaded (checked before any work, not at the first answer)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        return "no config.json there"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"its config.json cannot be read as JSON: {e}"
    if not isinstance(config, dict) or "model_type" not in config:
        return "its config.json names no model_type"
    if not (any((path / name).is_file() for name in ("tokenizer.json", "vocab.json", "vocab.txt"))
            or any(path.glob("*.model")) or any(path.glob("*.tiktoken"))):
        return "no tokenizer file (tokenizer.json, vocab.json, vocab.txt, *.model or *.tiktoken)"
    if not (any(path.glob("*.safetensors")) or any(path.glob("pytorch_model*.bin"))):
        return "no weights (*.safetensors or pytorch_model*.bin)"
    return None


def make_llm(spec: str | None = None, *, timeout: float = 60, max_retries: int = 2,
             backoff: float = 0.5) -> BaseChatModel:
    """The chat model an `--llm` value names (see the module docstring for the forms).

    `timeout` (seconds per read), `max_retries` and `backoff` apply to `openai:` endpoints; a
    user factory is called without arguments and configures its own. Bad specs raise ValueError.
    """
    model = _make_llm(spec, timeout=timeout, max_retries=max_retries, backoff=backoff)
    model.metadata = {**(model.metadata or {}), "llm_spec": spec or "local"}  # the run records it (graph.runs)
    return model


def llm_spec(model: BaseChatModel) -> str | None:
    """The `--llm` spec a chat model was made from by `make_llm`; None for one made otherwise."""
    return (model.metadata or {}).get("llm_spec")


def _make_llm(spec: str | None, timeout: float, max_retries: int, backoff: float) -> BaseChatModel:
    if spec is None or spec == "local":
        return LocalChatModel()
    if spec.startswith("local:"):
        if not spec[6:]:
            raise ValueError(f"--llm {spec!r} names no directory; use one of {', '.join(SPEC_FORMS)}")
        from docrefrag.core.weights import DECODERS, model_dir

        if spec[6:] in DECODERS:  # a cached registry decoder by name (`docrefrag models fetch NAME`)
            return LocalChatModel(path=model_dir(spec[6:]))
        path = Path(spec[6:]).expanduser()
        problem = _local_model_problem(path)
        if problem:
            raise ValueError(f"--llm {spec!r}: no usable Hugging Face model at {path} ({problem}); pass the "
                             "directory that holds the model's config.json, tokenizer and weights")
        return LocalChatModel(path=path)
    if spec.startswith("openai:"):
        model, _, url = spec[7:].partition("@")
        if not model or not re.match(r"https?://[^/\s]+", url):
            raise ValueError(f"--llm {spec!r}: an endpoint is written openai:MODEL@http://HOST:PORT/v1; "
                             f"the accepted forms are {', '.join(SPEC_FORMS)}")
        return OpenAIEndpoint(model=model, base_url=url, api_key=os.environ.get("OPENAI_API_KEY", "not-needed"),
                              timeout=timeout, retries=max_retries, backoff=backoff)
    if re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", spec):
        try:
            factory = load_object(spec, "package.module:factory")
        except ValueError as e:
            raise ValueError(f"--llm {spec!r}: {e}") from e
        llm = factory()
        if not isinstance(llm, BaseChatModel):
            raise TypeError(f"--llm {spec!r}: {spec.partition(':')[2]}() returned a {type(llm).__name__}, "
                            "not a LangChain chat model")
        return llm
    raise ValueError(f"--llm {spec!r} is not a model spec; use one of {', '.join(SPEC_FORMS)}")
