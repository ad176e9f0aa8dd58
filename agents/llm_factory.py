"""The `--llm` value of the command line and the API, and the chat model it names.

`make_llm(spec)` turns an `--llm` value into a LangChain chat model:

- `None` / `"local"`: `LocalChatModel` on the cached SmolLM2-135M-Instruct (`model_dir("smollm2")`);
- `"local:/path/to/hf-dir"`: `LocalChatModel` on any causal LM directory with a chat template;
- `"local:NAME"`: `LocalChatModel` on a cached registry decoder (`weights_registry.DECODERS`, e.g. qwen-coder-1.5b);
- `"openai:MODEL@BASE_URL"`: an `OpenAIEndpoint` (agents/endpoint.py) on an OpenAI-compatible server
  through langchain-openai's real HTTP client; the key comes from `$OPENAI_API_KEY`;
- `"package.module:factory"`: `factory()` from an importable module, for any other LangChain provider.

A bad spec, or a local directory that holds no loadable model, is refused here, before any work.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from langchain_core.language_models.chat_models import BaseChatModel

from docrefrag.agents.endpoint import OpenAIEndpoint
from docrefrag.agents.llm import LocalChatModel
from docrefrag.agents.plugins import load_object

SPEC_FORMS = ('"local"', '"local:/path/to/hf-model-dir"', '"local:qwen-coder-1.5b" (a fetched decoder)', '"openai:MODEL@http://HOST:PORT/v1"',
              '"package.module:factory"')


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
    # the run records keep it (graph.run_checkpoints)
    model.metadata = {**(model.metadata or {}), "llm_spec": spec or "local"}
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
        from docrefrag.core.weights import model_dir
        from docrefrag.core.weights_registry import DECODERS

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
