"""Benchmark loaders, document discovery and retrieval metrics (hand-computed expectations)."""

import json
import math

import numpy as np
import pytest

from docrefrag.evals.datasets import document_sources, load_questions, mmlongbench_format, split_available
from docrefrag.evals.jsonl import load_rows
from docrefrag.evals.metrics import mean_metrics, retrieval_metrics


def test_mmlongbench_samples_are_parsed_without_eval(tmp_path):
    (tmp_path / "samples.json").write_text(json.dumps([
        {"doc_id": "a.pdf", "doc_type": "Academic paper", "question": "Q1?", "answer": "['x', 'y']",
         "evidence_pages": "[2, 5]", "evidence_sources": "['Table', 'Chart']", "answer_format": "List"},
        {"doc_id": "b.pdf", "doc_type": "Guidebook", "question": "Q2?", "answer": "Not answerable",
         "evidence_pages": "[]", "evidence_sources": "[]", "answer_format": "None"},
    ]))
    q1, q2 = load_questions("mmlongbench", tmp_path)
    assert q1.evidence_pages == (2, 5) and q1.evidence_sources == ("Table", "Chart") and q1.answerable
    assert q1.doc_type == "Academic paper" and q1.qid == "mmlongbench-0"
    assert q2.evidence_pages == () and not q2.answerable


def test_malicious_list_literal_is_rejected(tmp_path):
    (tmp_path / "samples.json").write_text(json.dumps([
        {"doc_id": "a.pdf", "question": "Q", "answer": "1", "evidence_pages": "__import__('os').getcwd()",
         "evidence_sources": "[]", "answer_format": "Int"}]))
    with pytest.raises(ValueError):
        load_questions("mmlongbench", tmp_path)


def test_longdocurl_native_jsonl(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question_id": "free_1", "doc_no": "4055915", "question": "How many?", "answer": 5,
                                "evidence_pages": [54], "evidence_sources": ["Table"], "answer_format": "Integer",
                                "task_tag": "Reasoning", "start_end_idx": [42, 71]}) + "\n")
    (q,) = load_questions("longdocurl", path)
    assert (q.qid, q.doc_name, q.answer, q.evidence_pages, q.task) == ("free_1", "4055915.pdf", "5", (54,), "Reasoning")
    assert mmlongbench_format(q) == "Int" and q.extra["start_end_idx"] == [42, 71]


def test_longdocurl_in_mmlongbench_style_fields_gets_its_own_formats(tmp_path):
    """The shared LongDocURL set writes formats as MMLongBench-Doc does (Int, Str); LongDocURL's scorer
    knows Integer and String, and scores "$150000" against 150000 as equal where MMLongBench's would not."""
    from docrefrag.evals.answers import score

    (tmp_path / "samples.json").write_text(json.dumps([
        {"id": f"q{i}", "doc_id": "4026369.pdf", "question": "Q", "answer": answer, "evidence_pages": "[67]",
         "evidence_sources": "['Layout']", "answer_format": fmt, "task_type": "Understanding"}
        for i, (answer, fmt) in enumerate([("150000", "Int"), ("University Project", "Str"), ("0.5", "Float")])]))
    questions = load_questions("longdocurl", tmp_path)
    assert [q.answer_format for q in questions] == ["Integer", "String", "Float"]
    assert [mmlongbench_format(q) for q in questions] == ["Int", "Str", "Float"]
    assert [score(q, p) for q, p in zip(questions, ["$150000", "university project", "0.5"],
                                        strict=True)] == [1.0, 1.0, 1.0]


def test_documents_as_pdfs_or_page_image_folders(tmp_path):
    (tmp_path / "pdfs").mkdir()
    (tmp_path / "pdfs" / "4000400.pdf").write_bytes(b"%PDF")
    images = tmp_path / "page_images" / "4055915"
    images.mkdir(parents=True)
    (images / "4055915_0.png").write_bytes(b"")
    sources = document_sources(tmp_path)
    assert sources["4000400.pdf"].name == "4000400.pdf" and sources["4055915.pdf"] == images
    (tmp_path / "samples.json").write_text(json.dumps([
        {"doc_id": d, "question": "Q", "answer": "1", "evidence_pages": "[1]", "evidence_sources": "[]",
         "answer_format": "Int"} for d in ("4000400.pdf", "4055915.pdf", "missing.pdf")]))
    present, missing = split_available(load_questions("mmlongbench", tmp_path), sources)
    assert [q.doc_name for q in present] == ["4000400.pdf", "4055915.pdf"]
    assert [q.doc_name for q in missing] == ["missing.pdf"]


def test_retrieval_metrics_by_hand():
    m = retrieval_metrics([3, 7, 2, 9, 1], [2, 8], ks=(1, 3, 5))
    assert m["recall@1"] == 0 and m["recall@3"] == 0.5 and m["recall@5"] == 0.5
    assert m["precision@3"] == pytest.approx(1 / 3) and m["precision@5"] == pytest.approx(0.2)
    assert m["mrr@1"] == 0 and m["mrr@3"] == pytest.approx(1 / 3)
    ideal = 1 + 1 / math.log2(3)
    assert m["ndcg@3"] == pytest.approx((1 / math.log2(4)) / ideal)
    assert retrieval_metrics([5], [5], ks=(1,))["ndcg@1"] == 1.0
    with pytest.raises(ValueError, match="relevant"):
        retrieval_metrics([1], [])
    assert mean_metrics([{"a": 1.0}, {"a": 0.0}]) == {"a": 0.5}


def test_jsonl_log_resumes(tmp_path):
    log = tmp_path / "runs" / "x.jsonl"
    assert load_rows(log) == {} and log.parent.is_dir()
    log.write_text(json.dumps({"qid": "a", "v": 1}) + "\n" + json.dumps({"qid": "b", "v": 2}) + "\n")
    assert load_rows(log) == {"a": {"qid": "a", "v": 1}, "b": {"qid": "b", "v": 2}}


def test_a_log_resumes_only_under_its_own_settings(tmp_path, caplog):
    log = tmp_path / "runs" / "x-answers.jsonl"
    settings = {"llm": {"type": "openai-chat", "model": "m", "base_url": "http://127.0.0.1:8000/v1"},
                "config": {"tau": 0.5, "pages": (3, 5)}}
    assert load_rows(log, settings) == {}  # a new log takes the run's settings
    log.write_text(json.dumps({"qid": "a", "v": 1}) + "\n")
    assert load_rows(log, settings) == {"a": {"qid": "a", "v": 1}}  # tuples compare as they read back
    other = {**settings, "config": {"tau": 0.9, "pages": (3, 5)}}
    with pytest.raises(ValueError, match=r"1 rows made with other settings \(config differ.*another --out"):
        load_rows(log, other)
    assert json.loads((tmp_path / "runs" / "x-answers.settings.json").read_text())["config"]["tau"] == 0.5
    (tmp_path / "runs" / "x-answers.settings.json").unlink()  # a log of an older version: adopted, with a warning
    assert load_rows(log, other) == {"a": {"qid": "a", "v": 1}} and "no settings record" in caplog.text
    with pytest.raises(ValueError, match="other settings"):
        load_rows(log, settings)


def test_run_settings_tell_models_apart():
    from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel

    from docrefrag.agents.llm_factory import make_llm
    from docrefrag.evals.harness import model_identity

    a, b = (make_llm(f"openai:m@http://127.0.0.1:{port}/v1") for port in (8000, 8001))
    assert model_identity(a) != model_identity(b) and model_identity(a)["model"] == "m"
    assert model_identity(ParrotFakeChatModel()) != model_identity(a) and model_identity(None) is None


def test_one_planner_run_gives_the_whole_planner_ablation(tmp_path, store, ingest, light_pdf, embedder):
    from docrefrag.agents.schemas import Plan
    from docrefrag.evals.datasets import Question
    from docrefrag.evals.retrieval import evaluate_retrieval, plan_variants
    from docrefrag.indexes.hybrid import HybridSearcher

    (result,) = ingest(store, light_pdf(tmp_path / "survey.pdf", 12))
    question = "How many otters were counted in the survey?"
    q = Question("q1", "mmlongbench", "survey.pdf", question, "4", "Int", (7,), ())
    calls = []

    def planner(text: str) -> Plan:  # stands in for the LLM: one sub-query and a HyDE passage
        calls.append(text)
        return Plan(sub_queries=[text, "otters near station s007"], keywords=["otters", "counted"],
                    hyde="Near station s007 the survey counted four otters.")

    searcher = HybridSearcher(store, embedder)
    report = evaluate_retrieval(store, searcher, [q], {"survey.pdf": result.doc_id}, tmp_path / "p.jsonl",
                                show_progress=False, planner=planner, hyde=True, decompose=True)
    assert calls == [question]  # planned once for every variant
    variants = ["question", "rules", "hyde", "decomposition", "hyde+decomposition", "hyde-on-disagreement",
                "decomposition-on-disagreement", "hyde+decomposition-on-disagreement"]
    assert list(plan_variants(planner(question), question, True, True)) == variants
    assert set(report.methods) == {f"{v}/{m}" for v in variants
                                   for m in ("sparse", "dense", "rrf", "sum", "consistency")}
    row = json.loads((tmp_path / "p.jsonl").read_text())
    alone = evaluate_retrieval(store, searcher, [q], {"survey.pdf": result.doc_id}, tmp_path / "q.jsonl",
                               show_progress=False)
    plain = json.loads((tmp_path / "q.jsonl").read_text())
    for m in ("sparse", "dense", "consistency"):  # the "question" variant is the run without a planner
        assert row[f"question/{m}"]["ranked"] == plain[m]["ranked"]
    assert alone.methods["consistency"] == report.methods["question/consistency"]
    # the sub-query names the evidence page's station: decomposition brings page 7 up
    rank = {v: row[f"{v}/sparse"]["ranked"].index(7) for v in ("rules", "decomposition")}
    assert rank["decomposition"] < rank["rules"], rank
    assert row["hyde/dense"]["ranked"] != row["rules/dense"]["ranked"]
    assert row["plan"]["hyde"].startswith("Near station s007")
    only_hyde = plan_variants(planner(question), question, True, False)
    assert list(only_hyde) == ["question", "rules", "hyde", "hyde-on-disagreement"]
    assert only_hyde["hyde"].sub_queries == [question]
    # the graph's default: HyDE only where the rules plan's branches disagree (Q >= the threshold)
    from docrefrag.agents.retrieval import search_plan

    rules = plan_variants(planner(question), question, True, False)["rules"]
    q_rules = search_plan(rules, question, searcher, [result.doc_id], 10, "consistency")[1][0].query_disagreement
    assert row["query_disagreement"] == q_rules
    for threshold, disagree in ((q_rules, True), (float(np.nextafter(q_rules, 2.0)), False)):
        out = tmp_path / f"{disagree}.jsonl"
        evaluate_retrieval(store, searcher, [q], {"survey.pdf": result.doc_id}, out, show_progress=False,
                           planner=planner, hyde=True, decompose=True, disagreement=threshold)
        adaptive = json.loads(out.read_text())
        for v in ("hyde", "decomposition", "hyde+decomposition"):
            for m in ("sparse", "dense", "consistency"):
                assert (adaptive[f"{v}-on-disagreement/{m}"]["ranked"]
                        == adaptive[f"{v if disagree else 'rules'}/{m}"]["ranked"])
    assert adaptive["hyde/dense"]["ranked"] != adaptive["hyde-on-disagreement/dense"]["ranked"]
    assert adaptive["decomposition/sparse"]["ranked"] != adaptive["decomposition-on-disagreement/sparse"]["ranked"]


def test_accuracy_by_budget_plot(tmp_path):
    from matplotlib import image

    from docrefrag.evals.report import accuracy_by_budget

    rows = [{"p": p, "selector": name, "accuracy": acc} for name, accs in
            {"random": (0.1, 0.2, 0.3), "similarity": (0.3, 0.5, 0.6)}.items()
            for p, acc in zip((0.1, 0.2, 0.3), accs, strict=True)]
    out = accuracy_by_budget(rows, tmp_path / "p.png", "test")
    pixels = image.imread(out)[..., :3]
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    # one line per selector, in matplotlib's first two colours (C0 blue, C1 orange)
    for rgb in ((0.122, 0.467, 0.706), (1.0, 0.498, 0.055)):
        assert (np.abs(pixels - rgb).sum(axis=-1) < 0.05).sum() > 200, rgb


def test_answers_markdown_report_has_every_breakdown(tmp_path):
    from docrefrag.evals.report import answers_markdown

    summary = {"benchmark": "mmlongbench", "date": "2026-11-30", "questions": 3, "extraction": "none",
               "accuracy": 1 / 3,
               "by_evidence_pages": {"Single-page": {"accuracy": 0.5, "count": 2},
                                     "Unanswerable": {"accuracy": 0.0, "count": 1}},
               "cross_element": {"accuracy": 0.25, "count": 4}, "latency_s": {"p50": 1.5, "p95": 3.25},
               "settings": {"encoder": "layout-grid", "config": {"pages": 8, "tau": 0.6}, "extractor": None}}
    text = answers_markdown(summary, tmp_path / "lat.png")  # the settings (strings, nested dicts) crashed it
    assert text.startswith("# mmlongbench end to end (3 questions, 2026-11-30)")
    assert "| accuracy | 0.333 |" in text and "| extraction | none |" in text
    assert ("## by evidence pages" in text and "| Single-page | 0.500 | 2 |" in text
            and "| Unanswerable | 0.000 | 1 |" in text)
    assert "| cross element | 0.250 (4 questions) |" in text and "| latency s | p50 1.50, p95 3.25 |" in text
    assert "## settings" in text and '"encoder": "layout-grid"' in text and '"tau": 0.6' in text
    assert text.rstrip().endswith("![latency](lat.png)")


def test_reader_eval_questions_have_one_evidence_page_inside_a_ready_document(tmp_path):
    """The dev-set pool of the reader evaluations: one evidence page that the document has (the dev set
    labels one question "page 0"), an answerable question, a ready document; spread over the file."""
    from types import SimpleNamespace

    from docrefrag.evals.reader_evals import single_evidence_questions

    rows = [("a.pdf", "[3]", "7"), ("a.pdf", "[0]", "7"), ("a.pdf", "[13]", "7"), ("a.pdf", "[2, 3]", "7"),
            ("a.pdf", "[4]", "Not answerable"), ("b.pdf", "[1]", "7"), ("c.pdf", "[1]", "7"), ("a.pdf", "[12]", "7")]
    (tmp_path / "samples.json").write_text(json.dumps([
        {"doc_id": doc, "question": f"Q{i}?", "answer": answer, "evidence_pages": pages, "evidence_sources": "[]",
         "answer_format": "Int" if answer == "7" else "None"} for i, (doc, pages, answer) in enumerate(rows)]))
    docs = [SimpleNamespace(name="a.pdf", n_pages=12, status="ready"),
            SimpleNamespace(name="b.pdf", n_pages=5, status="ingesting")]
    questions = load_questions("mmlongbench", tmp_path)
    assert [q.question for q in single_evidence_questions(questions, docs, 10)] == ["Q0?", "Q7?"]
    assert [q.question for q in single_evidence_questions(questions, docs, 1)] == ["Q0?"]


def test_answers_are_reported_answerable_and_unanswerable_next_to_always_abstaining():
    from docrefrag.evals.answers import answerable_split

    def row(answer, pred, score, withheld="", unabstained=None):
        return {"answer": answer, "answer_format": "None" if answer == "Not answerable" else "Int", "pred": pred,
                "score": score, "withheld": withheld, "score_without_abstention": unabstained}

    rows = [row("4812", "4812", 1.0), row("17", "Not answerable", 0.0, withheld="17", unabstained=1.0),
            row("3", "5", 0.0), row("Not answerable", "Not answerable", 1.0, withheld="9", unabstained=0.0)]
    split = answerable_split("mmlongbench", rows)
    assert split["answerable"] == {"accuracy": 1 / 3, "count": 3}
    assert split["unanswerable"] == {"accuracy": 1.0, "count": 1}
    assert split["always_not_answerable"] == {"accuracy": 0.25, "count": 4}  # scored by the official rules
    assert (split["abstained"], split["withheld"]) == (2, 2)
    assert split["accuracy_without_abstention"] == 0.5  # the withheld answers given instead: 1 + 1 + 0 + 0


def test_abstention_signals_are_ranked_by_auroc_and_scored_as_abstaining_below_a_cut():
    from docrefrag.evals.bench_abstention import auroc, summarise

    assert auroc([0.9, 0.8], [0.1, 0.8]) == 0.875  # 3 of 4 pairs ordered, one tie counted half
    rows = [{"answerable": True, "score": 1.0, "abstain_score": 0.0, "confidence": 0.9, "lexical": 1.0,
             "answer_logprob": -0.1},
            {"answerable": True, "score": 0.0, "abstain_score": 0.0, "confidence": 0.3, "lexical": 0.0,
             "answer_logprob": -2.0},
            {"answerable": False, "score": 0.0, "abstain_score": 1.0, "confidence": 0.2, "lexical": 1.0,
             "answer_logprob": -1.0},
            {"answerable": False, "score": 1.0, "abstain_score": 1.0, "confidence": None, "lexical": None,
             "answer_logprob": None}]  # the system abstained itself
    out = summarise(rows)
    assert (out["answered"], out["accuracy_as_answered"], out["always_not_answerable"]) == (3, 0.5, 0.5)
    confidence = out["signals"]["confidence"]
    assert (confidence["auroc"], confidence["right"], confidence["wrong"]) == (1.0, 1, 2)
    assert confidence["accuracy_abstaining_below"]["0.500"] == 0.75  # rows 2 and 3 abstain: row 3 becomes right
    assert out["signals"]["lexical"]["auroc"] == 0.75


def test_the_harness_and_the_graph_share_one_rerank_and_one_gate():
    """`reorder` is the ask graph's rerank step and the harness's "reranked" method; `disagrees` the gate of both."""
    from docrefrag.agents.planner import DISAGREEMENT, disagrees
    from docrefrag.agents.rerank import reorder

    pages = [("d", 1), ("d", 2), ("d", 3), ("d", 4)]
    order, scores = reorder(lambda q, p: [0.2, 0.9, 0.2, 0.5], "q", pages)
    assert order == [1, 3, 0, 2]  # the tie (pages 1 and 3) keeps the fused order
    assert scores == [0.2, 0.9, 0.2, 0.5]
    assert reorder(lambda q, p: [], "q", []) == ([], [])
    assert disagrees(DISAGREEMENT) and not disagrees(float(np.nextafter(DISAGREEMENT, 0.0)))
    assert disagrees(0.3, threshold=0.3) and not disagrees(0.3, threshold=0.31)


def test_candidates_rank_best_first_with_ties_in_order():
    from docrefrag.indexes.hybrid import Candidates, best_first

    assert best_first(np.array([0.1, 0.5, 0.5, -1.0])).tolist() == [1, 2, 0, 3]
    nan = float("nan")
    cands = Candidates(["d"], [("d", 1), ("d", 2), ("d", 3)], np.array([1.0, 3.0, nan]), np.array([nan, 0.2, 0.9]),
                       None)
    assert cands.ranked("sparse") == [("d", 2), ("d", 1), ("d", 3)]
    fused = cands.fuse("consistency")[0]
    assert cands.ranked("consistency") == [cands.keys[i] for i in np.argsort(-fused, kind="stable")]
