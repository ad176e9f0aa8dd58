"""The README's screenshot: a real `ask` with the default models through the web page, its citation clicked.

    python -m docrefrag.evals.readme_screenshot --store docrefrag-demo/store \
        --question "Which region had the highest rail passengers in Table 2?" --out docs/screenshot.png

Starts `docrefrag serve` on the store (every default: the local chat model, the answer agent, the
validator), opens the page in headless Chromium (Debian's `chromium` and `chromium-driver`; nothing is
downloaded), asks the question, waits for the answer, clicks its first citation and saves the screenshot.
The browser test (tests/integration/test_browser.py) drives the same page with a scripted model: it tests the page;
this shows what a user gets.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

WINDOW = (1280, 900)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def screenshot(store: Path, question: str, out: Path, timeout: float = 600) -> str:
    """Ask `question` on the page served over `store`, click the first citation, save the screenshot to
    `out`; return the answer shown."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "docrefrag", "serve", "--store", str(store), "--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must never fetch anything (the paths are given)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", "--hide-scrollbars", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync"):
        options.add_argument(arg)
    driver = None
    try:
        for _ in range(120):  # the server imports and opens the store first
            try:
                httpx.get(base + "/", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.5)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        driver.get(base + "/")
        WebDriverWait(driver, 60).until(lambda d: "ready" in d.find_element(By.ID, "documents").text)
        driver.find_element(By.ID, "question").send_keys(question)
        driver.find_element(By.ID, "ask-button").click()
        def answered(d) -> bool:
            shown = d.find_element(By.ID, "answer").is_displayed()
            return shown or bool(d.find_elements(By.CSS_SELECTOR, "#steps .error"))

        WebDriverWait(driver, timeout, poll_frequency=0.5).until(answered)
        answer = driver.find_element(By.ID, "answer-text").text
        citations = driver.find_elements(By.ID, "citation-0")
        if citations:
            citations[0].click()
            WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "citation-box").is_displayed())
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(1)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(driver.get_screenshot_as_png())
        return answer
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=30)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="an ingested store (docrefrag-demo/store, make demo)")
    ap.add_argument("--question", required=True, help="the question asked through the page")
    ap.add_argument("--out", type=Path, default=Path("docs/screenshot.png"), help="where the PNG goes")
    args = ap.parse_args(argv)
    print(f"answer shown: {screenshot(args.store, args.question, args.out)!r}; screenshot {args.out}")


if __name__ == "__main__":
    main()
