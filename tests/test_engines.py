"""The query engines on real data: JMESPath against `jmespath.search` on a multi-MB document built from
the standard library's own functions, grep against a brute-force reference on a multi-MB log built from
the standard library's source lines, and the memory-bounded cache."""

from __future__ import annotations

import re
import sys
import sysconfig
import threading
import time
from pathlib import Path

import jmespath
import orjson
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.errors import InvalidArgument, QueryError, QueryTimeout
from offload.tools import engines
from offload.tools import grep as grep_module
from offload.tools.engines import BoundedCache, GrepPage, grep_lines, jmespath_example, run_jmespath

STDLIB = Path(sysconfig.get_paths()["stdlib"])
DEF = re.compile(r"^(\s*)def (\w+)\((.*?)\)?:?\s*$")


def stdlib_files(limit: int) -> list[Path]:
    files = sorted(p for p in STDLIB.glob("*.py"))
    files += sorted(p for p in STDLIB.glob("*/*.py") if "test" not in p.parts)
    return files[:limit]


@pytest.fixture(scope="module")
def doc() -> dict:
    """One object per function defined in the standard library (a few MB of JSON once serialized)."""
    items = []
    for path in stdlib_files(900):
        module = ".".join(path.relative_to(STDLIB).with_suffix("").parts).removesuffix(".__init__")
        for number, line in enumerate(path.read_text(errors="replace").splitlines()):
            found = DEF.match(line)
            if not found:
                continue
            indent, name, args = found.groups()
            items.append({
                "id": len(items),
                "status": "private" if name.startswith("_") else ("method" if indent else "public"),
                "function": name,
                "module": module,
                "line": number,
                "args": [a.strip() for a in args.split(",") if a.strip()][:6],
                "signature": line.strip(),
                "file": {"path": str(path.relative_to(STDLIB)), "bytes": path.stat().st_size},
                "stdlib": module.split(".")[0] in sys.stdlib_module_names,
            })
    document = {"source": "stdlib", "count": len(items), "items": items}
    assert len(orjson.dumps(document)) > 3_000_000
    return document


@pytest.fixture(scope="module")
def log_lines() -> list[str]:
    """A multi-MB log: every source line of the stdlib files as an INFO/WARN/ERROR record."""
    lines = []
    for path in stdlib_files(400):
        module = path.stem
        for number, line in enumerate(path.read_text(errors="replace").splitlines()):
            level = "ERROR" if "raise " in line else ("WARN" if "warn" in line else "INFO")
            second = len(lines)
            lines.append(f"2026-01-{1 + second // 86400 % 28:02d}T{second // 3600 % 24:02d}:"
                         f"{second // 60 % 60:02d}:{second % 60:02d} {level} {module}:{number} {line}")
    assert sum(map(len, lines)) > 5_000_000
    return lines


# -- JMESPath -----------------------------------------------------------------------------------------

EXPRESSIONS = [
    "items[?status=='private'].id",
    "length(items)",
    "items[:5]",
    "items[-3:].function",
    "max_by(items, &line).function",
    "length(items[?file.bytes > `100000`])",
    "sort_by(items[?status=='public'], &line)[:3].[module, function]",
    "items[*].file.path | [:10]",
    "items[?contains(function, 'parse')].function | sort(@)",
    "{n: count, first: items[0].id, last: items[-1].module}",
    "items[?args[0]=='self'] | length(@)",
    "items[?stdlib && status!='method'].module | [:20]",
    "missing.key",
    "items[0].nothing",
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_jmespath_equals_reference(doc, expression):
    assert run_jmespath(doc, expression) == jmespath.search(expression, doc)


@pytest.mark.parametrize("expression, what", [
    (" | ".join(["[@, @]"] * 40), "result"),  # 2**40 copies in 245 characters: more memory than there is
    ("[" + ", ".join(["@"] * 2000) + "]", "result"),
    (" | ".join(["to_string(@) | [@, @]"] * 30), "to_string()"),  # each stage doubles the escapes
    ("to_string(@) | " + " | ".join(["join('', [@, @])"] * 40), "join()"),
])
def test_jmespath_that_repeats_the_document_past_the_bound_is_refused(expression, what):
    from offload.errors import ResultTooLarge
    from offload.jsontext import dumps

    doc = {"items": [{"id": i, "name": "x" * 50, "tags": ["a", "b"]} for i in range(1000)]}  # ~70 KB
    with pytest.raises(ResultTooLarge, match=re.escape(f"The JMESPath {what} would be more than 1,000,000")):
        run_jmespath(doc, expression, most=1_000_000)
    # under the bound the same expressions answer as the library does
    short = " | ".join(expression.split(" | ")[:4])
    assert dumps(run_jmespath(doc, short, most=10**9)) == dumps(jmespath.search(short, doc))


def test_jmespath_filter_finds_real_records(doc):
    found = run_jmespath(doc, "items[?function=='dumps' && module=='json'].line")
    assert found and all(isinstance(line, int) for line in found)


INVALID = [
    # expression, 1-based column shown (None: no position), words the reason must contain
    ("items[?status=='error'", 23, "ends too early"),
    ("items[?status=='error'].id)", 27, "rparen"),
    ("items[?status=`bad]", 14, "Unknown token"),
    ("length(items, 3)", 15, "backticks"),
    ("'abc", 1, "Unclosed"),
    ("items.~x", 7, "Unknown token"),
    ("length(items, `1`)", None, "takes 1 argument"),
    ("abs(items)", None, "needs number, got array"),
    ("nope(items)", None, "Unknown function"),
]


@pytest.mark.parametrize("expression, column, reason", INVALID)
def test_jmespath_errors_are_actionable(doc, expression, column, reason):
    with pytest.raises(QueryError) as caught:
        run_jmespath(doc, expression)
    message = str(caught.value)
    assert reason in message
    assert expression in message
    if column is not None:
        assert f"column {column}\n" in message
        caret_line = message.split("\n")[2]
        assert caret_line.index("^") - 2 == column - 1
    example = message.split("Example for this document: ")[1].split(" (filters")[0]
    assert example == jmespath_example(doc)
    run_jmespath(doc, example)  # the example it gives works
    assert len(message) < 1_000  # never the document itself (abs(items) used to print it whole)


def test_jmespath_expression_reference_alone_is_refused(doc):
    with pytest.raises(QueryError, match="function argument"):
        run_jmespath(doc, "&id")


def test_jmespath_empty_expression(doc):
    with pytest.raises(QueryError, match="empty"):
        run_jmespath(doc, "  ")


@pytest.mark.parametrize(
    "document, expected",
    [
        ({"items": [{"id": 1, "status": "ok"}]}, "items[?status=='ok'] | [:5]"),
        ([{"name": "it's"}], "[?name=='it\\'s'] | [:5]"),
        # the field of fewest values, not a title unique to each item
        ([{"title": f"Issue {i}", "state": "open" if i % 3 else "closed"} for i in range(30)],
         "[?state=='closed'] | [:5]"),
        ({"data": {"rows": [1, 2, 3]}, "n": 3}, "data.rows[:5]"),
        ({"my-list": [{"n": 1}]}, '"my-list"[:5]'),
        ({"a": 1}, "keys(@)"),
        (42, "@"),
        ([], "[:5]"),
    ],
)
def test_jmespath_example_is_valid_for_its_document(document, expected):
    assert jmespath_example(document) == expected
    assert run_jmespath(document, expected) == jmespath.search(expected, document)


def test_jmespath_compiles_each_expression_once(doc):
    engines._compile_jmespath.cache_clear()
    for _ in range(3):
        run_jmespath(doc, "items[0].id")
    info = engines._compile_jmespath.cache_info()
    assert info.misses == 1 and info.hits >= 2


# -- grep ---------------------------------------------------------------------------------------------


def reference_grep(lines, pattern, *, offset=0, limit=None, context=0, ignore_case=False) -> GrepPage:
    """The documented behaviour, computed the slow and obvious way."""
    compiled = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    hits = [i for i, line in enumerate(lines) if compiled.search(line)]
    start = max(0, len(hits) + offset) if offset < 0 else offset
    page = hits[start:] if limit is None else hits[start : start + limit]
    shown = set()
    if page:
        low = hits[start - 1] + 1 if start > 0 else 0
        after = start + len(page)
        high = hits[after] - 1 if after < len(hits) else len(lines) - 1
        for hit in page:
            shown.update(range(max(low, hit - context), min(high, hit + context) + 1))
    page_set = set(page)
    following = start + len(page)
    return GrepPage(
        matches=[{"line": n, "text": lines[n], "match": n in page_set} for n in sorted(shown)],
        total=len(hits),
        offset=start,
        returned=len(page),
        next_offset=following if following < len(hits) else None,
    )


SAMPLE_PATTERNS = [
    "def ",  # block search
    "^import",
    r"self\)$",
    r"(?<=def )_\w+",  # lookbehind: line by line
    r"\s+$",  # can match across the newline in a block
    "^$",
    "x*",  # empty matches everywhere
    r"[^a-z]{12}",
    "(?i)CLASS",
    r"\bre\b",
    r"a\nb",  # only ever matches across lines: never a line
    r"\Aclass",
    r"\)\Z",
    "(?s)return.*None",
    "(?-m)^$",
]


@pytest.mark.parametrize("block_lines", [7, 4096])
@pytest.mark.parametrize("pattern", SAMPLE_PATTERNS)
def test_grep_equals_reference(monkeypatch, block_lines, pattern):
    monkeypatch.setattr(grep_module, "_BLOCK_LINES", block_lines)
    lines = (STDLIB / "json" / "decoder.py").read_text().splitlines() + ["", "   ", "a", "b"]
    for offset, limit, context in [(0, None, 0), (0, 3, 2), (2, 4, 1), (-5, None, 3), (-7, 2, 4), (1, 1, 50), (10**6, 5, 1)]:
        got = grep_lines(iter(lines), pattern, offset=offset, limit=limit, context=context)
        assert got == reference_grep(lines, pattern, offset=offset, limit=limit, context=context), (
            offset, limit, context)


PIECES = ["a", "b", " ", ".", "^", "$", r"\s", "[^a]", "a*", "(a|b)", r"\b", "(?<=a)", "(?!b)", r"\Z", r"\A",
          "b+", "(?i)B", r"\s*$"]


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.text(alphabet="ab ", max_size=5), max_size=40),
    pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=4),
    offset=st.integers(-10, 10),
    limit=st.one_of(st.none(), st.integers(0, 5)),
    context=st.integers(0, 3),
    block_lines=st.sampled_from([1, 2, 3, 5, 4096]),
)
def test_grep_matches_reference_on_any_input(lines, pieces, offset, limit, context, block_lines):
    pattern = "".join(pieces)
    if "(?i)" in pattern and not pattern.startswith("(?i)"):
        pattern = "(?i)" + pattern.replace("(?i)", "")  # global flags must come first
    saved = grep_module._BLOCK_LINES
    grep_module._BLOCK_LINES = block_lines
    try:
        got = grep_lines(lines, pattern, offset=offset, limit=limit, context=context)
    finally:
        grep_module._BLOCK_LINES = saved
    assert got == reference_grep(lines, pattern, offset=offset, limit=limit, context=context)


def test_grep_counts_every_match_in_a_big_log(log_lines):
    page = grep_lines(log_lines, r" ERROR ", limit=10)
    expected = sum(1 for line in log_lines if " ERROR " in line)
    assert page.total == expected > 1000
    assert page.returned == 10 and page.next_offset == 10 and page.offset == 0
    assert [m["line"] for m in page.matches] == [i for i, line in enumerate(log_lines) if " ERROR " in line][:10]


def test_grep_pages_cover_all_matches_once(log_lines):
    expected = [i for i, line in enumerate(log_lines) if "json" in line]
    seen, offset = [], 0
    while offset is not None:
        page = grep_lines(log_lines, "json", offset=offset, limit=500)
        seen += [m["line"] for m in page.matches if m["match"]]
        offset = page.next_offset
    assert seen == expected


def test_grep_negative_offset_gives_the_last_matches_with_context(log_lines):
    page = grep_lines(log_lines, " ERROR ", offset=-5, context=2)
    assert page == reference_grep(log_lines, " ERROR ", offset=-5, context=2)
    assert page.returned == 5 and page.next_offset is None and page.offset == page.total - 5


def test_grep_merges_overlapping_context():
    lines = [f"line {i}" + (" hit" if i in (10, 12, 30) else "") for i in range(40)]
    page = grep_lines(lines, "hit", context=3)
    numbers = [m["line"] for m in page.matches]
    assert numbers == list(range(7, 16)) + list(range(27, 34))  # 7-15 merged, each line once
    assert [m["line"] for m in page.matches if m["match"]] == [10, 12, 30]


def test_grep_context_stops_at_matches_of_other_pages():
    lines = [f"line {i}" + (" hit" if i in (10, 12, 14) else "") for i in range(20)]
    page = grep_lines(lines, "hit", offset=1, limit=1, context=5)
    assert [m["line"] for m in page.matches] == [11, 12, 13]
    assert page.next_offset == 2


def test_grep_ignore_case_and_generators(log_lines):
    lines = (line for line in log_lines[:20_000])
    page = grep_lines(lines, "traceback", ignore_case=True, limit=0)
    assert page.total == sum(1 for line in log_lines[:20_000] if "traceback" in line.lower())
    assert page.matches == [] and page.returned == 0


def test_grep_big_single_line():
    line = "x" * 5_000_000 + "needle" + "y" * 1000
    page = grep_lines([line, "needle"], "needle")
    assert page.total == 2 and page.matches[0]["text"] is line


@pytest.mark.parametrize(
    "pattern, column",
    [("a(b", 4), ("[a-", 4), ("x{2,1}", 3), ("(?<name>x)(?P=nam)", None)],
)
def test_grep_invalid_regex(pattern, column):
    with pytest.raises(QueryError) as caught:
        grep_lines(["abc"], pattern)
    message = str(caught.value)
    assert message.startswith("Invalid regular expression")
    assert "Example:" in message
    if column is not None:
        assert f"at column {column}\n" in message
        assert message.split("\n")[2].index("^") - 2 == column - 1


@pytest.mark.parametrize("kwargs", [{"limit": -1}, {"context": -2}])
def test_grep_negative_limit_or_context(kwargs):
    with pytest.raises(InvalidArgument):
        grep_lines(["a"], "a", **kwargs)


# Searched as blocks, and line by line (the lookahead turns the block search off).
@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(?=a)(a|aa)+$"])
def test_grep_catastrophic_pattern_stops_in_a_worker_thread(pattern):
    lines = ["a" * 5000 + "b"] * 50
    outcome = {}

    def worker():
        started = time.monotonic()
        try:
            grep_lines(lines, pattern, timeout=1.0)
        except QueryTimeout as exc:
            outcome["error"] = exc
        outcome["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), QueryTimeout)
    assert outcome["elapsed"] < 5.0  # the pattern alone would run for hours; generous for a loaded machine
    assert "too slow" in str(outcome["error"]) and "simpler pattern" in str(outcome["error"])



@pytest.mark.parametrize("pattern, bounded", [
    ("processed", True), ("ms$", True), ("ERROR|FATAL", True), (r"f\(x\)", True), (r"a\+", True),
    ("[*+?]x", True), ("[]*]", True), ("[^]+]x", True), ("a+", False), ("(a|aa)+", False), ("x*", False),
    ("a?", False), (r"\d{3}", False), ("(?i)err", False), (r"\p{L}", False), ("a" * 101, False),
])
def test_grep_tells_patterns_that_cannot_backtrack(pattern, bounded):
    """Patterns with no repetition are searched without regex's per-call timeout (2.5 µs of a matching
    line's 3); anything that might repeat keeps it."""
    assert grep_module._bounded(pattern) is bounded


def test_grep_of_many_matching_lines_says_why_it_stopped():
    """A plain literal matching every line of a big artifact ran out of time with a message blaming
    nested repetition; it names the real cause, and a pattern that may repeat is told both."""
    lines = [f"2026-01-01 INFO item {i} processed in {i % 997} ms" for i in range(200_000)]
    assert grep_lines(lines, "processed", limit=5).total == 200_000
    with pytest.raises(QueryTimeout) as literal:
        grep_lines(lines, "processed", limit=5, timeout=1e-9)
    assert "more lines than that time allows" in str(literal.value) and "nested repetition" not in str(literal.value)
    with pytest.raises(QueryTimeout) as repeating:
        grep_lines(lines, "process+ed", limit=5, timeout=1e-9)
    assert "nested repetition" in str(repeating.value) and "more lines than" in str(repeating.value)


# -- the cache ----------------------------------------------------------------------------------------


class Closable:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def test_cache_evicts_least_recently_used_and_closes():
    cache = BoundedCache(100)
    a, b, c = Closable(), Closable(), Closable()
    cache.put("a", a, 40)
    cache.put("b", b, 40)
    assert cache.get("a") is a  # a is now the most recent
    cache.put("c", c, 40)
    assert cache.get("b") is None and b.closed
    assert cache.get("a") is a and cache.get("c") is c and not a.closed
    assert cache.bytes == 80 and len(cache) == 2


def test_cache_keeps_nothing_larger_than_itself():
    cache = BoundedCache(10)
    big = Closable()
    cache.put("big", big, 11)
    assert cache.get("big") is None and not big.closed and cache.bytes == 0


def test_cache_replacing_a_key_closes_the_old_value():
    cache = BoundedCache(10)
    old, new = Closable(), Closable()
    cache.put("k", old, 5)
    cache.put("k", new, 6)
    assert old.closed and cache.get("k") is new and cache.bytes == 6
    cache.put("k", new, 6)
    assert not new.closed


def test_cache_is_thread_safe():
    cache = BoundedCache(1000)

    def work(n):
        for i in range(2000):
            cache.put((n, i % 50), i, 10)
            cache.get((n, (i * 7) % 50))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.bytes == 10 * len(cache) <= 1000


# -- the equality-filter fast path gives exactly the jmespath library's results ---------------------

from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["ok", "error", "", "1"]),
                    st.lists(st.integers(0, 2), max_size=2))
_items = st.one_of(st.dictionaries(st.sampled_from(["status", "id", "name"]), _values, max_size=3), _values)


@hsettings(max_examples=300, deadline=None)
@given(items=st.lists(_items, max_size=12), expression=st.sampled_from([
    "[?status=='error']", "[?status=='ok'].id", "data[?status=='error'].name", "data.rows[?id=='1']",
    "[?status == 'error'].id", "data[?status=='']",
]), wrap=st.booleans())
def test_equality_filter_fast_path_matches_the_library(items, expression, wrap):
    import jmespath

    from offload.tools.engines import run_jmespath

    doc = {"data": items if wrap else {"rows": items}} if expression.startswith("data") else items
    assert run_jmespath(doc, expression) == jmespath.search(expression, doc)


def test_a_type_error_inside_the_jmespath_library_is_a_query_error(doc):
    """contains(title, "crash") compares with the field `crash` (null), and the library's `None in str`
    came out as a raw TypeError."""
    docs = [{"title": "a crash", "state": "open"}] * 3
    with pytest.raises(QueryError, match=r'JMESPath failed on this document: .*reads as null'):
        run_jmespath(docs, '[?contains(title, "crash")]')
    assert run_jmespath(docs, "[?contains(title, 'crash')] | length(@)") == 3
