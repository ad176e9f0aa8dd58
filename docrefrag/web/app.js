// The page of `docrefrag serve`: upload documents and follow their ingest, ask a question and watch the
// agent's steps arrive (the server-sent events of POST /ask, read from the fetch body stream), read the
// answer, click a citation to see its page with the cited region boxed, and browse the retrieved pages
// with their fused / BM25 / visual scores. Plain JS, no build step; every text from the server is set as
// text, never as HTML. A bearer token, when the server wants one, comes from the URL's fragment
// (#token=...) or the form the page shows after a 401, and is kept for the tab (sessionStorage).
"use strict";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "docrefrag-token";
let token = sessionStorage.getItem(TOKEN_KEY) || "";
let names = {};  // doc id -> document name
let pollTimer = null;
let shown = { box: null, sequence: 0 };  // the cited box over the page shown, and the latest showPage call

function takeTokenFromFragment() {
  const match = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (match) {
    token = decodeURIComponent(match[1]);
    sessionStorage.setItem(TOKEN_KEY, token);
    history.replaceState(null, "", location.pathname + location.search);
  }
}

async function api(path, options = {}) {
  const headers = new Headers(options.headers || {});
  if (token) headers.set("Authorization", "Bearer " + token);
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) $("token-form").hidden = false;
  return response;
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (typeof body.detail === "string") return body.detail;
    if (Array.isArray(body.detail)) return body.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
    return JSON.stringify(body);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function score(value, digits) {
  return value === null || value === undefined ? "-" : Number(value).toFixed(digits);
}

function setStatus(id, text, isError = false) {
  const node = $(id);
  node.textContent = text;
  node.classList.toggle("error", isError);
}

// ------------------------------------------------------------------ images (fetched, so the token goes along)

async function loadImage(img, url) {
  const response = await api(url);
  if (!response.ok) throw new Error(await errorText(response));
  const blobUrl = URL.createObjectURL(await response.blob());
  if (img.dataset.blob) URL.revokeObjectURL(img.dataset.blob);
  img.dataset.blob = blobUrl;
  await new Promise((resolve, reject) => {
    img.onload = resolve;
    img.onerror = () => reject(new Error("the page image did not load"));
    img.src = blobUrl;
  });
}

// ------------------------------------------------------------------ documents and ingests

async function refreshDocuments() {
  clearTimeout(pollTimer);
  let body;
  try {
    const response = await api("/documents");
    if (!response.ok) {
      setStatus("upload-status", await errorText(response), true);
      return;
    }
    body = await response.json();
  } catch (err) {
    setStatus("upload-status", `the server did not answer (${err.message})`, true);
    pollTimer = setTimeout(refreshDocuments, 5000);
    return;
  }
  names = Object.fromEntries(body.documents.map((d) => [d.doc_id, d.name]));
  renderDocuments(body.documents);
  renderIngests(body.ingests);
  if (body.ingests.some((j) => j.state === "queued" || j.state === "ingesting")) {
    pollTimer = setTimeout(refreshDocuments, 1000);
  }
}

function renderDocuments(documents) {
  const rows = documents.map((d) => {
    let state = d.state;
    if (d.state !== "ready") state = `${d.state} ${d.pages_done}/${d.n_pages}`;
    const extra = [d.ocr_pages ? `${d.ocr_pages} OCR` : "", d.failed_pages ? `${d.failed_pages} failed` : ""]
      .filter(Boolean).join(", ");
    const progress = d.state === "ready" ? null : el("progress", { max: d.n_pages, value: d.pages_done });
    return el("tr", { "data-doc": d.doc_id },
      el("td", {}, d.name), el("td", {}, String(d.n_pages) + (extra ? ` (${extra})` : "")),
      el("td", {}, state, " ", progress));
  });
  $("documents").tBodies[0].replaceChildren(...rows);
  const select = $("doc-filter");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "" }, "all documents"),
    ...documents.filter((d) => d.state === "ready").map((d) => el("option", { value: d.doc_id }, d.name)));
  select.value = [...select.options].some((o) => o.value === chosen) ? chosen : "";
}

function renderIngests(ingests) {
  const items = ingests.slice(-8).reverse().map((j) => {
    const what = j.state === "ingesting" ? `ingesting ${j.pages_done}/${j.n_pages} pages`
      : j.state === "done" ? `done (${j.status}, ${j.n_pages} pages)` : j.state;
    const progress = j.state === "ingesting" ? el("progress", { max: j.n_pages, value: j.pages_done }) : null;
    const message = j.message ? el("span", { class: j.state === "failed" ? "snippet error" : "snippet" }, j.message) : null;
    return el("li", { "data-job": j.id, "data-state": j.state }, `${j.name}: ${what} `, progress, message);
  });
  $("ingests").replaceChildren(...items);
}

async function upload(event) {
  event.preventDefault();
  const files = $("upload-files").files;
  if (!files.length) return;
  const form = new FormData();
  for (const file of files) form.append("files", file, file.name);
  const name = $("upload-name").value.trim();
  if (name) form.append("name", name);
  $("upload-button").disabled = true;
  setStatus("upload-status", `uploading ${files.length} file(s)...`);
  try {
    const response = await api("/documents", { method: "POST", body: form });
    if (!response.ok) {
      setStatus("upload-status", await errorText(response), true);
      return;
    }
    const body = await response.json();
    const after = body.waiting_for.length ? ` (after ${body.waiting_for.join(", ")})` : "";
    setStatus("upload-status", `queued: ${body.ingests.map((j) => j.name).join(", ")}${after}`);
    $("upload-form").reset();
    refreshDocuments();
  } catch (err) {
    setStatus("upload-status", `the upload failed (${err.message})`, true);
  } finally {
    $("upload-button").disabled = false;
  }
}

// ------------------------------------------------------------------ asking: the event stream

async function readEvents(response, handle) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;  // a comment keeps the connection alive
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") name = text;
        else if (field === "data") data.push(text);
      }
      if (data.length) handle(name, JSON.parse(data.join("\n")));
    }
  }
}

function pageName(doc, page) {
  return `${names[doc] || doc} p.${page}`;
}

function describe(node, entry) {
  switch (node) {
    case "plan": {
      const plan = entry.plan || {};
      const parts = [];
      if ((plan.sub_queries || []).length) parts.push(`sub-queries: ${plan.sub_queries.join(" | ")}`);
      if ((plan.keywords || []).length) parts.push(`keywords: ${plan.keywords.join(", ")}`);
      if (plan.hyde) parts.push("HyDE passage written");
      return parts.join("; ") || "question planned";
    }
    case "retrieve":
      return `round ${entry.round}: ${(entry.hits || []).slice(0, 5).map((h) => pageName(h.doc_id, h.page)).join(", ")}`;
    case "enrich":
      return entry.hyde ? `the branches disagreed (${entry.query_disagreement}); HyDE passage written, searching again`
        : `the branches disagreed (${entry.query_disagreement}); searching again`;
    case "rerank":
      return entry.note || `reranked: ${(entry.hits || []).slice(0, 5).map((h) => pageName(h.doc_id, h.page)).join(", ")}`;
    case "gather":
      return `evidence: ${(entry.elements || []).length} elements opened, ${entry.tokens} tokens, `
        + `${entry.steps} steps (stopped: ${entry.stopped})`;
    case "answer":
      return `answer: ${entry.answer}`;
    case "validate":
      return `${entry.supported ? "supported" : "not supported"}, confidence ${score(entry.confidence, 2)}`
        + (entry.missing ? ` (${entry.missing})` : "");
    case "refine":
      return `new query: ${entry.query}`;
    default:
      return JSON.stringify(entry).slice(0, 200);
  }
}

function addStep(node, text, isError = false) {
  const item = el("li", { "data-node": node }, el("span", { class: "node" }, `[${node}] `), text);
  if (isError) item.classList.add("error");
  $("steps").append(item);
}

function onEvent(name, data) {
  if (name === "run") {
    const waiting = data.waiting_for.length ? `; waiting for ${data.waiting_for.join(", ")}` : "";
    addStep("run", `run ${data.run_id}${waiting}`);
  } else if (name === "result") {
    showAnswer(data);
  } else if (name === "error") {
    addStep("error", data.message, true);
  } else {
    for (const entry of data.trace) {
      addStep(name, describe(name, entry));
      if ((name === "retrieve" || name === "rerank") && entry.hits) showRetrieved(entry.hits);
    }
  }
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question) return;
  $("steps").replaceChildren();
  $("answer").hidden = true;
  $("retrieved").replaceChildren();
  const body = { question };
  if ($("doc-filter").value) body.doc = [$("doc-filter").value];
  $("ask-button").disabled = true;
  try {
    const response = await api("/ask", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    if (!response.ok) {
      addStep("error", await errorText(response), true);
      return;
    }
    await readEvents(response, onEvent);
  } catch (err) {
    addStep("error", `the question failed (${err.message})`, true);
  } finally {
    $("ask-button").disabled = false;
  }
}

// ------------------------------------------------------------------ the answer, its citations, the pages

function showAnswer(result) {
  $("answer-text").textContent = result.answer;
  let note = "";
  if (result.withheld) note = `withheld: "${result.withheld}" is not supported by the pages read (${result.unsupported_reason})`;
  else if (!result.supported) note = `NOT SUPPORTED by the pages read: ${result.unsupported_reason}`;
  setStatus("answer-note", note, Boolean(note));
  const items = result.citations.map((c, i) => {
    const button = el("button", {
      type: "button", class: "citation", id: `citation-${i}`,
      "data-doc": c.doc_id, "data-page": String(c.page), "data-bbox": c.bbox ? c.bbox.join(",") : "",
    }, `${c.name}, page ${c.page}`);
    button.addEventListener("click", () => showPage(c.doc_id, c.page, c.bbox));
    return el("li", {}, button, el("span", { class: "snippet" }, (c.snippet || "").split(/\s+/).join(" ").slice(0, 160)));
  });
  $("citations").replaceChildren(...items);
  setStatus("run-info", `confidence ${score(result.confidence, 2)}, ${result.rounds} round(s), `
    + `${score(result.seconds, 1)} s, run id ${result.run_id}`);
  $("answer").hidden = false;
  const last = result.trace.filter((e) => (e.node === "retrieve" || e.node === "rerank") && e.hits).pop();
  if (last) showRetrieved(last.hits);
}

function showRetrieved(hits) {
  const figures = hits.map((h) => {
    const img = el("img", { alt: pageName(h.doc_id, h.page), loading: "lazy" });
    const figure = el("figure", { class: "thumb", "data-doc": h.doc_id, "data-page": String(h.page) }, img,
      el("figcaption", {}, pageName(h.doc_id, h.page), el("br"),
        `fused ${score(h.fused, 4)}`, el("br"), `BM25 ${score(h.sparse, 3)}`, el("br"), `visual ${score(h.dense, 3)}`,
        h.rerank === null || h.rerank === undefined ? null : el("br"),
        h.rerank === null || h.rerank === undefined ? null : `rerank ${score(h.rerank, 3)}`));
    figure.addEventListener("click", () => showPage(h.doc_id, h.page, null));
    loadImage(img, `/documents/${h.doc_id}/pages/${h.page}.jpg`).catch(() => { img.alt += " (no image)"; });
    return figure;
  });
  $("retrieved").replaceChildren(...figures);
}

async function showPage(doc, page, bbox) {
  const sequence = ++shown.sequence;
  const img = $("page-image");
  const box = $("citation-box");
  box.hidden = true;
  try {
    const response = await api(`/documents/${encodeURIComponent(doc)}/pages/${page}`);
    if (!response.ok) throw new Error(await errorText(response));
    const info = await response.json();
    await loadImage(img, info.image);
    if (sequence !== shown.sequence) return;  // another page was asked for meanwhile
    img.alt = `page ${page} of ${info.name}`;
    img.dataset.widthPt = String(info.width);
    img.dataset.heightPt = String(info.height);
    img.hidden = false;
    shown.box = bbox;
    placeBox();
    img.dataset.doc = doc;  // set last: a test that sees them sees the page and its box in place
    img.dataset.page = String(page);
    setStatus("viewer-caption", `${info.name}, page ${page} of ${info.n_pages}`
      + (bbox ? `; cited region (${bbox.map((v) => Math.round(v)).join(", ")}) in PDF points` : ""));
    for (const thumb of document.querySelectorAll(".thumb")) {
      thumb.classList.toggle("selected", thumb.dataset.doc === doc && thumb.dataset.page === String(page));
    }
  } catch (err) {
    if (sequence === shown.sequence) setStatus("viewer-caption", err.message, true);
  }
}

function placeBox() {
  const img = $("page-image");
  const box = $("citation-box");
  if (!shown.box || img.hidden || !img.clientWidth) {
    box.hidden = true;
    return;
  }
  const sx = img.clientWidth / Number(img.dataset.widthPt);  // CSS pixels per PDF point
  const sy = img.clientHeight / Number(img.dataset.heightPt);
  const [x0, y0, x1, y1] = shown.box;
  box.style.left = `${x0 * sx}px`;
  box.style.top = `${y0 * sy}px`;
  box.style.width = `${(x1 - x0) * sx}px`;
  box.style.height = `${(y1 - y0) * sy}px`;
  box.dataset.bbox = shown.box.join(",");
  box.hidden = false;
}

// ------------------------------------------------------------------ wiring

takeTokenFromFragment();
$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("token").value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token-form").hidden = true;
  refreshDocuments();
});
$("upload-form").addEventListener("submit", upload);
$("ask-form").addEventListener("submit", ask);
new ResizeObserver(placeBox).observe($("page-image"));
refreshDocuments();
