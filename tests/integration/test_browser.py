"""The web page of `docrefrag serve` in headless Chromium (Debian's `chromium` and `chromium-driver`, driven
by selenium; nothing is downloaded at run time): a real uvicorn server over an empty store, the generated
report uploaded through the page's form and ingested, the table question asked, the answer and its
steps streamed in, the first citation clicked. Checked: the page shown is the cited one (its data
attributes, and the image's pixels are the server's render of that page); the cited box is drawn where the
citation says, in the screenshot's pixels (the citation's PDF-point bbox scaled by the rendered width
over the page width, the box's crimson border found on each edge of that rectangle and nowhere far
from it); the retrieved pages appear as thumbnails with their fused / BM25 / visual scores.

The screenshot is kept: in $DOCREFRAG_ARTEFACTS (else tmp_path), and copied to $DOCREFRAG_SCREENSHOT when
set (`DOCREFRAG_SCREENSHOT=docs/screenshot.png .venv/bin/python -m pytest tests/integration/test_browser.py` makes the
README's). Without the browser the test is skipped, except under CI (CI=true), where it fails.
"""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import socket
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pymupdf
import pytest
from conftest import ANSWER_PAGE, PAGE_SIZE, QUESTION, make_report
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from PIL import Image
from server_client import CONFIG, Script

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WINDOW = (1280, 900)
BORDER = (0xDC, 0x14, 0x3C)  # #citation-box's border colour in app.css (crimson), 3 px wide
BORDER_PX = 3
TOLERANCE_PX = 3  # of an edge found in the screenshot, in CSS pixels
ANSWER = "4,812"


def _no_browser(why: str) -> None:
    message = f"{why}: the browser test needs Debian's browser (apt-get install chromium chromium-driver) and " \
              "selenium (pip install -e '.[dev]')"
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        pytest.fail(f"CI is set and {message}")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """(base url, script) of a uvicorn server on a free loopback port over an empty store, its chat model
    scripted (the page is under test, not the model)."""
    import torch
    import uvicorn

    from docrefrag.server import create_app

    torch.set_num_threads(1)  # as conftest's embedder: the machine's second core is busy
    script = Script()
    app = create_app(tmp_path / "store", llm=GenericFakeChatModel(messages=script), config=CONFIG, workers=1)
    port = _free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", script
    finally:
        uv.should_exit = True
        thread.join(timeout=60)


@pytest.fixture
def browser(monkeypatch):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _no_browser("selenium is not installed")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.is_file():
            _no_browser(f"{path} is missing")
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium-manager must never fetch anything (the paths are given)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", "--hide-scrollbars", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.set_script_timeout(30)
        # --window-size is the window's outer size; make the viewport (what the screenshot shows) WINDOW
        inner = driver.execute_script("return [window.outerWidth - window.innerWidth, "
                                      "window.outerHeight - window.innerHeight]")
        driver.set_window_size(WINDOW[0] + inner[0], WINDOW[1] + inner[1])
        yield driver
    finally:
        driver.quit()


def _crimson(pixel: tuple[int, ...]) -> bool:
    return sum((a - b) ** 2 for a, b in zip(pixel[:3], BORDER, strict=True)) < 40 ** 2


def _keep(png: bytes, tmp_path: Path) -> Path:
    """The screenshot as a test artefact, and a copy (palette PNG, small) where $DOCREFRAG_SCREENSHOT says."""
    folder = Path(os.environ.get("DOCREFRAG_ARTEFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / "browser-citation.png"
    kept.write_bytes(png)
    if target := os.environ.get("DOCREFRAG_SCREENSHOT"):
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        small = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT)
        small.save(target, format="PNG", optimize=True)
        if target.stat().st_size > kept.stat().st_size:
            shutil.copyfile(kept, target)
    return kept


def test_a_cited_answer_shows_its_page_with_the_region_boxed(browser, server, tmp_path):
    # (the browser fixture first: without a browser, the test skips before a server starts)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, script = server
    driver = browser
    pdf = make_report(tmp_path / "transit-review.pdf")
    find = driver.find_element

    # ---- upload through the form and wait for the ingest to finish
    driver.get(base + "/")
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.readyState") == "complete")
    find(By.ID, "upload-files").send_keys(str(pdf))
    find(By.ID, "upload-button").click()
    WebDriverWait(driver, 240, poll_frequency=0.5).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#ingests li[data-state=done], #ingests li[data-state=failed]"))
    (job,) = find(By.ID, "ingests").find_elements(By.TAG_NAME, "li")
    assert job.get_attribute("data-state") == "done" and "6 pages" in job.text, job.text
    WebDriverWait(driver, 20).until(lambda d: "ready" in d.find_element(By.ID, "documents").text)
    (row,) = find(By.CSS_SELECTOR, "#documents tbody").find_elements(By.TAG_NAME, "tr")
    doc_id = row.get_attribute("data-doc")
    assert "transit-review.pdf" in row.text and "ready" in row.text, row.text

    # ---- ask, wait for the streamed steps and the answer
    script.set(ANSWER, "Yes")  # the answer agent's reply, then the validator's
    find(By.ID, "question").send_keys(QUESTION)
    find(By.ID, "ask-button").click()
    WebDriverWait(driver, 120, poll_frequency=0.25).until(
        lambda d: d.find_element(By.ID, "answer").is_displayed() or d.find_elements(By.CSS_SELECTOR, "#steps .error"))
    assert not find(By.ID, "steps").find_elements(By.CSS_SELECTOR, ".error"), find(By.ID, "steps").text
    assert find(By.ID, "answer-text").text == ANSWER.replace(",", "")  # as the question asks
    assert find(By.ID, "answer-note").text == ""  # supported: no "withheld" or "NOT SUPPORTED" note
    nodes = [li.get_attribute("data-node") for li in find(By.ID, "steps").find_elements(By.TAG_NAME, "li")]
    assert nodes == ["run", "plan", "retrieve", "rerank", "answer", "validate"], nodes
    citation = find(By.ID, "citation-0")
    cited_doc, cited_page = citation.get_attribute("data-doc"), int(citation.get_attribute("data-page"))
    bbox = [float(v) for v in citation.get_attribute("data-bbox").split(",")]
    assert (cited_doc, cited_page) == (doc_id, ANSWER_PAGE) and len(bbox) == 4, (cited_doc, cited_page, bbox)
    with pymupdf.open(pdf) as doc:  # the cited region holds the answer's cell of the table
        (cell,) = doc[ANSWER_PAGE - 1].search_for(ANSWER)
    assert bbox[0] <= cell.x0 and bbox[1] <= cell.y0 and cell.x1 <= bbox[2] and cell.y1 <= bbox[3], (bbox, cell)

    # ---- the retrieved pages: thumbnails with their scores
    thumbs = find(By.ID, "retrieved").find_elements(By.CSS_SELECTOR, "figure.thumb")
    assert thumbs and ANSWER_PAGE in [int(t.get_attribute("data-page")) for t in thumbs]
    for thumb in thumbs:
        caption = thumb.find_element(By.TAG_NAME, "figcaption").text
        for name in ("fused", "BM25", "visual"):  # each a number (the page writes "-" for a missing score)
            assert re.search(rf"\b{name} -?\d+\.\d+\b", caption), caption
    driver.execute_script("arguments[0].scrollIntoView()", thumbs[-1])  # the thumbnails load lazily
    WebDriverWait(driver, 20).until(lambda d: all(d.execute_script(
        "return arguments[0].complete && arguments[0].naturalWidth > 0", t.find_element(By.TAG_NAME, "img"))
        for t in thumbs))
    driver.execute_script("window.scrollTo(0, 0)")

    # ---- click the citation: the cited page is shown, its region boxed
    citation.click()
    image = find(By.ID, "page-image")
    WebDriverWait(driver, 30).until(lambda d: image.get_attribute("data-page") == str(cited_page)
                                    and d.find_element(By.ID, "citation-box").is_displayed())
    assert image.get_attribute("data-doc") == cited_doc
    assert find(By.ID, "citation-box").get_attribute("data-bbox") == citation.get_attribute("data-bbox")
    assert f"page {cited_page} of 6" in find(By.ID, "viewer-caption").text
    selected = find(By.ID, "retrieved").find_elements(By.CSS_SELECTOR, "figure.thumb.selected")
    assert [int(t.get_attribute("data-page")) for t in selected] == [cited_page]
    width_pt, height_pt = float(image.get_attribute("data-width-pt")), float(image.get_attribute("data-height-pt"))
    assert (width_pt, height_pt) == PAGE_SIZE
    # the image shown is the server's render of the cited page (its src is a blob: URL, which the page's CSP
    # keeps fetch from reading): its decoded pixels, drawn to a canvas, against the server's JPEG decoded here
    shown = driver.execute_script("""
        const img = arguments[0];
        const canvas = document.createElement("canvas");
        canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
        canvas.getContext("2d").drawImage(img, 0, 0);
        return canvas.toDataURL("image/png");""", image)
    shown = Image.open(io.BytesIO(base64.b64decode(shown.split(",", 1)[1]))).convert("RGB")
    info = httpx.get(f"{base}/documents/{cited_doc}/pages/{cited_page}").json()
    render = httpx.get(base + info["image"])
    assert render.status_code == 200 and info["image"] == f"/documents/{cited_doc}/pages/{cited_page}.jpg"
    served = Image.open(io.BytesIO(render.content)).convert("RGB")
    assert shown.size == served.size == (info["render"]["width"], info["render"]["height"])
    difference = np.abs(np.asarray(shown, dtype=np.int16) - np.asarray(served, dtype=np.int16)).mean()
    assert difference < 1.0, f"the page shown differs from the cited page's render by {difference:.2f} a channel"

    # ---- the box in the screenshot's pixels, where the citation's bbox scaled to the render says
    driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.3)  # a frame for the last layout (the ResizeObserver's placeBox) to be painted
    geometry = driver.execute_script("""
        const r = arguments[0].getBoundingClientRect();
        return { left: r.left, top: r.top, width: r.width, height: r.height, dpr: window.devicePixelRatio,
                 vw: window.innerWidth, vh: window.innerHeight };""", image)
    png = driver.get_screenshot_as_png()
    kept = _keep(png, tmp_path)
    shot = Image.open(io.BytesIO(png)).convert("RGB")
    dpr = geometry["dpr"]
    assert shot.size == (round(geometry["vw"] * dpr), round(geometry["vh"] * dpr)), (shot.size, geometry)
    assert (geometry["vw"], geometry["vh"]) == WINDOW, geometry
    sx, sy = geometry["width"] / width_pt, geometry["height"] / height_pt  # CSS px per PDF point
    assert abs(sx - sy) / sx < 0.01, (sx, sy)  # the page is not stretched
    x0, y0 = geometry["left"] + bbox[0] * sx, geometry["top"] + bbox[1] * sy
    x1, y1 = geometry["left"] + bbox[2] * sx, geometry["top"] + bbox[3] * sy
    assert 0 <= x0 < x1 <= geometry["vw"] and 0 <= y0 < y1 <= geometry["vh"], "the box is outside the screenshot"
    pixels = shot.load()

    def crimson_at(x: float, y: float) -> bool:  # x, y in CSS px
        return _crimson(pixels[int(x * dpr), int(y * dpr)])

    def border_run(fixed: float, along: float, vertical: bool) -> list[float]:
        """CSS px offsets (from `fixed`) of the crimson pixels across an edge, scanning +-10 px."""
        offsets = [i / (2 * dpr) for i in range(-20 * round(dpr), 20 * round(dpr) + 1)]
        return [o for o in offsets if crimson_at(*((fixed + o, along) if vertical else (along, fixed + o)))]

    # on each edge, at a quarter, the middle and three quarters: a crimson run starting at the expected
    # edge and BORDER_PX wide inward (border-box), within TOLERANCE_PX
    for edge, fixed, inward, vertical, span in (("left", x0, 1, True, (y0, y1)), ("right", x1, -1, True, (y0, y1)),
                                                ("top", y0, 1, False, (x0, x1)), ("bottom", y1, -1, False, (x0, x1))):
        for t in (0.25, 0.5, 0.75):
            run = border_run(fixed, span[0] + t * (span[1] - span[0]), vertical)
            assert run, f"no box border on the {edge} edge at {t:.0%} (expected at {fixed:.1f} CSS px)"
            outer = min(run) if inward == 1 else max(run)
            assert abs(outer) <= TOLERANCE_PX, f"the {edge} edge is {outer:+.1f} px from where the citation says"
            assert max(run) - min(run) <= BORDER_PX + TOLERANCE_PX, f"the {edge} edge is {run} wide"
    # inside (the table's cells) and outside the box: no border colour
    inner = [(x0 + (x1 - x0) * fx, y0 + (y1 - y0) * fy) for fx in (0.3, 0.5, 0.7) for fy in (0.3, 0.5, 0.7)]
    outer = [(x0 - 20, (y0 + y1) / 2), (x1 + 20, (y0 + y1) / 2), ((x0 + x1) / 2, y0 - 20), ((x0 + x1) / 2, y1 + 20)]
    for x, y in inner + outer:
        assert not crimson_at(x, y), f"border colour at ({x:.0f}, {y:.0f}), away from the box's edges"
    # and every border-coloured pixel of the screenshot lies on the box's outline
    rgb = np.asarray(shot, dtype=np.int32)
    ys, xs = np.nonzero(((rgb - np.array(BORDER)) ** 2).sum(axis=2) < 40 ** 2)
    margin = (BORDER_PX + TOLERANCE_PX) * dpr
    outside = (xs < x0 * dpr - margin) | (xs > x1 * dpr + margin) | (ys < y0 * dpr - margin) | (ys > y1 * dpr + margin)
    within = (xs > x0 * dpr + margin) & (xs < x1 * dpr - margin) & (ys > y0 * dpr + margin) & (ys < y1 * dpr - margin)
    stray = list(zip(xs[outside | within].tolist(), ys[outside | within].tolist(), strict=True))
    outline = 2 * ((x1 - x0) + (y1 - y0)) * BORDER_PX * dpr ** 2  # the border's area, in device pixels
    assert 0.8 * outline < len(xs) < 1.2 * outline, f"{len(xs)} border-coloured pixels, the outline has {outline:.0f}"
    assert not stray, f"{len(stray)} border-coloured pixels off the box's outline, e.g. {stray[:5]} (see {kept})"
    print(f"scale {sx:.4f} x {sy:.4f} CSS px/pt, dpr {dpr}, box ({x0:.1f}, {y0:.1f})-({x1:.1f}, {y1:.1f}) CSS px; "
          f"screenshot {kept}")
