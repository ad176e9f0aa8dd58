"""Prompt templates of the agents (short: the default local model has 135M parameters)."""

HYDE = (
    "Write two sentences that could appear on a page of a report and that answer the question. "
    "Invent plausible details; do not say you are unsure.\n\nQuestion: {question}"
)

DECOMPOSE = (
    "Split the question into the smallest self-contained questions needed to answer it, "
    "one question per line. If it asks for one fact, repeat it.\n\nQuestion: {question}\nQuestions:\n"
)

NOT_ANSWERABLE = "Not answerable"  # the benchmarks' answer where the document holds none

ANSWER_SYSTEM = (
    "You answer questions about a document using only the pages given. Reply with the short answer "
    "only, no explanation, in one of these forms: an integer (digits only, no units: 42); a number "
    "(digits, no units or % sign unless asked: 3.5); a short string (a name or a phrase, as written "
    "on the page); a list (['a', 'b']). If the pages do not contain the answer, reply exactly: "
    + NOT_ANSWERABLE
)

ANSWER_USER = "{pages}\n\nQuestion: {question}\nShort answer:"

VALIDATE = ANSWER_USER + (  # the answer agent's prompt with its answer: a local model reuses its KV cache
    " {answer}\n\nIs this short answer stated by the pages above, or read directly from them? Reply Yes or No."
)

REFINE = (
    "A search for the answer to a question found pages that do not support an answer. Rewrite the "
    "question as a search query with other words that the right page may contain.\n\n"
    "Question: {question}\nPrevious query: {query}\nNew query:"
)

PAGE_RELEVANCE = (
    "Page:\n{page}\n\nQuestion: {question}\n"
    "Does this page contain the answer to the question? Reply Yes or No."
)

EVIDENCE_CHOICE = (
    "Question: {question}\n\nYou have read {read} passages of the document. Passages you could read next:\n"
    "{candidates}\n\nReply with the number of the passage most likely to hold the answer, or 0 if what "
    "you have read already answers the question. Number:"
)

# The retrieval agent's first instructions (agents/tool_agent.py): the store keeps them as version 1 and
# every later version (indexes/instructions.py; `docrefrag agent show|history|use`, `docrefrag evolve`).
AGENT_SEED = (
    "You find the pages of a document that hold the answer to a question, by calling tools.\n"
    "1. First call search_pages with the question's key words as the query: for \"What was the Nordic revenue "
    "in 2025?\" the query is \"Nordic revenue 2025\".\n"
    "2. When the question quotes words or names a table, figure, chart or section (\"Table 6\"), also call "
    "bm25_search with those words and the key words.\n"
    "3. When no snippet shows the answer, call read_page on the best page, or search again with other words.\n"
    "4. Reply finish when a page you found states the answer, or when two searches rank the same page first."
)

# The meta-agent of `docrefrag evolve` (agents/meta_agent.py): probe, diagnose, rewrite.
META_PROBE = (
    "A retrieval agent searched a document for the page that answers a question, and missed page {evidence}. "
    "Find out with the tools which call finds page {evidence}: search with other words, or with the words a page "
    "of that kind would contain. Reply finish when a result shows page {evidence}."
)

META_DIAGNOSE = (
    "A retrieval agent calls tools to find the page of a document that answers a question. It follows these "
    "instructions:\n{instructions}\n\nQuestion: {question}\nIts calls:\n{calls}\nThe answer is on page "
    "{evidence}; it handed on pages {handed}.\nTest calls made since:\n{probes}\n\n"
    "Why did it miss page {evidence}, and which rule about the tools would have found it? Reply in one line: "
    "Lesson: <the rule>"
)

META_REWRITE = (
    "These are the instructions of a retrieval agent that calls tools to find the pages that answer a question "
    "about a document:\n{instructions}\n\nIts tools: {tools}.\n\nLessons from questions where it missed the "
    "answer's page:\n{lessons}\n\nHow it used the tools: {usage}.\n\nRewrite the instructions so that it finds "
    "those pages: at most 6 short numbered rules, each saying which tool to call, when, and with which query "
    "words, and when to finish. Reply with the numbered rules only."
)
