"""The Doc-REFRAG reader: read n pages as compressed chunks, expand only what the question needs.

The decoder's input is built in embedding space and fed through `inputs_embeds`:

    [ "Question: ..." | "Page 1:" c_1 c_2 e e e c_4 ... | "Page 2:" ... | suffix ]

where each chunk of k consecutive grid tokens is one projected embedding `c_j` (`ChunkProjector`),
unless the selector chose it: a chosen chunk is expanded natively, as in REFRAG, into the decoder's
own token embeddings of the words inside the chunk's region, in reading order (`e e e` above), which
a frozen decoder reads without training; a chosen chunk with no words stays compressed, and chunks
past `ReaderConfig.max_expanded_tokens` (in page order) too. `build` is the one construction of this
input: answering, training (losses and GRPO rollouts), reranking, the evaluations and the benchmark
all call it, so what is trained is what answers.

The decoder is any Hugging Face causal LM (default SmolLM2-135M-Instruct from the cached weights)
with LoRA adapters on its attention projections (peft); its weights are loaded once per process
and it decodes with the chat model's token loop (`decoding`). The same reader answers (greedy
decoding with a token bound; the expanded chunks become region citations), reranks pages (the
probability of "Yes" over each page's compressed chunks, all pages in one batch) and scores a gold
answer (its mean token log-probability: the selector's GRPO reward, docs/decisions/selector.md).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from docrefrag.core.chunking import chunk_band, region_word_indices
from docrefrag.core.config import ReaderConfig
from docrefrag.core.decoding import load_causal_lm, shared_weights_copy, token_steps
from docrefrag.core.projector import ChunkProjector
from docrefrag.core.selector import ChunkSelector, Selector, budget, candidates

logger = logging.getLogger(__name__)

QuestionEmbedder = Callable[[list[str]], np.ndarray]  # texts -> (n, question_dim)

ANSWER_SUFFIX = "\nAnswer:"
RERANK_SUFFIX = "\nDoes this page answer the question? Yes or No:"


class RegionTokens(list):
    """The decoder's token ids of the words in one chunk's region, in reading order, with `order`: per
    token, the page reading index of its word. A chunk is k cells of one grid row, a third of a column's
    width or less, so a line of text runs through several chunks: expanded chunks of one band merge
    their tokens back into reading order by it (`DocRefragReader.build`)."""

    def __init__(self, ids: list[int] = (), order: list[int] = ()) -> None:
        super().__init__(ids)
        if len(order) != len(self):
            raise ValueError(f"{len(self)} token ids but {len(order)} reading positions")
        self.order = list(order)


@dataclass
class Sequence:
    """A built reader input: embeddings and, per position, where it came from."""

    embeds: torch.Tensor  # (S, hidden)
    page: torch.Tensor  # (S,) page index, -1 for text
    chunk: torch.Tensor  # (S,) chunk index within its page, -1 for text
    slot: torch.Tensor  # (S,) token within an expanded chunk, -1 for a compressed chunk or text
    expanded: torch.Tensor  # (n, L) bool: the chunks expanded (the selection less `native_mask`'s drops)


@dataclass
class ReaderOutput:
    text: str
    expanded: list[tuple[int, int]]  # (page index, chunk) of every expanded chunk
    input_tokens: int
    output_tokens: int
    ttft_s: float
    tpot_s: float


class DocRefragReader(nn.Module):
    """The reader over `decoder`, which it leaves as it is: LoRA goes into a module tree of its own
    over the decoder's (frozen) tensors (`decoding.shared_weights_copy`), so a chat model over the
    same loaded decoder keeps answering without the adapters."""

    def __init__(self, decoder: nn.Module, tokenizer: Any, config: ReaderConfig, embed_question: QuestionEmbedder,
                 lora: bool = True) -> None:
        super().__init__()
        hidden = decoder.get_input_embeddings().embedding_dim
        if hidden != config.hidden:
            raise ValueError(f"ReaderConfig.hidden={config.hidden} but the decoder's hidden size is {hidden}; "
                             f"pass ReaderConfig(hidden={hidden})")
        self.config, self.tokenizer, self.embed_question = config, tokenizer, embed_question
        self.decoder_id = decoder_fingerprint(decoder)
        self.checkpoint_id: str | None = None  # sha256 of the loaded checkpoint's manifest (load_reader sets it)
        self.decoder_path: str | None = None  # the decoder's directory when it is not the default (load_reader)
        self.norm = nn.LayerNorm(config.token_dim)
        self.projector = ChunkProjector(config)
        self.selector = ChunkSelector(config)
        decoder = shared_weights_copy(decoder)
        for p in decoder.parameters():
            p.requires_grad_(False)
        if lora:
            from peft import LoraConfig, get_peft_model

            decoder = get_peft_model(decoder, LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha,
                                                         lora_dropout=0.0, target_modules=["q_proj", "v_proj"]))
        self.decoder = decoder
        eos = tokenizer.eos_token_id
        self.stop_ids = {eos, tokenizer.convert_tokens_to_ids("<|im_end|>")} - {None, tokenizer.unk_token_id}
        self.yes_no = (self._first_id(" Yes"), self._first_id(" No"))

    # ------------------------------------------------------------------ inputs

    def _first_id(self, text: str) -> int:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"][0]

    def text_embeds(self, text: str) -> torch.Tensor:
        table = self.decoder.get_input_embeddings()
        ids = torch.tensor(self.tokenizer(text, add_special_tokens=False)["input_ids"], device=table.weight.device)
        return table(ids)  # (t, hidden)

    def chunks(self, tokens: torch.Tensor) -> torch.Tensor:
        """(n, m, d) page tokens -> (n, L, k, d) normalised chunks."""
        n, m, d = tokens.shape
        if d != self.config.token_dim or m % self.config.k:
            raise ValueError(f"the reader expects (n, m, {self.config.token_dim}) tokens with m divisible by "
                             f"k={self.config.k}, got {tuple(tokens.shape)}")
        return self.norm(tokens).reshape(n, m // self.config.k, self.config.k, d)  # (n, L, k, d)

    def region_ids(self, words: list[str], regions: list[list[int]]) -> list[RegionTokens]:
        """Per chunk of a page (`regions`: the indices into the page's `words`, in reading order, of the
        words in each chunk), the decoder's token ids of those words, each word tokenised with its
        leading space (one batched call per page), and their reading positions."""
        ids = self.tokenizer([" " + w for w in words], add_special_tokens=False)["input_ids"] if words else []
        return [RegionTokens([t for i in region for t in ids[i]], [i for i in region for _ in ids[i]])
                for region in regions]

    def page_regions(self, pages: list[Any], grid: int) -> list[list[RegionTokens]]:
        """Per page (records with `.words`, `.width`, `.height`: a store's `PageRecord`, a `PageInput`),
        per chunk of its `grid x grid` layout: the token ids of the words in the chunk's region."""
        return [self.region_ids([w.text for w in p.words],
                                region_word_indices(p.words, p.width, p.height, grid, self.config.k)) for p in pages]

    def present(self, regions: list[list[list[int]]]) -> torch.Tensor | None:
        """(n, L) the chunks the decoder's input holds: with words compression, those with words (a
        chunk without words is left out); None with the projector (every chunk)."""
        if self.config.compression != "words":
            return None
        return torch.tensor([[bool(ids) for ids in page] for page in regions], dtype=torch.bool)

    def compressed(self, chunks: torch.Tensor, regions: list[list[list[int]]]) -> torch.Tensor:
        """(n, L, hidden): each chunk as one embedding, the projector's of its k tokens, or (words
        compression) the mean of the decoder's embeddings of its region's words (zero without words)."""
        if self.config.compression == "projector":
            return self.projector(chunks)
        table = self.decoder.get_input_embeddings()
        out = torch.zeros(*chunks.shape[:2], table.embedding_dim, dtype=table.weight.dtype, device=chunks.device)
        for i, page in enumerate(regions):
            for j, ids in enumerate(page):
                if ids:
                    out[i, j] = table(torch.tensor(ids, device=chunks.device)).mean(0)
        return out

    def native_mask(self, expand: torch.Tensor, regions: list[list[list[int]]]) -> torch.Tensor:
        """The selection (n, L) less the chunks without words and those past the expanded-token cap
        (taken in page order)."""
        keep = expand.clone()
        spent = 0
        for i, j in expand.nonzero().tolist():
            size = len(regions[i][j])
            if size == 0 or spent + size > self.config.max_expanded_tokens:
                keep[i, j] = False
            else:
                spent += size
        return keep

    def build(self, question: str, chunks: torch.Tensor, expand: torch.Tensor, regions: list[list[list[int]]],
              suffix: str) -> Sequence:
        """The decoder input for one question, the one build of every reading (answering, training
        rollouts and losses, reranking, evaluation, benchmarks): chunks (n, L, k, d), expand (n, L) bool,
        regions (per page, per chunk: the token ids of the region's words, `page_regions`). The chosen
        chunks of one band (grid row) are their regions' token embeddings, merged in reading order
        (`RegionTokens.order`: the lines they cut are whole again) at the place of the band's first
        chosen chunk (`native_mask` drops the chunks without words and those past the cap: they stay
        compressed); every other chunk is its one compressed embedding (`compressed`; with words
        compression a chunk without words is left out)."""
        n, L = chunks.shape[:2]
        dev = chunks.device
        if len(regions) != n or any(len(r) != L for r in regions):
            raise ValueError(f"regions must hold {L} token-id lists for each of the {n} pages")
        expand = self.native_mask(expand.cpu(), regions)
        present = self.present(regions)
        comp = self.compressed(chunks, regions)  # (n, L, hidden)
        table = self.decoder.get_input_embeddings()
        grid = math.isqrt(L * self.config.k)
        parts = [self.text_embeds(f"Question: {question}\n")]
        labels = [(-1, -1, -1)] * parts[0].shape[0]
        for i in range(n):
            sep = self.text_embeds(f"Page {i + 1}:")
            parts.append(sep)
            labels += [(-1, -1, -1)] * sep.shape[0]
            merged: set[int] = set()  # the bands whose chosen chunks are in
            for j in range(L):
                band = chunk_band(j, self.config.k, grid)
                if expand[i, j] and band not in merged:
                    merged.add(band)
                    chunks_of_band = itertools.takewhile(lambda c, b=band: chunk_band(c, self.config.k, grid) == b,
                                                         range(j, L))  # a band's chunks are consecutive
                    tokens = sorted((_orders(regions[i][c])[s], c, s, t) for c in chunks_of_band if expand[i, c]
                                    for s, t in enumerate(regions[i][c]))
                    parts.append(table(torch.tensor([t for *_, t in tokens], device=dev)).to(comp.dtype))
                    labels += [(i, c, s) for _, c, s, _ in tokens]  # (t_band, hidden)
                elif not expand[i, j] and (present is None or present[i, j]):
                    parts.append(comp[i, j:j + 1])  # (1, hidden)
                    labels.append((i, j, -1))
        parts.append(self.text_embeds(suffix))
        labels += [(-1, -1, -1)] * parts[-1].shape[0]
        page, chunk, slot = torch.tensor(labels, device=dev).T  # (3, S)
        return Sequence(torch.cat(parts), page, chunk, slot, expand)

    def question_vector(self, question: str) -> torch.Tensor:
        device = self.norm.weight.device
        return torch.from_numpy(np.asarray(self.embed_question([question])[0], dtype=np.float32)).to(device)

    def select(self, question: str, chunks: torch.Tensor, p: float, selector: Selector | None = None,
               present: torch.Tensor | None = None) -> torch.Tensor:
        """(n, L) bool mask of the floor(p * N) chunks the selector expands, among the N chunks of the
        decoder's input (`present`, (n, L) bool; None: all n * L)."""
        n, L = chunks.shape[:2]
        flat = chunks.reshape(n * L, *chunks.shape[2:])
        among = candidates(present, n, L).to(chunks.device)
        chosen = (selector or self.selector).choose(self.question_vector(question), flat[among],
                                                    budget(p, 1, among.numel()))
        mask = torch.zeros(n * L, dtype=torch.bool, device=chunks.device)
        mask[among[chosen.to(chunks.device)]] = True
        return mask.reshape(n, L)

    # ------------------------------------------------------------------ reading

    @torch.no_grad()
    def answer(self, question: str, tokens: torch.Tensor, regions: list[list[list[int]]], p: float | None = None,
               selector: Selector | None = None, max_new_tokens: int | None = None,
               stop: bool = True) -> ReaderOutput:
        """Read the pages' tokens (n, m, d), the chosen chunks expanded into their regions' words
        (`regions`, see `build`), and decode a short answer greedily."""
        start = time.perf_counter()
        chunks = self.chunks(tokens)
        expand = self.select(question, chunks, self.config.p if p is None else p, selector, self.present(regions))
        seq = self.build(question, chunks, expand, regions, ANSWER_SUFFIX)
        ids, ttft, tpot = self.decode(seq.embeds, max_new_tokens or self.config.max_new_tokens, start, stop)
        expanded = [(int(i), int(j)) for i, j in seq.expanded.nonzero().tolist()]
        return ReaderOutput(self.tokenizer.decode(ids, skip_special_tokens=True).strip(), expanded,
                            seq.embeds.shape[0], len(ids), ttft, tpot)

    def decode(self, embeds: torch.Tensor, max_new_tokens: int, start: float,
               stop: bool) -> tuple[list[int], float, float]:
        """Greedy decoding of one input (S, hidden): (token ids, time to first token, time per later token)."""
        rows, ttft, tpot = self.decode_batch(embeds[None], max_new_tokens, start, stop)
        return rows[0], ttft, tpot

    def decode_batch(self, embeds: torch.Tensor, max_new_tokens: int, start: float, stop: bool = True
                     ) -> tuple[list[list[int]], float, float]:
        """Greedy decoding of B inputs of the same length (B, S, hidden), each row stopping at its own
        stop token or line break: (token ids per row, time to first token, time per later step)."""
        steps = token_steps(self.decoder, inputs_embeds=embeds)
        next_ids, _ = next(steps)  # (B,)
        ttft = time.perf_counter() - start
        rows: list[list[int]] = [[] for _ in range(embeds.shape[0])]
        done = [False] * embeds.shape[0]
        n, t1 = 0, time.perf_counter()
        while True:
            for b, token in enumerate(next_ids.tolist()):
                if not done[b]:
                    if stop and (token in self.stop_ids or "\n" in self.tokenizer.decode([token])):
                        done[b] = True
                    else:
                        rows[b].append(token)
                        done[b] = len(rows[b]) >= max_new_tokens
            if all(done):
                break
            next_ids, _ = next(steps)
            n += 1
        return rows, ttft, (time.perf_counter() - t1) / max(n, 1)

    def yes_logits(self, question: str, tokens: torch.Tensor,
                   regions: list[list[list[int]]] | None = None) -> torch.Tensor:
        """(n,) log-odds of "Yes" against "No" for each page read alone, compressed, in one batch (one
        forward per page with words compression, whose pages differ in length). `regions` (per page, see
        `build`): what words compression compresses; the projector reads the tokens alone."""
        chunks = self.chunks(tokens)  # (n, L, k, d)
        n, L = chunks.shape[:2]
        if regions is None:
            if self.config.compression == "words":
                raise ValueError("a reader with words compression reranks pages from their words: pass regions")
            regions = [[[]] * L] * n
        none = torch.zeros(1, L, dtype=torch.bool)
        embeds = [self.build(question, chunks[i:i + 1], none, regions[i:i + 1], RERANK_SUFFIX).embeds for i in range(n)]
        batches = [torch.stack(embeds)] if len({e.shape[0] for e in embeds}) == 1 else [e[None] for e in embeds]
        logits = torch.cat([self.decoder(inputs_embeds=b, logits_to_keep=1).logits[:, -1] for b in batches])
        yes, no = self.yes_no
        return logits[:, yes] - logits[:, no]  # (n,)

    @torch.no_grad()
    def relevance(self, question: str, tokens: torch.Tensor, regions: list[list[list[int]]] | None = None,
                  batch: int = 10) -> list[float]:
        """P("Yes") of each page (n, m, d) for the question (`regions`: see `yes_logits`)."""
        scores = [torch.sigmoid(self.yes_logits(question, tokens[i:i + batch],
                                                None if regions is None else regions[i:i + batch]))
                  for i in range(0, tokens.shape[0], batch)]
        return torch.cat(scores).float().tolist() if scores else []

    def answer_log_probs(self, embeds: torch.Tensor, target: str, eos: bool) -> torch.Tensor:
        """(t,) log-probabilities of the tokens of " " + `target` (and the end token with `eos`),
        teacher-forced after the input (S, hidden): one forward pass."""
        ids = self.tokenizer(" " + target, add_special_tokens=False)["input_ids"]
        ids = torch.tensor(ids + ([self.tokenizer.eos_token_id] if eos else []), device=embeds.device)  # (t,)
        full = torch.cat([embeds, self.decoder.get_input_embeddings()(ids[:-1])])  # (S + t - 1, hidden)
        logits = self.decoder(inputs_embeds=full[None], logits_to_keep=ids.numel()).logits[0]  # (t, vocab)
        return logits.log_softmax(-1).gather(1, ids[:, None]).squeeze(1)  # (t,)

    def answer_loss(self, question: str, tokens: torch.Tensor, expand: torch.Tensor, regions: list[list[list[int]]],
                    target: str, suffix: str = ANSWER_SUFFIX) -> torch.Tensor:
        """Teacher-forced cross-entropy of `target` and the end token after the built input (training)."""
        seq = self.build(question, self.chunks(tokens), expand, regions, suffix)
        return -self.answer_log_probs(seq.embeds, target, eos=True).mean()

    def answer_reward(self, seq: Sequence, target: str) -> float:
        """The GRPO reward of a built input: the mean log-probability of the gold answer's tokens."""
        return float(self.answer_log_probs(seq.embeds, target, eos=False).mean())

    def trainable(self) -> dict[str, list[nn.Parameter]]:
        """The reader's trainable parameter groups (the decoder's own weights stay frozen)."""
        return {"norm": list(self.norm.parameters()), "projector": list(self.projector.parameters()),
                "selector": list(self.selector.parameters()),
                "lora": [p for n, p in self.decoder.named_parameters() if "lora_" in n]}


def decoder_fingerprint(decoder: nn.Module) -> str:
    """A short id of the decoder's architecture and vocabulary; a checkpoint refuses another decoder."""
    cfg = decoder.config.to_dict()
    keys = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")
    return hashlib.sha256(json.dumps({k: cfg.get(k) for k in keys}, sort_keys=True).encode()).hexdigest()[:16]


def load_decoder(path: Path | str) -> tuple[nn.Module, Any]:
    """A Hugging Face causal LM in float32 and its tokenizer from a local directory (never a hub
    download), through the process's one loader (`decoding.load_causal_lm`). The reader runs in
    float32 (its trained parts and their checkpoints are float32), so it shares the chat model's
    copy where the chat model runs in float32 (SmolLM2) and loads its own beside a bfloat16 or int8 one
    (the Qwen decoders, `decoding.cpu_form`)."""
    lm = load_causal_lm(_decoder_dir(path), dtype=torch.float32)
    return lm.model, lm.tokenizer


DEFAULT_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "reader"


def load_reader(checkpoint: Path | str | None = DEFAULT_CHECKPOINT, decoder: Path | str | None = None,
                embed_question: QuestionEmbedder | None = None, encoder_id: str | None = None) -> DocRefragReader:
    """A reader over the decoder at `decoder` (default: the cached SmolLM2-135M-Instruct) with the trained
    parts from `checkpoint` (default: the one shipped in the package; None: untrained, for training)."""
    from docrefrag.core.checkpoint import checkpoint_id, checkpoint_reader_config, load_checkpoint

    chosen = decoder
    if chosen is None and checkpoint is not None:  # a checkpoint trained on another decoder names it
        from docrefrag.core.checkpoint import CheckpointError, read_checkpoint_config

        chosen = read_checkpoint_config(checkpoint).get("decoder_path")
        if chosen is not None and not Path(chosen).is_dir():
            raise CheckpointError(f"reader checkpoint {checkpoint} was trained with the decoder at {chosen}, which "
                                  "is not there any more; put it back, or retrain with the default decoder")
    if chosen is None:
        from docrefrag.core.weights import model_dir
        from docrefrag.core.weights_registry import READER_DECODER

        decoder = model_dir(READER_DECODER)
    else:
        decoder = chosen
    embed_question, encoder_id = _question_encoder(embed_question, encoder_id)
    model, tokenizer = load_decoder(decoder)
    config = (checkpoint_reader_config(checkpoint) if checkpoint is not None
              else ReaderConfig(hidden=model.get_input_embeddings().embedding_dim))
    reader = DocRefragReader(model, tokenizer, config, embed_question).eval()
    reader.decoder_path = None if chosen is None else str(Path(chosen).resolve())
    if checkpoint is not None:
        load_checkpoint(reader, checkpoint, encoder_id)
        reader.checkpoint_id = checkpoint_id(checkpoint)
    return reader


def load_words_reader(checkpoint: Path | str = DEFAULT_CHECKPOINT, decoder: Path | str | None = None,
                      embed_question: QuestionEmbedder | None = None, encoder_id: str | None = None
                      ) -> DocRefragReader:
    """The reader over any decoder, training-free (`ReaderConfig.compression = "words"`): the checkpoint's
    selector and token norm (they read page tokens, not the decoder's embeddings) over the decoder at
    `decoder` (default: the agents' decoder, `DEFAULT_DECODER`) in its own dtype, the process's one copy
    that the chat model shares; no LoRA, and the projector is not read."""
    from dataclasses import replace

    from docrefrag.core.checkpoint import checkpoint_id, checkpoint_reader_config, load_parts
    from docrefrag.core.weights import model_dir
    from docrefrag.core.weights_registry import DEFAULT_DECODER

    path = _decoder_dir(decoder if decoder is not None else model_dir(DEFAULT_DECODER))
    embed_question, encoder_id = _question_encoder(embed_question, encoder_id)
    lm = load_causal_lm(path)
    config = replace(checkpoint_reader_config(checkpoint), compression="words",
                     hidden=lm.model.get_input_embeddings().embedding_dim)
    reader = DocRefragReader(lm.model, lm.tokenizer, config, embed_question, lora=False).eval()
    reader.decoder_path = str(path.resolve())
    load_parts(reader, checkpoint, encoder_id)
    reader.checkpoint_id = checkpoint_id(checkpoint)
    return reader


def _decoder_dir(path: Path | str) -> Path:
    """The directory of a Hugging Face causal LM, or a clear error naming what to do."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no decoder at {path} (no config.json); run `docrefrag models fetch` or pass "
                                f"the directory of a Hugging Face causal LM")
    return path


def _question_encoder(embed_question: QuestionEmbedder | None, encoder_id: str | None
                      ) -> tuple[QuestionEmbedder, str]:
    """The question embedder and page-encoder id a reader is loaded with (default: the page encoder's)."""
    if embed_question is None or encoder_id is None:
        from docrefrag.core.page_encoder import default_encoder

        encoder = default_encoder()
        embed_question = embed_question or encoder.embedder.embed_queries
        encoder_id = encoder_id or encoder.encoder_id
    return embed_question, encoder_id


def _orders(ids: list[int]) -> list[int]:
    """The reading positions of a region's tokens: its `RegionTokens.order`; a plain list of ids has
    none (its tokens follow the chunk order)."""
    return ids.order if isinstance(ids, RegionTokens) else [0] * len(ids)
