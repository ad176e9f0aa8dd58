"""Answers in the benchmarks' forms, numbers matched across forms, support from every page read, tables
read as labelled rows, and query-focused reading. No model weights: these run in a second.
"""

from __future__ import annotations

import pytest

from docrefrag.agents.answer import (
    PageText,
    answered,
    cite,
    echoes,
    even_bullets,
    focused,
    ranked_items,
    table_view,
)
from docrefrag.agents.forms import (
    answer_form,
    asks_for_name,
    format_answer,
    lexical_support,
    miscast,
    number_values,
    stated_claim,
)
from docrefrag.agents.schemas import Citation, Claim
from docrefrag.agents.validation import anchored_evidence, question_anchors, validate
from docrefrag.evals.score_mmlongbench import mmlongbench_score


@pytest.mark.parametrize(("answer", "page"), [
    ("4812", "Nordic | 4,812 | 3"), ("4,812", "the Nordic total was 4812"), ("4812", "revenue of 4.812 thousand"),
    ("42%", "a share of 42 percent"), ("42 percent", "rose to 42%"), ("0.42", "a share of 42%"),
    ("4.8 million", "4,800,000 visits"), ("Greta Svensson", "the chair is Greta Svensson, who"),
])
def test_numbers_and_names_in_other_forms_are_supported(answer, page):
    assert lexical_support(answer, page) == 1.0


def test_other_numbers_are_not_support():
    assert lexical_support("4812", "Nordic | 4,813") == 0.0
    assert lexical_support("3,5", "a rate of 3.5") == 0.0  # a decimal comma is not a thousands separator
    assert lexical_support("42", "a share of 0.42") == 0.0  # a bare fraction is no percentage
    assert number_values("4.8 million") == {4.8, 4_800_000.0}


def test_a_right_answer_on_a_page_read_but_not_cited_is_not_withheld():
    pages = [PageText("d", 3, "Table 4: Nordic | 2025: 4,812 | 2024: 4,100", []),
             PageText("d", 5, "The Nordic region grew in 2025.", [])]
    claims = [Claim(text="4812", citations=[Citation(doc_id="d", page=5)])]  # cited where it is not written
    verdict = validate("What was the Nordic revenue in 2025?", "4812", claims, pages, llm=None)
    assert verdict.supported and verdict.confidence == 1.0


def test_an_option_letter_is_checked_as_its_option_and_a_yes_by_the_judge():
    """LongDocURL's image documents: 3 right "Yes" and a right "A" were withheld, as no page writes them."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    options = ("What are the premiums for 1st, 2nd and 3rd place in the Talent Show?\n(A). 100, 50, 25\n"
               "(B). 75, 50, 40\nChoose the letter name in front of the right option from A, B.")
    assert stated_claim(options, "B") == "75, 50, 40" and stated_claim(options, "(A).") == "100, 50, 25"
    assert stated_claim("Is the fee $40, yes or no?", "Yes") is None and stated_claim("Who?", "A") == "A"
    assert stated_claim(options.replace("(B). 75, 50, 40", "b) 75, 50, 40"), "b") == "75, 50, 40"
    assert stated_claim("A. Smith wrote which report?", "A") == "A"  # one line like an option is no list of them
    assert stated_claim("(A).\n(B). 75\n(C). 9", "A") == "A"  # an empty option does not borrow the next line
    assert answered(options, "B") and answered(options, "(A)")  # a letter repeats the question, yet answers it
    pages = [PageText("d", 52, "Talent Show, Adult Amateurs: 1st $75, 2nd $50, 3rd $40.", [])]
    claims = [Claim(text="x", citations=[Citation(doc_id="d", page=52)])]
    assert validate(options, "B", claims, pages, None).supported
    assert not validate(options, "A", claims, pages, None).supported
    asked = "Is there a talent show in the document? Choose yes or no."
    judged = [validate(asked, answer, claims, pages, GenericFakeChatModel(messages=iter([AIMessage(reply)])))
              for answer, reply in (("Yes", "Yes"), ("No", "No"))]
    assert judged[0].supported and judged[0].confidence == 1.0
    assert not judged[1].supported and "judge" in judged[1].missing
    assert not validate(asked, "Yes", claims, pages, None).supported  # no judge, nothing weighs a yes


def test_a_figure_of_another_year_is_not_support():
    text = ("In 2021 the Oakfield division handled 21,251 shipments, compared with 18,000 in 2020. "
            "The plan lists 8 priorities for 2015.\n\nPriority markets for 2022:\n\n- Chile\n\n- Peru\n\n- Ghana")
    pages = [PageText("d", 1, text, [])]
    claims = [Claim(text="21251", citations=[Citation(doc_id="d", page=1)])]
    asked_2015 = validate("How many shipments did the Oakfield division handle in 2015?", "21251", claims, pages, None)
    asked_2021 = validate("How many shipments did the Oakfield division handle in 2021?", "21251", claims, pages, None)
    assert not asked_2015.supported and asked_2021.supported
    asked_2013 = validate("How many shipments did the Oakfield division handle in 2013?", "21251", claims, pages, None)
    assert not asked_2013.supported  # pages that never state the question's year support nothing
    markets = anchored_evidence("Which countries are the priority markets for 2022?", pages)
    assert lexical_support("['Chile', 'Peru', 'Ghana']", markets) == 1.0  # a lead-in's list counts with it
    dated = [PageText("d", 1, "SHARE CAPITAL BY OWNER AS OF 31.12.2020:\nInstitutional investors | Share: 79%", [])]
    assert lexical_support("79", anchored_evidence("What share do institutions hold as of 31.12.2020?", dated)) == 1.0


def test_the_anchors_of_a_question_are_its_years_and_the_tables_it_names():
    assert question_anchors("What was the 2021 value in Table 6 for the top 3 regions?") == [2021.0, 6.0]
    assert question_anchors("How many of the 12 stores opened?") == []


@pytest.mark.parametrize(("question", "form"), [
    ("How many megawatts did the Highland region report in 2016?", "integer"),
    ("In which year did the plant open?", "integer"),
    ("What percentage of adults use the internet?", "number"),
    ("Which countries are the priority markets for 2022?", "list"),
    ("What are the two main causes of delay?", "list"),
    ("Which region had the highest revenue in Table 2?", "string"),
    ("Who is the chief executive officer?", "string"),
])
def test_the_form_is_read_from_the_question(question, form):
    assert answer_form(question) == form


@pytest.mark.parametrize(("question", "reply", "written", "gold", "gold_format"), [
    ("How many shipments did the unit handle?", "12,671 shipments", "12671", "12671", "Int"),
    ("How many times did they meet?", "two", "2", "2", "Int"),
    ("What percentage of adults use it?", "42.5%", "42.5", "42.5", "Float"),
    ("What was the revenue of the Nordic unit in 2025?", "4,812", "4812", "4812", "Int"),
    ("Which countries are the priority markets?", "Chile, Peru and Ghana", "['Chile', 'Peru', 'Ghana']",
     "['Peru', 'Chile', 'Ghana']", "List"),
    ("Which region had the highest revenue?", "['Nordic']", "Nordic", "Nordic", "Str"),
    ("Who chairs the board?", "Smith, John", "Smith, John", "Smith, John", "Str"),
    ("How many shipments did the unit handle?", "Not answerable", "Not answerable", "Not answerable", "None"),
])
def test_answers_are_written_in_the_form_the_scorer_accepts(question, reply, written, gold, gold_format):
    assert format_answer(question, reply) == written
    assert mmlongbench_score(gold, written, gold_format) == 1.0


def test_a_table_is_read_as_rows_labelled_with_their_columns():
    markdown = ("Intro line.\n\n|Region|2024|2025|\n|---|---|---|\n|Nordic|4,100|4,812|\n|Iberia<br>South|3,9|2,7|\n\n"
                "Table 4: revenue.")
    view = table_view(markdown)
    assert "Nordic | 2024: 4,100 | 2025: 4,812" in view and "Iberia South | 2024: 3,9 | 2025: 2,7" in view
    assert view.startswith("Intro line.") and view.endswith("Table 4: revenue.")


def test_a_question_for_the_highest_or_lowest_gets_its_columns_extremes_in_words():
    table = ("|Unit|Energy use 2021 (MWh)|Margin (%)|Year|\n|---|---|---|---|\n"
             "|North|35,800|25.7|2021|\n|Central|39,076|9.0|2021|\n|Coastal|14,778|10.1|2021|")
    view = table_view(table, "Which unit had the lowest operating margin in 2021?")
    assert "Highest Margin (%): North (25.7). Lowest Margin (%): Central (9.0)." in view
    assert "Energy use 2021 (MWh):" in view and "Lowest Energy" not in view  # the column the question names
    assert "Highest Energy use 2021 (MWh): Central (39,076)." in table_view(table, "Which unit used the most?")
    assert "Highest Year" not in table_view(table, "Which unit used the most?")  # a column of one value
    assert "Highest" not in table_view(table, "What was the margin of North?")  # no extreme asked for


def test_the_column_a_question_names_is_the_one_whose_name_it_states_most_fully():
    table = ("|Region|operating costs 2025 (EUR thousand)|Margin (%)|\n|---|---|---|\n"
             "|Hartdale|8,705|16.5|\n|Ashgate|16,601|13.2|\n|Oakmere|21,155|8.4|")
    view = table_view(table, "Which region had the highest operating margin in 2025?")
    assert "Highest Margin (%): Hartdale (16.5)." in view and "Highest operating costs" not in view
    view = table_view(table, "Which region had the highest operating costs in 2025?")
    assert "Highest operating costs 2025 (EUR thousand): Oakmere (21,155)." in view and "Highest Margin" not in view
    revenue = "|Region|revenue 2024|revenue 2025|\n|---|---|---|\n|Nordic|4,100|4,812|\n|Iberia|3,900|2,700|"
    view = table_view(revenue, "What was the Nordic revenue in 2025?")
    assert view.startswith("Nordic, revenue 2025: 4,812.") and "Nordic, revenue 2024" not in view


def test_the_cell_at_the_row_and_column_a_question_names_is_said_on_its_own():
    table = "|Unit|2019|2020|\n|---|---|---|\n|Redton|44,691|90,629|\n|Cormere|62,872|71,415|"
    view = table_view(table, "What was the headcount of the Cormere unit in 2019?")
    assert view.startswith("Cormere, 2019: 62,872.\nRedton | 2019") and "Redton, 2019" not in view  # before the rows
    assert "Cormere, 2019" not in table_view(table, "What was the headcount of the Cormere unit?")


def test_a_list_asked_by_rank_is_read_as_its_item_of_that_rank():
    steps = "Onboarding procedure:\n\n1. Schedule the audit.\n\n2) Sign the contract.\n3. Agree the schedule.\n\nNext."
    assert ranked_items(steps, "What is the third step of the onboarding procedure?").splitlines() == [
        "Onboarding procedure:", "", "Third step of the onboarding procedure: Agree the schedule.", "", "Next."]
    assert "Second item of the onboarding procedure: Sign the contract." in ranked_items(steps, "Its 2nd item?")
    assert ranked_items(steps, "What is the fifth step?") == steps  # no such item: the list as written
    assert ranked_items(steps, "What is step 3?") == steps  # the question asks by number


def test_a_long_page_is_read_where_the_question_points():
    filler = "The committee met to review the programme and its budget. " * 30
    text = (f"{filler}\n\nMaya Osei served as head of sustainability of the group until 2018. {filler}\n\n"
            f"The head of sustainability of the group is Greta Svensson. {filler}")
    kept = focused(text, "Who is the head of sustainability of the group?", 600)
    assert len(kept) <= 600 and "Greta Svensson" in kept and "Maya Osei" in kept
    assert kept.index("Maya Osei") < kept.index("Greta Svensson")  # page order


def test_the_citation_is_the_chunk_that_holds_the_answer_in_any_form():
    from docrefrag.indexes.page_table import ChunkRecord

    chunks = [ChunkRecord("d", 2, 0, "Revenue by region in 2025 was reported in Table 4.", (0, 0, 10, 10)),
              ChunkRecord("d", 2, 1, "Nordic 4,812 Iberia 3,100", (0, 20, 10, 30))]
    (claim,) = cite("4812", [PageText("d", 2, "", chunks)])
    assert claim.citations[0].bbox == (0, 20, 10, 30)


def test_a_list_answer_is_cited_by_the_box_of_its_items():
    from docrefrag.indexes.page_table import ChunkRecord

    chunks = [ChunkRecord("d", 3, 0, "Priority markets for 2022:", (50, 260, 170, 280)),
              ChunkRecord("d", 3, 1, "- Uruguay", (64, 286, 112, 301)),
              ChunkRecord("d", 3, 2, "- Ghana", (64, 304, 104, 319)),
              ChunkRecord("d", 3, 3, "- Peru", (64, 322, 96, 337)),
              ChunkRecord("d", 3, 4, "Peru and Ghana are far apart.", (50, 400, 300, 420))]
    (claim,) = cite("['Uruguay', 'Ghana', 'Peru']", [PageText("d", 3, "", chunks)], "Which are the priority markets?")
    (citation,) = claim.citations
    assert citation.bbox == (64, 286, 112, 337) and citation.snippet == "- Uruguay\n- Ghana\n- Peru"
    (claim,) = cite("Ghana", [PageText("d", 3, "", chunks)])
    assert claim.citations[0].bbox == (64, 304, 104, 319)  # one element states it: that element alone


def test_an_option_letter_is_cited_by_its_option_and_a_yes_by_what_the_question_asks():
    from docrefrag.indexes.page_table import ChunkRecord

    chunks = [ChunkRecord("d", 52, 0, "Talent Show entries close on Friday.", (0, 0, 10, 10)),
              ChunkRecord("d", 52, 1, "Adult Amateurs: 1st $75, 2nd $50, 3rd $40", (0, 20, 10, 30)),
              ChunkRecord("d", 52, 2, "Youth: 1st $100, 2nd $50, 3rd $25", (0, 40, 10, 50))]
    page = [PageText("d", 52, "", chunks)]
    options = ("What are the premiums for the Adult Amateurs of the Talent Show?\n(A). 100, 50, 25\n(B). 75, 50, 40\n"
               "Choose the letter name in front of the right option from A, B.")
    assert cite("B", page, options)[0].citations[0].bbox == (0, 20, 10, 30)
    (claim,) = cite("Yes", page, "Do Talent Show entries close on Friday, yes or no?")
    assert claim.text == "Yes" and claim.citations[0].bbox == (0, 0, 10, 10)


def test_an_answer_that_only_repeats_the_question_is_no_answer():
    assert echoes("Who is the chief data officer of Norworth Group?", "Norworth Group")
    assert echoes("Which unit had the lowest margin according to Table 7?", "7")
    assert not echoes("Who is the chief data officer of Norworth Group?", "Greta Svensson")
    assert not echoes("Which is greater, Instagram users or Appota fans?", "Appota")  # a choice is offered
    assert not echoes("Who is the head of the group?", "the")  # no word to compare


@pytest.mark.parametrize(("question", "name"), [
    ("Which method integrates knowledge into white-box models via directive fine-tuning?", True),
    ("According to table II, which are the datasets that have exactly three methods?", True),
    ("Who is the chief data officer of Norworth Group?", True),
    ("The quote colored in blue is said by whom?", True),
    ("What is the title of the diagram on page 9?", True),
    ("In which year did the Nordic revenue peak?", False),  # which year: a number
    ("Which page states the fleet size?", False),
    ("What is the percentage of Americans who believe China is an enemy?", False),  # "who" opens no question
    ("In the year in which the users were 330 million, what percentage were debit card users?", False),
    ("How many passengers did Northfield report in 2019?", False),
])
def test_a_question_that_asks_for_a_name(question, name):
    assert asks_for_name(question) is name


def test_a_bare_number_for_a_name_is_no_answer():
    from conftest import scripted

    from docrefrag.agents.answer import answer_question

    question = "Which method integrates knowledge into white-box models via directive fine-tuning?"
    assert miscast(question, "75") and miscast(question, "12.5%")
    assert not miscast(question, "PKG") and not miscast(question, "GPT-4") and not miscast("Which year?", "2019")
    assert not miscast("How many methods are there?", "75")
    pages = [[PageText("d", 4, "PKG [75] integrates knowledge via directive fine-tuning.", [])],
             [PageText("d", 5, "PKG integrates knowledge into white-box models.", [])]]
    llm, seen = scripted("75", "PKG")
    answer, _, read = answer_question(question, pages, llm)
    assert answer == "PKG" and read == pages and len(seen) == 2  # the first page's "75" was no answer


def test_bulleted_items_indented_by_a_few_spaces_are_written_at_the_margin():
    markdown = ("Priority markets for 2020:\n  - Uruguay\n  - Kenya\n - Romania\n* Poland\n    - a nested item\n"
                "Text - not a list.")
    assert even_bullets(markdown) == ("Priority markets for 2020:\n- Uruguay\n- Kenya\n- Romania\n* Poland\n"
                                      "    - a nested item\nText - not a list.")


_FILLER = " ".join(f"The works team inspected the feeder line in district {i} and filed report {i}." for i in range(20))
_ROLE_PAGE = (f"{_FILLER} Maya Ricci served as chief executive officer of Brambridge Cooperative until 2019. "
              f"{_FILLER} The chief executive officer of Brambridge Cooperative is Viktor Petrov.")


def test_a_long_page_answers_only_if_its_question_passages_answer_too():
    from conftest import scripted

    from docrefrag.agents.answer import SECOND_READING_CHARS, answer_question

    question = "Who is the chief data officer of Brambridge Cooperative?"
    pages = [[PageText("d", 4, _ROLE_PAGE, [])], [PageText("d", 9, _ROLE_PAGE, [])]]
    assert len(_ROLE_PAGE) > SECOND_READING_CHARS
    llm, seen = scripted("Not answerable", "Not answerable")
    answer, _, read = answer_question(question, pages, llm)
    assert answer == "Not answerable" and read == pages and len(seen) == 2  # the whole pages never read
    assert len(seen[0]) < SECOND_READING_CHARS + 300  # the page's passages on the question, read first
    assert "Maya Ricci served as chief executive officer of Brambridge Cooperative" in seen[0]

    llm, seen = scripted("Viktor Petrov", "Maya Ricci")
    answer, _, read = answer_question(question.replace("data", "executive"), pages, llm)
    assert len(seen[1]) > len(_ROLE_PAGE) and read == pages[:1]  # then the whole page
    assert answer == "Maya Ricci"  # they differ: a model without P("Yes") keeps the whole page's answer

    short = [[PageText("d", 2, "The chief data officer of Brambridge Cooperative is Ana Lee.", [])]]
    llm, seen = scripted("Ana Lee")
    assert answer_question(question, short, llm)[0] == "Ana Lee" and len(seen) == 1  # read whole, once


def test_where_the_two_readings_differ_the_judge_picks():
    from docrefrag.agents.answer import settle
    from docrefrag.agents.llm import LocalChatModel

    class Judge(LocalChatModel):
        def yes_probabilities(self, prompts, batch=4):
            return [0.85 if "Viktor Petrov\n" in str(p[-1].content) else 0.78 for p in prompts]

    judge = Judge.model_construct()  # no weights: the judge is scripted
    page = [PageText("d", 4, _ROLE_PAGE, [])]
    question = "Who is the chief executive officer of Brambridge Cooperative?"
    assert settle(question, page, "Maya Ricci", "Viktor Petrov", judge) == "Viktor Petrov"
    assert settle(question, page, "Viktor Petrov", "Maya Ricci", judge) == "Viktor Petrov"  # the whole page's
    assert settle(question, page, "Maya Ricci", None, judge) == "Maya Ricci"  # a short page: one reading
