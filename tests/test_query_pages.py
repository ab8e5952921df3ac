"""query_artifact pages: every page the model reads fits the query budget (counted with a real
tokenizer on what is sent), a result too big for a page is cut or left out loudly and stays reachable,
paging always goes on, limit=0 is refused, and no answer shares objects with the cached document."""

from __future__ import annotations

import json
import tracemalloc

import orjson
import pytest

from offload import Offloader
from offload.adapters import ToolPack
from offload.errors import InvalidArgument, QueryTimeout, ResultTooLarge
from offload.tools.schemas import TOOLS, dispatch, render_query

BUDGET = 4000  # the default query_tokens
BIG = "x y " * 5000  # ~10,000 tokens: one element alone over the whole budget


@pytest.fixture
def off(sqlite_url):
    with Offloader(sqlite_url) as offloader:
        yield offloader


@pytest.fixture
def big_items(off):
    """20 objects, elements 0 and 5 each bigger than a whole page."""
    items = [{"id": i, "blob": BIG if i in (0, 5) else "s"} for i in range(20)]
    return off.put(orjson.dumps(items), tool="api").artifact_id, items


def assert_within_budget(response, real_count):
    assert real_count(render_query(response)) <= BUDGET
    assert real_count(json.dumps(response)) <= BUDGET


def follow(off, artifact_id, real_count, **args):
    """Every page from `args` on, following `next`; each one checked against the budget."""
    pages = []
    while True:
        page = off.query_artifact(artifact_id, **args)
        assert "result" in page, "a page of an explicit request is inline"
        assert_within_budget(page, real_count)
        pages.append(page)
        if page["next"] is None:
            return pages
        assert page["next_offset"] == page["next"]["offset"]
        args = {k: v for k, v in page["next"].items() if k != "artifact_id"}


def test_a_grep_line_over_the_budget_is_cut_around_its_match(off, real_count):
    # minified JSON is one line: cut after its first ~7,000 characters, the match further along was not shown
    doc = json.dumps([{"id": i, "name": f"item{i}"} for i in range(20_000)])
    aid = off.put(doc, tool="api").artifact_id
    for needle in ("item12345\"", "item19999\""):
        page = off.query_artifact(aid, grep=needle.rstrip('"'), limit=1)
        assert_within_budget(page, real_count)
        shown = page["result"][0]
        assert needle in shown and shown.startswith("0: …[cut: ") and "characters before] " in shown
        before = int(shown.split("…[cut: ")[1].split(" characters before]")[0].replace(",", ""))
        kept = shown.split("characters before] ", 1)[1].split(" …[cut: ")[0]
        assert doc[before:before + len(kept)] == kept  # exactly the characters it says it starts after
        assert "around its match" in page["cut"]


def test_a_grep_line_over_the_budget_is_cut_and_stays_reachable(off, real_count):
    line = "match " + "w " * 30000
    aid = off.put(("short line\n" * 10 + line + "\n" + "match small\n" * 5).encode(), tool="read").artifact_id
    page = off.query_artifact(aid, grep="match", limit=2, context=1)
    assert_within_budget(page, real_count)
    assert page["count"] == 6 and page["next"] == {"artifact_id": aid, "grep": "match", "limit": 2, "context": 1,
                                                     "offset": 1}
    assert page["result"][0] == "9- short line"
    shown = page["result"][1]
    assert shown.startswith("10: match w w") and "more characters]" in shown
    kept = len(shown.split(" …[cut: ")[0]) - len("10: ")
    assert shown.endswith(f" …[cut: {len(line) - kept:,} more characters]")
    assert f'fetch_slice(artifact_id="{aid}", offset=10, limit=1)' in page["cut"]
    # the named call reads the whole line, page by page
    parts, args = [], {"offset": 10, "limit": 1}
    while True:
        piece = off.fetch_slice(aid, **args)
        parts.append(piece["content"])
        if piece["next"] is None or piece["next"].get("unit") != "chars":
            break
        args = {k: v for k, v in piece["next"].items() if k != "artifact_id"}
    assert "".join(parts).rstrip("\n") == line
    # and the query goes on with the next match
    rest = off.query_artifact(aid, grep="match", limit=2, context=1, offset=1)
    assert rest["result"][0] == "11: match small"


@pytest.mark.parametrize("order", ["", " ORDER BY id DESC"])
def test_an_sql_row_over_the_budget_is_left_out_with_the_call_that_stores_it(off, big_items, real_count, order):
    aid, items = big_items
    sql = "SELECT * FROM artifact" + order
    pages = follow(off, aid, real_count, sql=sql, limit=2)
    rows = [r for p in pages for r in p["result"]]
    ordered = items[::-1] if order else items
    big = [n for n, item in enumerate(ordered) if item["blob"] == BIG]
    assert rows == [item for item in ordered if item["blob"] != BIG]
    assert all(p["count"] == 20 for p in pages)
    for index in big:
        page = next(p for p in pages if f"result {index} alone" in p.get("cut", ""))
        assert page["result"] == [] and page["next_offset"] == (index + 1 if index + 1 < 20 else None)
        alone = f"SELECT * FROM (\n{sql}\n) LIMIT 1 OFFSET {index}"
        assert f"sql={json.dumps(alone)}" in page["cut"]
        stored = off.query_artifact(aid, sql=alone)
        assert stored["derived_from"] == aid and stored["count"] == 1
        assert orjson.loads(b"".join(off.iter_raw(stored["artifact_id"]))) == ordered[index]


def test_a_jmespath_page_goes_on_past_an_element_over_the_budget(off, big_items, real_count):
    aid, items = big_items
    for start in ({"limit": 3}, {"offset": 5}, {"offset": 1, "limit": 10}):
        pages = follow(off, aid, real_count, jmespath="@", **start)
        delivered = [r["id"] for p in pages for r in p["result"]]
        left_out = [i for p in pages for i in (0, 5) if f"result {i} alone" in p.get("cut", "")]
        first = start.get("offset", 0)
        assert sorted(delivered + left_out) == list(range(first, 20))
        assert all(p["count"] == 20 for p in pages)
    page = off.query_artifact(aid, jmespath="@", offset=5, limit=3)
    assert page["result"] == [] and page["next"] == {"artifact_id": aid, "jmespath": "@", "limit": 3, "offset": 6}
    assert 'jmespath="(@)[5]"' in page["cut"]
    stored = off.query_artifact(aid, jmespath="(@)[5]")
    assert stored["derived_from"] == aid
    assert orjson.loads(b"".join(off.iter_raw(stored["artifact_id"]))) == items[5]


@pytest.mark.parametrize("args", [{"jmespath": "@", "limit": 5000, "offset": 1},
                                  {"sql": "SELECT * FROM artifact", "limit": 5000},
                                  {"jmespath": "[*].[a, b, c]", "offset": 1},
                                  {"jmespath": "[*].{a: a, b: b}", "offset": 1}])
def test_inline_answers_fit_the_budget_as_the_model_reads_them(off, real_count, args):
    rows = [{"a": i, "b": i % 3, "c": "x", "d": None, "e": True, "f": [i, i + 1], "g": {"h": 1}} for i in range(5000)]
    aid = off.put(orjson.dumps(rows), tool="api").artifact_id
    out = dispatch(off, "query_artifact", {"artifact_id": aid, **args})
    assert not out.is_error and out.structured["count"] == 5000
    assert real_count(out.text) <= BUDGET and real_count(json.dumps(out.structured)) <= BUDGET
    assert len(out.structured["result"]) >= 40  # still a useful page, not an empty one
    assert out.text.startswith("[\n") and out.structured["next"]["offset"] == out.structured["next_offset"]


@pytest.mark.parametrize("given", ["object", "minified text"])
def test_a_grep_spaced_as_the_preview_shows_json_names_the_compact_pattern_that_matches(off, given):
    # the preview shows `{"id": 7, ...}`; the stored JSON (a Python object's, an API's minified text) has
    # no spaces, and the pattern copied from the preview matched nothing, with nothing saying why
    items = [{"id": i, "status": "ok" if i % 3 else "bad", "tags": ["a", "b"]} for i in range(5000)]
    ref = off.put(items if given == "object" else json.dumps(items, separators=(",", ":")), tool="api")
    assert '{"id": 4, "status": "ok", "tags": ["a", "b"]}' in ref.preview
    out = dispatch(off, "query_artifact", {"artifact_id": ref.artifact_id, "grep": '"id": 4, "status": "ok"'})
    assert out.structured["count"] == 0
    call = f'query_artifact(artifact_id="{ref.artifact_id}", grep="\\"id\\":4,\\"status\\":\\"ok\\"")'
    assert call in out.structured["note"] and "matches 1 line" in out.structured["note"], out.structured
    assert call in out.text
    assert off.query_artifact(ref.artifact_id, grep='"id":4,"status":"ok"')["count"] == 1  # the call it names runs
    # a pattern that matches nothing spaced or not, or one with no JSON spacing, gets no such note
    assert "note" not in off.query_artifact(ref.artifact_id, grep='"id": 99999,')
    assert "note" not in off.query_artifact(ref.artifact_id, grep="nowhere")


def test_a_derived_grep_result_says_how_many_lines_matched(off, real_count):
    """Its header counts the stored lines, context and `--` included (17,142 for 4,286 matches): the
    text never said the match count, nor which number starts each line."""
    lines = [f"2024-01-01 INFO req {i}" if i % 7 else f"2024-01-01 ERROR req {i} failed" for i in range(30_000)]
    ref = off.process("log", "\n".join(lines) + "\n")
    for context, says in ((1, "(`N:` a match, `N-` context, `--` between groups)"), (0, "(`N:` a match)")):
        out = off.query_artifact(ref.artifact_id, grep="ERROR", context=context)
        assert out["count"] == 4286 and out["derived_from"] == ref.artifact_id
        assert f"The grep matched 4,286 lines of {ref.artifact_id}; each line here starts with its line number " \
               f"there {says}." in out["text"]
        assert real_count(json.dumps(out, separators=(",", ":"), ensure_ascii=False)) <= off.settings.reference_tokens


def test_limit_zero_is_refused_naming_the_argument(off):
    jid = off.put(orjson.dumps([{"i": i} for i in range(100)]), tool="api").artifact_id
    tid = off.put(b"line\n" * 100, tool="read").artifact_id
    for aid, kind in ((jid, {"jmespath": "@"}), (jid, {"sql": "SELECT * FROM artifact"}), (tid, {"grep": "line"})):
        with pytest.raises(InvalidArgument, match="limit must be at least 1"):
            off.query_artifact(aid, offset=10, limit=0, **kind)
        out = dispatch(off, "query_artifact", {"artifact_id": aid, "offset": 10, "limit": 0, **kind})
        assert out.is_error and "limit" in out.text
    for tool in ("fetch_slice", "query_artifact"):
        assert TOOLS[tool]["input_schema"]["properties"]["limit"]["minimum"] == 1


def test_editing_a_query_answer_changes_no_later_answer(off):
    aid = off.put(orjson.dumps({"cfg": {"mode": "safe"}, "items": [{"id": i} for i in range(3000)]}),
                  tool="api").artifact_id
    off.query_artifact(aid, jmespath="cfg")["result"]["mode"] = "CHANGED"
    off.query_artifact(aid, jmespath="items[0]")["result"]["id"] = 999
    off.query_artifact(aid, jmespath="items[0:2]")["result"].clear()
    assert off.query_artifact(aid, jmespath="cfg")["result"] == {"mode": "safe"}
    assert off.query_artifact(aid, jmespath="items[0:2]")["result"] == [{"id": 0}, {"id": 1}]
    assert {r["status"] for r in off.rerun()} == {"unchanged"}


@pytest.mark.parametrize("suffix", ["", "#items"])
def test_a_pack_tool_editing_its_artifact_argument_changes_no_query(off, suffix):
    aid = off.put(orjson.dumps({"items": [{"id": i, "ok": i % 3 > 0} for i in range(3000)]}), tool="api").artifact_id
    off.query_artifact(aid, jmespath="length(items)")  # the document is now cached

    def summarize(doc: dict) -> str:
        """Summarize a document."""
        doc["items"].clear()  # argument validation copies the outer dict only: an edit inside reached the cache
        return "done"

    def count_items(doc: list) -> str:
        """Count items."""
        doc[0].clear()
        return "done"

    pack = ToolPack(off, [])
    pack.add(count_items if suffix else summarize, artifact_args=True)
    name = "count_items" if suffix else "summarize"
    assert pack.call(name, json.dumps({"doc": f"artifact://{aid}{suffix}"})).text == "done"
    assert off.query_artifact(aid, jmespath="length(items)")["result"] == 3000
    assert off.query_artifact(aid, jmespath="items[0]")["result"] == {"id": 0, "ok": False}
    assert {r["status"] for r in off.rerun()} == {"unchanged"}


def test_strings_with_lone_surrogates_come_back_escaped_never_a_crash(off, real_count):
    doc = {"items": [{"id": i, "s": "cut \ud83d" if i % 3 == 0 else "plain"} for i in range(400)]}
    aid = off.process("api", doc).artifact_id
    assert off.query_artifact(aid, jmespath="items[0]")["result"] == {"id": 0, "s": "cut \ud83d"}  # exactly
    for args in ({"jmespath": "items[0]"}, {"jmespath": "items[*].s", "limit": 5}):
        out = dispatch(off, "query_artifact", {"artifact_id": aid, **args})
        assert not out.is_error, out.text
        assert '"cut \\ud83d"' in out.text and out.text.encode("utf-8")  # the escape, sendable as UTF-8
    page = off.query_artifact(aid, jmespath="items[*].s", limit=5)
    assert page["result"] == ["cut \ud83d", "plain", "plain", "cut \ud83d", "plain"] and page["next"]["offset"] == 5
    out = dispatch(off, "query_artifact", {"artifact_id": aid, "sql": "SELECT * FROM artifact LIMIT 2"})
    assert out.is_error and "lone surrogate" in out.text and "jmespath" in out.text


@pytest.mark.parametrize("sql", ["SELECT * FROM artifact; -- all rows", "SELECT * FROM artifact -- all rows",
                                 "SELECT * FROM artifact /* all; rows */ ;\n", "SELECT ';' AS s, * FROM artifact;;"])
def test_the_call_a_left_out_sql_row_names_runs(sqlite_url, sql):
    rows = [{"id": i, "blob": "B" * 5000 if i == 2 else "s"} for i in range(6)]
    with Offloader(sqlite_url, query_tokens=600) as off:
        aid = off.put(orjson.dumps(rows), tool="api").artifact_id
        page = off.query_artifact(aid, sql=sql, offset=2, limit=1)
        assert page["result"] == [] and "result 2 alone" in page["cut"]
        named = json.loads(page["cut"].split("sql=", 1)[1].split(") stores it whole")[0])
        stored = dispatch(off, "query_artifact", {"artifact_id": aid, "sql": named})
        assert not stored.is_error, stored.text
        row = orjson.loads(b"".join(off.iter_raw(stored.structured["artifact_id"])))
        assert row["id"] == 2 and row["blob"] == "B" * 5000


def test_a_grep_page_cut_by_the_budget_never_ends_with_context_of_a_match_it_does_not_show(sqlite_url):
    lines = ["ERROR " + "long " * 2000 if i == 50 else (f"ERROR at {i}" if i % 10 == 0 else f"ctx {i}")
             for i in range(200)]
    with Offloader(sqlite_url, query_tokens=600) as off:
        aid = off.put(("\n".join(lines) + "\n").encode(), tool="read").artifact_id
        page = off.query_artifact(aid, grep="ERROR", offset=3, limit=3, context=2)
        assert page["result"][-3:] == ["40: ERROR at 40", "41- ctx 41", "42- ctx 42"]
        assert page["next"]["offset"] == 5
        following = off.query_artifact(**page["next"])
        assert following["result"][:3] == ["48- ctx 48", "49- ctx 49", following["result"][2]]
        assert following["result"][2].startswith("50: ERROR long")
        # following next from any page: each match once, and a page ends with its last match's context at most
        near = off.put("".join(f"ERROR {i} " + "w " * 40 + "\n" if i % 4 == 0 else f"c {i}\n"
                               for i in range(600)).encode(), tool="read").artifact_id
        args, seen = {"grep": "ERROR", "context": 2, "limit": 100}, []
        while args is not None:
            page = off.query_artifact(near, **args)
            numbered = [(int(entry.split(" ")[0].rstrip(":-")), entry.split(" ")[0][-1]) for entry in page["result"]
                        if entry != "--"]
            matched = [n for n, sign in numbered if sign == ":"]
            assert numbered[-1][0] <= matched[-1] + 2
            seen += matched
            args = page["next"] and {k: v for k, v in page["next"].items() if k != "artifact_id"}
        assert seen == list(range(0, 600, 4))


@pytest.mark.parametrize("tokenizer", [None, "o200k_base"])
def test_query_pages_fit_the_smallest_page_budget_allowed(sqlite_url, tokenizer, real_count):
    """At MIN_PAGE a page still fits, one that leaves out an element too big for it and says which call
    stores it (below ~350 tokens that page could not be built at all: the call failed)."""
    import bpe_openai

    from offload.settings import MIN_PAGE

    cl100k = bpe_openai.get_encoding("cl100k_base")
    items = [{"id": i, "name": BIG if i % 4 == 0 else f"item {i}"} for i in range(12)]
    lines = "".join(f"src/m{i}.py:{i}:error {BIG if i % 5 == 0 else 'x'}\n" for i in range(20))
    with Offloader(sqlite_url, query_tokens=MIN_PAGE, tokenizer=tokenizer) as off:
        array = off.put(orjson.dumps(items), tool="api").artifact_id
        text = off.put(lines.encode(), tool="grep").artifact_id
        for artifact_id, args in [(array, {"jmespath": "[*].name", "limit": 3}),
                                  (array, {"sql": "SELECT id, name FROM artifact", "limit": 3}),
                                  (text, {"grep": "error", "limit": 3})]:
            page, seen = off.query_artifact(artifact_id, **args), 0
            while True:
                for form in (render_query(page), json.dumps(page)):
                    assert max(real_count(form), len(cl100k.encode(form))) <= MIN_PAGE, (args, page)
                seen += 1
                if page["next"] is None:
                    break
                page = off.query_artifact(**page["next"])
            assert seen >= 4, args


# -- SQL results that are big: bounded in bytes, in time and in memory ----------------------------

CSV = "a,b\n" + "".join(f"{i},x{i}\n" for i in range(300))


def test_an_sql_result_over_the_byte_cap_is_refused_and_nothing_is_stored(sqlite_url):
    with Offloader(sqlite_url, query_result_bytes=1024**2) as off:
        source = off.put(CSV, tool="export").artifact_id
        before = off.list()[0]
        with pytest.raises(ResultTooLarge, match=r"more than 1,048,576 bytes of NDJSON .* LIMIT") as caught:
            off.query_artifact(source, sql="SELECT * FROM artifact x, artifact y")  # 90,000 rows, ~2.5 MB
        assert caught.value.to_dict()["status"] == 422
        assert off.list()[0] == before and off.extracts() == []
        # under the cap the same query is stored whole, every row of it
        stored = off.query_artifact(source, sql="SELECT * FROM artifact x, artifact y WHERE x.a < 50")
        assert stored["count"] == 15_000
        assert len(b"".join(off.iter_raw(stored["artifact_id"])).splitlines()) == 15_000


def test_a_whole_sql_result_is_buffered_as_its_bytes_not_as_objects(sqlite_url):
    """100,000 rows of ~16 bytes: 1.6 MB of NDJSON. Kept as one orjson output per row, they held
    ~4 KiB each (410 MB); the buffer they go to holds what they are."""
    with Offloader(sqlite_url) as off:
        row = off.store.get(off.put(CSV, tool="export").artifact_id, off.namespace)
        off.queries.compute(row, sql="SELECT 1")  # the table is loaded and cached before measuring
        tracemalloc.start()
        try:
            outcome = off.queries.compute(row, sql="SELECT * FROM range(100000)")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert outcome.count == 100_000 and len(outcome.derived) == 1_588_890
        assert peak < 20 * len(outcome.derived), f"{peak:,} bytes at the peak"


def test_the_whole_answer_is_bounded_in_time_not_only_duckdbs_part(sqlite_url):
    """Nested values are slow to turn into JSON in Python, fast to produce in DuckDB: the time limit
    counts both."""
    with Offloader(sqlite_url, query_timeout=0.5, query_result_bytes=10 * 1024**3) as off:
        source = off.put(CSV, tool="export").artifact_id
        with pytest.raises(QueryTimeout, match=r"after 0.5 s with [\d,]+ rows read"):
            off.query_artifact(source, sql="SELECT range AS n, [{'a': range::VARCHAR, 'b': [range, range]}, "
                                           "{'a': 'x', 'b': []}] AS nested FROM range(20000000)")
        assert off.extracts() == []


@pytest.mark.parametrize("offset", [0, 999, 1000, 1001, 2500, 99_999, 100_000])
def test_an_sql_page_anywhere_is_exact_and_counts_every_row(off, offset):
    source = off.put(CSV, tool="export").artifact_id
    page = off.query_artifact(source, sql="SELECT range AS n FROM range(100000)", offset=offset, limit=3)
    assert page["result"] == [{"n": n} for n in range(offset, min(offset + 3, 100_000))]
    assert page["count"] == 100_000
    assert page["next_offset"] == (offset + 3 if offset + 3 < 100_000 else None)


def test_an_sql_page_past_the_start_with_no_limit_fits_the_budget_and_goes_on(off, real_count):
    source = off.put(CSV, tool="export").artifact_id
    page = off.query_artifact(source, sql="SELECT range AS n FROM range(1000000)", offset=10)
    assert_within_budget(page, real_count)
    shown = len(page["result"])
    assert 100 < shown < 2000 and page["result"][0] == {"n": 10} and page["count"] == 1_000_000
    assert page["next_offset"] == 10 + shown


def test_rows_of_a_page_are_not_held_past_what_could_fit(sqlite_url):
    """Rows of 200 KB each: a page past its offset stops holding rows once they surely exceed the budget
    (it held every row until a multiple of 200), rows come from DuckDB about 4 MB at a time (1,000 were
    200 MB), and a whole result is refused at the row that takes it over the byte cap (it was checked
    once a batch)."""
    rows = "".join('{"a": %d, "b": "%s"}\n' % (i, "x" * 200_000) for i in range(200))  # 40 MB
    with Offloader(sqlite_url, query_result_bytes=1024**2) as off:
        row = off.store.get(off.put(rows, tool="api").artifact_id, off.namespace)
        off.queries.compute(row, sql="SELECT 1")  # the table is loaded and cached before measuring
        tracemalloc.start()
        try:
            page = off.queries.compute(row, sql="SELECT a, b FROM artifact", offset=3)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert page.inline["count"] == 200 and page.inline["next_offset"] == 4 and "cut" in page.inline
        assert peak < 12_000_000, f"{peak:,} bytes at the peak"  # DuckDB's batches of ~4 MB, and a row
        with pytest.raises(ResultTooLarge, match=r"\(1,2\d\d,\d\d\d bytes in its first 6 rows\)"):
            off.queries.compute(row, sql="SELECT a, b FROM artifact")


def test_a_jmespath_result_repeating_the_document_is_refused_and_nothing_is_stored(sqlite_url):
    with Offloader(sqlite_url, query_result_bytes=1024**2) as off:
        source = off.put([{"id": i, "name": "x" * 50} for i in range(2000)], tool="api").artifact_id
        before = off.list()[0]
        with pytest.raises(ResultTooLarge, match="more than 1,048,576 bytes"):
            off.query_artifact(source, jmespath=" | ".join(["[@, @]"] * 12))  # 4,096 copies: 500 MB
        assert off.list()[0] == before and off.extracts() == []
        stored = off.query_artifact(source, jmespath="[@, @]")  # 2 copies, 230 KB: stored whole
        assert stored["count"] == 2 and stored["bytes"] == 2 * len(orjson.dumps(off.queries.document(
            off.store.get(source, off.namespace)))) + 3


def test_a_string_too_big_to_return_is_stored_as_its_text(sqlite_url):
    """A web page fetched as {status, headers, body} is one line of JSON: grep said "1 result" of 387,
    and jmespath="body" stored the page as one JSON string, one line of `\\n` escapes, that no line
    paging or grep could read. The string is stored as its text, and a grep of the one-line document
    says what a match of it is."""
    from offload import Offloader

    rows = [f'<div class="card" data-sku="SKU-{i}"><span class="stock">{"Out of stock" if i % 3 else "In stock"}'
            f'</span><a href="/p/{i}">Widget model {i}</a></div>' for i in range(3_000)]
    html = "<!DOCTYPE html>\n<html><body>\n" + "\n".join(rows) + "\n</body></html>\n"
    with Offloader(sqlite_url) as off:
        ref = off.process("http_get", {"status": 200, "headers": {"content-type": "text/html"}, "body": html})
        assert ref.lines == 1
        whole = off.query_artifact(ref.artifact_id, grep="Out of stock", limit=1)
        assert whole["count"] == 1 and "one line of JSON" in whole["note"]
        body = off.query_artifact(ref.artifact_id, jmespath="body")
        derived = body["artifact_id"]
        assert b"".join(off.iter_raw(derived)) == html.encode() and "stored as its text" in body["text"]
        found = off.query_artifact(derived, grep="Out of stock", limit=3)
        assert found["count"] == sum("Out of stock" in row for row in rows) == 2_000
        page = off.fetch_slice(derived, offset=2, limit=2)
        assert page["content"].split("\n") == rows[:2]
        # a string that UTF-8 cannot hold stays JSON
        odd = off.process("http_get", {"body": "\ud800" + "x" * 100_000})
        assert b"".join(off.iter_raw(off.query_artifact(odd.artifact_id, jmespath="body")["artifact_id"])).startswith(b'"\\ud800')


def test_an_empty_filter_on_a_double_quoted_name_says_what_the_string_finds(sqlite_url):
    """`[?state=="open"]` compares state with a field named open: JMESPath's strings take single quotes.
    It returned [] and said nothing; the note gives the expression with strings, run, and its count."""
    from offload import Offloader
    from offload.tools.schemas import dispatch

    doc = [{"id": i, "state": ["open", "closed", "closed"][i % 3]} for i in range(3_000)]
    with Offloader(sqlite_url) as off:
        ref = off.process("http_get", json.dumps(doc))
        empty = off.query_artifact(ref.artifact_id, jmespath='[?state=="open"]', limit=5)
        assert empty["result"] == [] and "[?state=='open'] returns 1,000 results" in empty["note"]
        counted = off.query_artifact(ref.artifact_id, jmespath='length([?state=="open"])')
        assert counted["result"] == 0 and "length([?state=='open']) returns 1000" in counted["note"]
        text = dispatch(off, "query_artifact", {"artifact_id": ref.artifact_id, "jmespath": '[?state=="open"]'}).text
        assert "double-quoted" in text
        # a result that is not empty but as wrong (every item), and a quoted name the items have, kept
        unequal = off.query_artifact(ref.artifact_id, jmespath='[?state!="open"] | length(@)')
        assert unequal["result"] == 3_000 and "[?state!='open'] | length(@) returns 2000" in unequal["note"]
        left = off.query_artifact(ref.artifact_id, jmespath='[?"state"=="open"] | length(@)')
        assert "[?\"state\"=='open'] | length(@) returns 1000" in left["note"]
        # nothing to say when the strings find nothing either, or when no quoted name is compared
        assert "note" not in off.query_artifact(ref.artifact_id, jmespath='[?state=="merged"]')
        assert "note" not in off.query_artifact(ref.artifact_id, jmespath="[?state=='open'] | [0]")
