"""OCR of page images with RapidOCR (ONNX models inside the wheel, nothing downloaded)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OcrWord:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    line: int  # index of the detected text line the word belongs to


@lru_cache(maxsize=1)
def _engine():
    from rapidocr import RapidOCR

    return RapidOCR(params={"Global.log_level": "error"})


def ocr_words(image: np.ndarray) -> list[OcrWord]:
    """Words with boxes (in image pixels) in reading order of the detected lines."""
    result = _engine()(image, use_cls=False, return_word_box=True)
    if result.txts is None or result.word_results is None:
        return []
    words: list[OcrWord] = []
    for line, items in enumerate(result.word_results):
        for text, _score, box in items:
            text = text.strip()
            if not text:
                continue
            xs = [p[0] for p in box]
            ys = [p[1] for p in box]
            words.append(OcrWord(text, float(min(xs)), float(min(ys)), float(max(xs)), float(max(ys)), line))
    return words
