"""What reaches the model fits its budget by the real tokenizers (o200k_base and cl100k_base) when they
are installed, also on text the estimate undercounts by a quarter or more: a chart of CJK ideographs,
letters under combining marks, words of random syllables and "  kkkk" repeated, as fetch_slice pages,
query_artifact pages and passed-through results, and ANSI-coloured text in a result's structured form.
Pages shrink and stay exact (following `next` reads every line once); a result over by the real count
is stored. Only texts of no more bytes than their budget are left to the estimate; without bpe-openai,
the estimate decides as before. Real SQLite stores."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import bpe_openai
import orjson
import pytest

from offload import Offloader, Reference
from offload.adapters import as_output
from offload.tokens import estimate_tokens, exact_tokenizer
from offload.tools.schemas import dispatch

STDLIB = Path(os.__file__).parent

CHART = "\n".join("".join(chr(c) for c in range(start, start + 64)) for start in range(0x4E00, 0x9FC0, 64))


def _marked(seed: int = 8, lines: int = 300) -> str:
    """Words whose every letter carries one to four combining marks (U+0300-U+036F), as Zalgo text does."""
    rng = random.Random(seed)
    words = ["error", "value", "request", "offload", "token", "budget", "page"]
    return "\n".join(" ".join("".join(c + "".join(chr(rng.randrange(0x300, 0x370)) for _ in range(rng.randint(1, 4)))
                                      for c in rng.choice(words)) for _ in range(8)) for _ in range(lines))


MARKED = _marked()


def _syllables(seed: int = 5, lines: int = 400) -> str:
    """Words of random consonant-vowel syllables, as in the Bantu languages: priced as words by the
    estimate (0.62 of the real count), split into syllables by the tokenizers."""
    rng = random.Random(seed)
    word = lambda: "".join(rng.choice("bkmnrtgzyw") + rng.choice("aeiou") for _ in range(rng.randint(2, 5)))  # noqa: E731
    return "\n".join(" ".join(word() for _ in range(8)) for _ in range(lines))


SYLLABLES = _syllables()
KKKK = "\n".join("  kkkk" * 12 for _ in range(600))  # built to defeat the estimate: 0.44 of the real count
TEXTS = [pytest.param(CHART, id="cjk-chart"), pytest.param(MARKED, id="combining-marks"),
         pytest.param(SYLLABLES, id="syllables"), pytest.param(KKKK, id="kkkk")]
_ENCODINGS = [bpe_openai.get_encoding(name) for name in ("o200k_base", "cl100k_base")]


def real(text: str) -> int:
    """The larger count of o200k_base and cl100k_base, straight from the tokenizer: the yardstick."""
    return max(len(encoding.encode(text)) for encoding in _ENCODINGS)


def within(out, budget: int) -> int:
    """The most tokens any form of `out` (a dispatch or adapter output) takes: its text, its JSON as
    json.dumps writes it and compact; asserted within `budget`."""
    forms = (out.text, json.dumps(out.structured, ensure_ascii=False), orjson.dumps(out.structured).decode())
    worst = max(real(form) for form in forms)
    assert worst <= budget, (worst, budget)
    return worst


@pytest.fixture
def off(sqlite_url):
    with Offloader(sqlite_url) as offloader:
        yield offloader


def follow(off: Offloader, tool: str, call: dict, pages: int | None = None) -> list:
    """The outputs from `call` on, following next to the end (or for `pages` pages)."""
    got = []
    while call is not None and len(got) < (pages or 400):
        got.append(dispatch(off, tool, call))
        assert not got[-1].is_error, got[-1].text
        call = got[-1].structured["next"]
    assert call is None or pages
    return got


def test_the_estimate_undercounts_these_texts_by_a_quarter_or_more():
    """Why they are here: estimated at about 0.4-0.7 of the real count, pages cut by the estimate alone
    came back at up to 6,955 tokens against 4,000. The first two are text the estimate can tell (dense
    non-ASCII); the ASCII two were held to the estimate alone while it was under 90% of the budget."""
    for text in (CHART, MARKED, SYLLABLES, KKKK):
        assert estimate_tokens(text) < 0.75 * real(text)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("unit", ["lines", "chars", "bytes"])
def test_pages_of_dense_text_fit_the_budget_by_the_real_count(off, text, unit):
    budget = off.settings.slice_tokens
    ref = off.put(text, tool="cat")
    pages = follow(off, "fetch_slice", {"artifact_id": ref.artifact_id, "unit": unit})
    worst = max(within(page, budget) for page in pages)
    assert worst > 0.75 * budget  # shrunk to fit, not far below it
    contents = [page.structured["content"] for page in pages]
    # exact: the pages are the text, each unit once, and every page starts where the one before said
    assert ("\n" if unit == "lines" else "").join(contents) == text
    assert all(page.structured["encoding"] == "utf-8" for page in pages if unit == "bytes")
    assert [p.structured["offset"] for p in pages[1:]] == [p.structured["next_offset"] for p in pages[:-1]]


@pytest.mark.parametrize("text", TEXTS)
def test_query_pages_of_dense_text_fit_the_budget_by_the_real_count(off, text):
    budget = off.settings.query_tokens
    ref = off.put(text, tool="cat")
    pages = follow(off, "query_artifact", {"artifact_id": ref.artifact_id, "grep": ".", "limit": 150})
    assert max(within(page, budget) for page in pages) > 0.75 * budget
    shown = [line for page in pages for line in page.structured["result"]]
    assert shown == [f"{n}: {line}" for n, line in enumerate(text.split("\n"))]  # every match once, whole
    assert all(page.structured["count"] == len(shown) for page in pages)
    # the whole result, over the budget by the real count, is stored and referenced within it
    whole = dispatch(off, "query_artifact", {"artifact_id": ref.artifact_id, "grep": "."})
    assert "derived_from" in whole.structured
    within(whole, budget)


def _longest_prefix(text: str, fits) -> str:
    """The longest prefix of whole lines of `text` that `fits`."""
    lines = text.split("\n")
    low, high = 1, len(lines)
    while low < high:
        middle = (low + high + 1) // 2
        if fits("\n".join(lines[:middle])):
            low = middle
        else:
            high = middle - 1
    return "\n".join(lines[:low])


@pytest.mark.parametrize("text", TEXTS)
def test_a_dense_result_over_its_limit_by_the_real_count_is_stored(off, text):
    limit = off.settings.limit_for("grep")
    # under 90% of the limit by the estimate, where it was once held to the estimate alone
    over = _longest_prefix(text, lambda part: estimate_tokens(json.dumps({"result": part}, ensure_ascii=False)) <= 0.85 * limit)
    assert real(over) > limit  # the estimate alone let it through
    out = off.process("grep", over)
    assert isinstance(out, Reference) and out.stored
    within(as_output(out, off), limit)
    fitting = _longest_prefix(text, lambda part: real(json.dumps({"result": part}, ensure_ascii=False)) <= limit)
    assert len(fitting) > len(over) * 0.4
    assert off.process("grep", fitting) is fitting  # within the limit by the real count: passed through
    within(as_output(fitting, off), limit)


def test_a_result_whose_structured_form_is_over_its_limit_is_stored(off):
    """An ANSI colour code's ESC is one character in the text and six in the JSON the structured form
    (`{"result": …}`) carries: 3,106 tokens as text, 4,626 as JSON, against 4,000."""
    rng = random.Random(3)
    esc = "\x1b"
    text = "\n".join("".join(f"{esc}[{rng.choice([31, 32, 33, 36, 90])}m{rng.choice(['ok', 'F', '.', 'E', 's'])}{esc}[0m"
                             for _ in range(12)) for _ in range(30))
    limit = off.settings.limit_for("grep")
    assert estimate_tokens(text) <= limit and real(text) <= limit
    assert real(json.dumps({"result": text}, ensure_ascii=False)) > limit
    out = off.process("grep", text)
    assert isinstance(out, Reference)
    within(as_output(out, off), limit)
    # a shell result's stdout too: {"stdout": …}
    shell = off.process("bash", {"stdout": text * 2, "stderr": "", "exit_code": 0})
    assert isinstance(shell, Reference)


def test_a_conversation_fitted_by_the_context_guard_fits_by_the_real_count(off):
    """Fitted by the estimate alone, 60 turns of random syllables came to 23,825 tokens of a 75% budget
    of a 32,000-token window, and were 38,231 by cl100k_base: over the window."""
    lines = SYLLABLES.split("\n")
    messages = [{"role": "system", "content": "You are helpful."}]
    for turn in range(60):
        messages += [{"role": role, "content": "\n".join(lines[(2 * turn + k) * 3 % 380:][:20])}
                     for k, role in enumerate(("user", "assistant"))]
    fitted = off.fit_context(messages, 32_000)
    assert len(fitted.messages) < len(messages)  # it had to drop some
    assert sum(real(json.dumps(m, ensure_ascii=False)) + 4 for m in fitted.messages) <= 0.75 * 32_000
    assert fitted.report.tokens_after <= 0.75 * 32_000


@pytest.fixture
def real_counts(monkeypatch):
    """The texts the real tokenizers were run on, as pages and results were held to their budgets."""
    from offload.referencing import Measure

    counted: list[str] = []
    at_least = Measure.at_least

    def recording(self, estimate, text):
        counted.append(text)
        return at_least(self, estimate, text)

    monkeypatch.setattr(Measure, "at_least", recording)
    return counted


def test_the_real_tokenizers_count_what_could_be_over_by_them(off, real_counts):
    """A token of either tokenizer stands for a byte or more: a text of no more UTF-8 bytes than its
    budget is held by the estimate alone, every other page or result that could fit is counted."""
    code = "".join((STDLIB / name).read_text() for name in ("argparse.py", "inspect.py"))
    ref = off.put(code, tool="cat")
    real_counts.clear()  # the reference is always checked
    pages = follow(off, "fetch_slice", {"artifact_id": ref.artifact_id}, pages=5)
    assert len(real_counts) >= len(pages)  # each page's text and JSON form, though its estimate was far under
    real_counts.clear()
    stdout, stderr = code[:12_000], code[20_000:21_500]  # a stdout of 12,000 bytes, a stderr of 1,500
    assert estimate_tokens(json.dumps(stdout)) < 0.9 * off.settings.limit_for("bash")
    assert off.process("bash", {"stdout": stdout, "stderr": stderr, "exit_code": 1}) is not None
    assert real_counts == [json.dumps(stdout)]  # stderr and the two together are bounded by their bytes


def test_without_bpe_openai_the_estimate_decides_as_before(sqlite_url, monkeypatch):
    exact_tokenizer.cache_clear()
    monkeypatch.setitem(sys.modules, "bpe_openai", None)  # makes `import bpe_openai` raise ImportError
    try:
        with Offloader(sqlite_url) as off:
            limit = off.settings.limit_for("grep")
            over = _longest_prefix(CHART, lambda part: estimate_tokens(json.dumps(part, ensure_ascii=False)) <= limit)
            assert off.process("grep", over) is over  # the guarantee rests on the estimate
            ref = off.put(CHART, tool="cat")
            page = off.fetch_slice(ref.artifact_id)
            assert estimate_tokens(json.dumps(page, ensure_ascii=False)) > 0.85 * off.slicer.budget
    finally:
        exact_tokenizer.cache_clear()
