"""The local chat model of the agent layer: a transformers causal LM on this machine as a LangChain chat model.

`LocalChatModel` runs the cached SmolLM2-135M-Instruct by default, or any causal LM directory with a
chat template (`make_llm("local:...")` in agents/llm_factory.py builds it from an `--llm` value).
It decodes with the token loop shared with the reader (`decoding.token_steps`), streams, honours
stop sequences, reports usage and log-probabilities, and scores yes/no prompts (`yes_probabilities`,
the chat reranker). Remote OpenAI-compatible servers are agents/endpoint.py. `is_local_model` is the one
test of whether a chat model is this local one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import torch
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel, generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from pydantic import Field, PrivateAttr, model_validator

from docrefrag.core.decoding import PrefixCache, cache_kw, load_causal_lm, token_steps

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
    _prefix: PrefixCache = PrivateAttr(default_factory=PrefixCache)

    @model_validator(mode="after")
    def _resolve_path(self) -> LocalChatModel:
        if self.path is None:
            from docrefrag.core.weights import model_dir
            from docrefrag.core.weights_registry import DEFAULT_DECODER

            self.path = model_dir(DEFAULT_DECODER)
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
        prompt = lm.tokenizer.apply_chat_template(_chat_turns(messages), tokenize=False,
                                                  add_generation_prompt=not prefill, continue_final_message=prefill)
        ids = lm.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]  # (1, T)
        n_in = ids.shape[1]
        if n_in + max_new_tokens > lm.max_positions:
            raise ValueError(f"the prompt has {n_in} tokens; with max_new_tokens={max_new_tokens} that exceeds the "
                             f"{lm.max_positions} positions of {self.path.name}; "
                             "shorten the prompt or lower max_new_tokens")
        tokens: list[int] = []
        logprobs: list[float] = []
        text, sent, finish, n_out = "", 0, "length", 0
        prompt_ids = ids[0].tolist()
        with self._prefix.reuse(prompt_ids) as (start, cache):  # a prompt that repeats the last one's beginning
            steps = token_steps(lm.model, input_ids=ids[:, start:], temperature=temperature, cache=cache)
            yielded: list[int] = []
            for n_out, (nxt, logp) in enumerate(itertools.islice(steps, max_new_tokens), 1):  # noqa: B007 (n_out counts after the loop)
                yielded.append(int(nxt[0]))
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
            self._prefix.keep(prompt_ids + yielded[:-1], cache)  # the last token yielded was never fed
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

    def yes_probabilities(self, prompts: Sequence[str | Sequence[BaseMessage]], batch: int = 4) -> list[float]:
        """P("Yes") against "No" as the first token of the reply to each prompt (a user message, or the
        messages of a chat), the model's next-token logits once the assistant turn opens ("Yes"/" Yes"
        and "No"/" No" pooled), in batches with left padding (positions counted from each prompt's first
        token). A single prompt continues the prefix cache: the validator's judge, which repeats the
        answer agent's prompt, computes only its own tail."""
        lm = load_causal_lm(self.path, chat=True)
        tok = lm.tokenizer
        yes, no = ([*{tok.encode(w, add_special_tokens=False)[0] for w in (word, f" {word}")}]
                   for word in ("Yes", "No"))
        texts = [tok.apply_chat_template(_chat_turns([HumanMessage(p)] if isinstance(p, str) else p), tokenize=False,
                                         add_generation_prompt=True) for p in prompts]
        encoded = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        longest = max(len(ids) for ids in encoded)
        if longest > lm.max_positions:
            raise ValueError(f"a prompt has {longest} tokens, more than the {lm.max_positions} positions of "
                             f"{self.path.name}; read fewer characters per page")
        if len(encoded) == 1:
            logits = self._continued_logits(lm, encoded[0])[None]  # (1, V)
            return torch.sigmoid(torch.logsumexp(logits[:, yes], 1) - torch.logsumexp(logits[:, no], 1)).tolist()
        out: list[float] = []
        for i in range(0, len(encoded), batch):
            enc = encoded[i:i + batch]
            longest = max(len(ids) for ids in enc)
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

    def _continued_logits(self, lm: Any, ids: list[int]) -> torch.Tensor:
        """The next-token logits (V,) after `ids`, continuing the prefix cache."""
        with self._prefix.reuse(ids) as (start, cache):
            with torch.inference_mode():
                out = lm.model(input_ids=torch.tensor([ids[start:]]), use_cache=True, logits_to_keep=1,
                               **{cache_kw(lm.model): cache})
            self._prefix.keep(ids, cache)
        return out.logits[0, -1].float()


def is_local_model(llm: object) -> TypeGuard[LocalChatModel]:
    """Whether `llm` is a chat model on this machine (`LocalChatModel`): the one test of "local", where a
    decision needs the model's own logits (P("Yes") for the judge and the chat reranker) or its own
    generation options (`max_new_tokens`, not an endpoint's `max_tokens`)."""
    return isinstance(llm, LocalChatModel)
