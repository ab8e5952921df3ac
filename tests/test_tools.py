"""fetch_slice and query_artifact through the Offloader: units, budgets, paging, errors, the extract log, rerun."""

from __future__ import annotations

import json
import re

import jmespath as jmespath_lib
import orjson
import pytest
import sqlalchemy as sa

from offload import Offloader
from offload.errors import ArtifactExpired, ArtifactNotFound, InvalidArgument, QueryError, QueryTimeout

SLICE_FIELDS = {"artifact_id", "unit", "offset", "limit", "returned", "total", "next_offset", "next", "content"}
QUERY_FIELDS = {"artifact_id", "kind", "expression", "result", "count", "next_offset", "next"}


def make_log(n: int = 60_000) -> str:
    body = "".join(f"2026-12-01T10:{i // 3600 % 60:02d}:{i % 60:02d} INFO worker-{i % 7} handled request "
                   f"id={i:06d} in {i % 97} ms\n" for i in range(n))
    return body + "ERROR worker-3 request id=999999 failed: connection reset by peer\nexit status 1\n"


def make_records(n: int = 40_000) -> dict:
    statuses = ["ok", "ok", "ok", "error", "pending"]
    return {"total": n, "data": [{"id": i, "status": statuses[i % 5], "name": f"record-{i}",
                                  "owner": {"team": f"team-{i % 11}"}} for i in range(n)]}


@pytest.fixture
def log_ref(off):
    text = make_log()
    ref = off.process("bash", text)
    return ref, text


@pytest.fixture
def json_ref(off):
    doc = make_records()
    return off.process("api", doc), doc


# -- fetch_slice --------------------------------------------------------------------------------


def test_lines_page_forward_and_from_the_end(off, log_ref):
    ref, text = log_ref
    lines = text.split("\n")[:-1]
    page = off.fetch_slice(ref.artifact_id, offset=100, limit=50)
    assert set(page) >= SLICE_FIELDS
    assert page["content"].split("\n") == lines[100:150]
    assert (page["returned"], page["total"], page["next_offset"]) == (50, len(lines), 150)
    assert page["next"] == {"artifact_id": ref.artifact_id, "unit": "lines", "offset": 150, "limit": 50}
    last = off.fetch_slice(ref.artifact_id, offset=-2)
    assert last["content"].split("\n") == lines[-2:] and last["next"] is None and last["next_offset"] is None
    assert "failed: connection reset" in last["content"]
    beyond = off.fetch_slice(ref.artifact_id, offset=len(lines) + 5)
    assert beyond["returned"] == 0 and beyond["content"] == "" and beyond["next"] is None


def stdlib_text(min_bytes: int = 1_500_000) -> str:
    """Real source code: standard library modules concatenated."""
    import sysconfig
    from pathlib import Path

    parts, size = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size >= min_bytes:
            break
    return "".join(parts)


def test_following_next_reads_everything_exactly_once(off, real_count):
    text = stdlib_text()
    ref = off.process("read", text)
    got, call = [], {"artifact_id": ref.artifact_id, "offset": 0}
    while call is not None:
        page = off.fetch_slice(**call)
        assert real_count(orjson.dumps(page).decode()) <= off.settings.slice_tokens
        got.append(page["content"])
        call = page["next"]
    assert "\n".join(got) == text.removesuffix("\n")


def test_a_line_longer_than_the_budget_is_cut_by_characters(off, real_count):
    long_line = "".join(f"{i:06d}," for i in range(200_000))  # 1.4 MB on one line
    text = "short first line\n" + long_line + "\nlast\n"
    ref = off.process("read", text)
    page = off.fetch_slice(ref.artifact_id, offset=1, limit=5)
    assert page["returned"] == 0 and "cut" in page and long_line.startswith(page["content"])
    assert real_count(page["content"]) <= off.settings.slice_tokens
    pieces, call = [page["content"]], page["next"]
    assert call["unit"] == "chars"
    while call is not None:
        nxt = off.fetch_slice(**call)
        pieces.append(nxt["content"])
        call = nxt["next"]
        if sum(map(len, pieces)) >= len(long_line):
            break
    assert "".join(pieces)[: len(long_line)] == long_line


def test_chars_and_bytes_units(off):
    text = "héllo wörld — ünïcödé\n" * 50_000
    ref = off.process("read", text)
    page = off.fetch_slice(ref.artifact_id, unit="chars", offset=1_000_003, limit=40)
    assert page["content"] == text[1_000_003:1_000_043]
    raw = text.encode()
    page = off.fetch_slice(ref.artifact_id, unit="bytes", offset=2_000_000, limit=30)
    assert page["content"] == raw[2_000_000:2_000_030].decode("utf-8", errors="replace")
    assert page["total"] == len(raw)


def test_binary_reads_as_base64_bytes_only(off):
    import base64
    import os

    blob = b"\x89PNG\r\n\x1a\n" + os.urandom(300_000)
    ref = off.process("screenshot", blob)
    page = off.fetch_slice(ref.artifact_id, unit="bytes", offset=0, limit=64)
    assert page["encoding"] == "base64" and base64.b64decode(page["content"]) == blob[:64]
    with pytest.raises(InvalidArgument, match="bytes"):
        off.fetch_slice(ref.artifact_id)


def test_items_of_the_main_array_and_of_any_path(off, json_ref):
    ref, doc = json_ref
    assert ref.items == len(doc["data"])
    page = off.fetch_slice(ref.artifact_id, unit="items", offset=20_000, limit=3)
    assert json.loads(page["content"]) == doc["data"][20_000:20_003]
    assert page["total"] == len(doc["data"]) and page["next"]["offset"] == 20_003
    last = off.fetch_slice(ref.artifact_id, unit="items", offset=-1)
    assert json.loads(last["content"]) == doc["data"][-1:]
    nested = off.fetch_slice(ref.artifact_id, unit="items", path="data[?status=='error']", offset=2, limit=2)
    assert json.loads(nested["content"]) == [d for d in doc["data"] if d["status"] == "error"][2:4]
    assert nested["next"]["path"] == "data[?status=='error']"


def test_ndjson_rows_are_items(off):
    rows = [{"ts": i, "level": "error" if i % 100 == 0 else "info", "msg": f"m{i}"} for i in range(30_000)]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    ref = off.process("logs", text)
    assert ref.kind == "ndjson"
    page = off.fetch_slice(ref.artifact_id, unit="items", offset=29_998)
    assert json.loads(page["content"]) == rows[-2:]


def test_ndjson_with_a_byte_order_mark_is_ndjson(off):
    """The BOM had failed row 0, and the whole result was text: no items, no SQL."""
    rows = [{"id": i, "status": "ok" if i % 3 else "bad"} for i in range(3000)]
    text = "\ufeff" + "".join(json.dumps(r) + "\n" for r in rows)
    ref = off.process("api", text)
    assert ref.kind == "ndjson" and ref.items == 3000 and "starts with a UTF-8 byte order mark" in ref.notes
    assert json.loads(off.fetch_slice(ref.artifact_id, unit="items", limit=2)["content"]) == rows[:2]
    assert off.query_artifact(ref.artifact_id, sql="SELECT count(*) AS n FROM artifact WHERE status = 'bad'")[
        "result"] == [{"n": 1000}]
    assert b"".join(off.iter_raw(ref.artifact_id)) == text.encode()


@pytest.mark.parametrize("kwargs, match", [
    ({"limit": -1}, "negative"),
    ({"unit": "pages"}, "unit must be one of"),
    ({"unit": "items"}, "JSON array"),
    ({"offset": "ten"}, "integer"),
    ({"path": "a.b"}, "applies to unit"),
])
def test_bad_slice_arguments_are_explained(off, log_ref, kwargs, match):
    ref, _ = log_ref
    with pytest.raises(InvalidArgument, match=match):
        off.fetch_slice(ref.artifact_id, **kwargs)


def test_unknown_and_other_namespace_ids_are_not_found(off, log_ref, store_url):
    ref, _ = log_ref
    with pytest.raises(ArtifactNotFound, match="offload ls"):
        off.fetch_slice("art_doesnotexist000")
    with Offloader(store_url, namespace="other-tenant") as other:
        with pytest.raises(ArtifactNotFound) as info:
            other.fetch_slice(ref.artifact_id)
        assert str(info.value) == str(ArtifactNotFound(ref.artifact_id))  # same as never existed
        assert other.list()[0] == []


def test_a_models_call_is_read_as_it_meant_it(off, log_ref):
    """Models fill every field (null for "the default"), write numbers as strings and copy ids with the
    quotes or spaces around them: each was refused, the id as "not found", and that message named
    `offload ls`, which a model cannot run."""
    from offload.tools.schemas import TOOLS, dispatch

    ref, _ = log_ref
    aid = ref.artifact_id
    plain = dispatch(off, "fetch_slice", {"artifact_id": aid, "offset": -40})
    for args in ({"artifact_id": aid, "offset": "-40", "limit": None, "unit": None, "path": None},
                 {"artifact_id": f' "{aid}" ', "offset": " -40 "}, {"artifact_id": aid.upper(), "offset": -40}):
        out = dispatch(off, "fetch_slice", args)
        assert not out.is_error and out.text == plain.text, (args, out.text[:300])
    nulls = {name: None for name in TOOLS["query_artifact"]["input_schema"]["properties"] if name != "artifact_id"}
    out = dispatch(off, "query_artifact", {"artifact_id": aid, **nulls, "grep": "ERROR", "limit": "2"})
    assert not out.is_error and out.structured["result"] == off.query_artifact(aid, grep="ERROR", limit=2)["result"]
    # what is in doubt is still refused, with the reason
    for args, says in (({"artifact_id": aid, "offset": "ten"}, "integer"),
                       ({"artifact_id": aid, "offset": "1.5"}, "integer"), ({"artifact_id": aid + "x"}, "No artifact")):
        out = dispatch(off, "fetch_slice", args)
        assert out.is_error and says in out.text, out.text
    missing = dispatch(off, "fetch_slice", {"artifact_id": "art_" + "z" * 16})
    assert missing.is_error and "offload ls" not in missing.text
    assert "as a reference in this conversation" in missing.text
    assert all("null" in TOOLS[name]["input_schema"]["properties"]["offset"]["type"] for name in TOOLS)


def test_expired_ids_say_expired(off, log_ref):
    ref, _ = log_ref
    with off.store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE artifacts SET expires_at = :t WHERE id = :i"),
                     {"t": sa.func.now() if False else "2000-01-01 00:00:00", "i": ref.artifact_id})
    off.gc()
    with pytest.raises(ArtifactExpired, match="expired"):
        off.fetch_slice(ref.artifact_id)
    with pytest.raises(ArtifactExpired):
        off.query_artifact(ref.artifact_id, grep="x")


# -- query_artifact -----------------------------------------------------------------------------


@pytest.mark.parametrize("expression", [
    "length(data)", "data[?status=='error'].id | [:50]", "data[12345]", "total", "data[?owner.team=='team-3'] | [0]",
    "max_by(data, &id).name",
])
def test_jmespath_equals_the_library(off, json_ref, expression):
    ref, doc = json_ref
    out = off.query_artifact(ref.artifact_id, jmespath=expression)
    assert set(out) >= QUERY_FIELDS
    assert out["result"] == jmespath_lib.search(expression, doc)


def test_a_large_query_result_becomes_a_derived_artifact(off, json_ref):
    ref, doc = json_ref
    out = off.query_artifact(ref.artifact_id, jmespath="data[?status=='ok']")
    assert "result" not in out and out["derived_from"] == ref.artifact_id
    expected = jmespath_lib.search("data[?status=='ok']", doc)
    assert out["count"] == len(expected) and out["items"] == len(expected)
    stored = b"".join(off.iter_raw(out["artifact_id"]))
    assert json.loads(stored) == expected
    assert off.get(out["artifact_id"])["parent_id"] == ref.artifact_id
    paged = off.query_artifact(ref.artifact_id, jmespath="data[?status=='ok']", offset=10, limit=5)
    assert paged["result"] == expected[10:15] and paged["next_offset"] == 15


def test_a_derived_results_response_fits_the_reference_budget_with_its_text(off, json_ref):
    """The response for a result stored as a derived artifact carries the reference's text and its JSON
    together; the whole of it fits the reference budget (it took 1,600 tokens at 800)."""
    from offload.tokens import exact_tokenizer

    ref, _ = json_ref
    out = off.query_artifact(ref.artifact_id, jmespath="data[?status=='ok']")
    measured = json.dumps(out, ensure_ascii=False)
    assert max(exact_tokenizer("o200k_base")(measured), exact_tokenizer("cl100k_base")(measured)) <= 800
    assert out["text"] == off.reference(out["artifact_id"])["text"] and "left_out" in out
    assert out["derived_from"] == ref.artifact_id and out["artifact_id"] in out["text"]


def test_invalid_jmespath_names_the_position_and_an_example(off, json_ref):
    ref, _ = json_ref
    with pytest.raises(QueryError) as info:
        off.query_artifact(ref.artifact_id, jmespath="data[?status=='error'")
    message = info.value.model_message()
    assert "^" in message and "data" in message


def test_grep_numbers_lines_like_fetch_slice_with_context_and_paging(off, log_ref):
    ref, text = log_ref
    lines = text.split("\n")[:-1]
    out = off.query_artifact(ref.artifact_id, grep=r"id=0012[0-9]{2} ", limit=3, context=1)
    expected = [i for i, line in enumerate(lines) if "id=0012" in line]
    assert out["count"] == len(expected)
    first = expected[0]
    assert out["result"][0] == f"{first - 1}- {lines[first - 1]}"
    assert out["result"][1] == f"{first}: {lines[first]}"
    assert out["next_offset"] == 3
    tail = off.query_artifact(ref.artifact_id, grep="ERROR|exit status", offset=-2)
    assert tail["result"] == [f"{len(lines) - 2}: {lines[-2]}", f"{len(lines) - 1}: {lines[-1]}"]


def test_grep_reads_crlf_lines_as_the_preview_shows_them(off):
    """`ok$` matched none of 20,000 lines ending in "ok\r\n", a confident count of 0, and matches came back
    with the CR: grep now sees lines as the preview does, without it. fetch_slice keeps it (exact bytes)."""
    from offload.store.chunking import CHUNK_SIZE, chunk_bytes

    ref = off.put("".join(f"req {i} ok\r\n" for i in range(20_000)), tool="cat")
    assert any("grep show lines without the CR" in note for note in ref.notes)
    ended = off.query_artifact(ref.artifact_id, grep=r"ok$", limit=2, context=1)
    assert ended["count"] == 20_000
    assert ended["result"] == ["0: req 0 ok", "1: req 1 ok"]
    assert off.query_artifact(ref.artifact_id, grep=r"^req 7 ok$")["count"] == 1
    assert off.fetch_slice(ref.artifact_id, offset=0, limit=1)["content"] == "req 0 ok\r"
    # a CRLF cut by the chunk boundary: the CR ends one chunk, the LF starts the next
    head = "x" * (CHUNK_SIZE - len("long ok\r")) + "long ok\r"
    data = head + "\nshort ok\r\n"
    assert bytes(next(chunk_bytes(data.encode())).data).endswith(b"long ok\r")
    split = off.put(data, tool="cat")
    assert off.query_artifact(split.artifact_id, grep=r"ok$")["count"] == 2


def test_a_page_past_the_last_result_says_where_the_results_are(off):
    from offload.tools.schemas import dispatch

    ref = off.put("".join(f"req {i} ok\n" for i in range(20_000)), tool="cat")
    past = dispatch(off, "query_artifact", {"artifact_id": ref.artifact_id, "grep": "ok", "offset": 30_000}).text
    assert past.startswith("(none at this offset)") and "the 20,000 are at offsets 0–19,999" in past
    none = dispatch(off, "query_artifact", {"artifact_id": ref.artifact_id, "grep": "nothing like it"}).text
    assert none.startswith("(no match)") and "none at this offset" not in none
    aid = off.put([{"a": i} for i in range(3000)], tool="api").artifact_id
    past = dispatch(off, "query_artifact", {"artifact_id": aid, "jmespath": "[].a", "offset": 5000}).text
    assert "the 3,000 are at offsets 0–2,999" in past


def test_context_with_jmespath_or_sql_is_refused_not_ignored(off):
    aid = off.put([{"a": i} for i in range(3000)], tool="api").artifact_id
    for expression in ({"jmespath": "[0]"}, {"sql": "SELECT 1"}):
        with pytest.raises(InvalidArgument, match="context is the lines around each grep match"):
            off.query_artifact(aid, context=2, **expression)
        assert off.query_artifact(aid, context=0, **expression)["count"] == 1


def test_grep_bad_and_catastrophic_patterns(off, store_url):
    ref = off.process("read", ("a" * 4000 + "b\n") * 300)
    with pytest.raises(QueryError):
        off.query_artifact(ref.artifact_id, grep="(unclosed")
    with Offloader(store_url, query_timeout=0.5) as quick:
        with pytest.raises(QueryTimeout, match="slow"):
            quick.query_artifact(ref.artifact_id, grep=r"(a|aa)+$")


def test_sql_over_json_ndjson_and_csv(off, json_ref):
    ref, doc = json_ref
    out = off.query_artifact(ref.artifact_id, sql="SELECT status, count(*) AS n FROM artifact GROUP BY 1 ORDER BY 1")
    counts = {}
    for d in doc["data"]:
        counts[d["status"]] = counts.get(d["status"], 0) + 1
    assert out["result"] == [{"status": k, "n": v} for k, v in sorted(counts.items())]
    csv_text = "city,population,founded\n" + "".join(f"c{i},{i * 1000},{1000 + i}\n" for i in range(20_000))
    cref = off.process("export", csv_text)
    assert cref.kind == "csv"
    top = off.query_artifact(cref.artifact_id, sql="SELECT city FROM artifact ORDER BY population DESC LIMIT 2")
    assert top["result"] == [{"city": "c19999"}, {"city": "c19998"}]


@pytest.mark.parametrize("sql", [
    "ATTACH '/tmp/x.db' AS x", "COPY artifact TO '/tmp/out.csv'", "INSTALL httpfs", "LOAD httpfs",
    "SET enable_external_access = true", "PRAGMA version", "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT getenv('HOME')", "SELECT * FROM artifact; DROP TABLE artifact",
])
def test_hostile_sql_is_refused_and_changes_nothing(off, json_ref, sql):
    ref, doc = json_ref
    with pytest.raises(QueryError):
        off.query_artifact(ref.artifact_id, sql=sql)
    assert off.query_artifact(ref.artifact_id, sql="SELECT count(*) AS n FROM artifact")["result"] == [
        {"n": len(doc["data"])}]


def test_runaway_sql_stops_with_a_clear_message(json_ref, store_url):
    ref, _ = json_ref
    with Offloader(store_url, query_timeout=1.0) as quick:
        with pytest.raises(QueryTimeout):
            quick.query_artifact(ref.artifact_id, sql="SELECT count(*) FROM artifact a, artifact b, artifact c")


@pytest.mark.parametrize("name, says", [("offset", "a negative offset counts from the end"),
                                        ("limit", "omit limit (null)"), ("context", "context is 0 to 50")])
def test_a_number_past_64_bits_is_out_of_range_with_advice_for_that_argument(off, log_ref, name, says):
    ref, _ = log_ref
    with pytest.raises(InvalidArgument, match=rf"^{name} 1{'0' * 30} is out of range: .*{re.escape(says)}"):
        off.query_artifact(ref.artifact_id, grep="ERROR", **{name: 10**30})
    if name != "context":
        with pytest.raises(InvalidArgument, match=re.escape(says)):
            off.fetch_slice(ref.artifact_id, **{name: -(10**30)})


def test_what_a_query_cannot_read_points_to_what_can(off, log_ref):
    binary = off.put(bytes(range(256)) * 4000, tool="download").artifact_id
    for args in ({"jmespath": "a"}, {"sql": "SELECT 1"}, {"grep": "x"}):
        with pytest.raises(InvalidArgument) as refused:
            off.query_artifact(binary, **args)
        assert 'fetch_slice(unit="bytes")' in str(refused.value) and "grep=" not in str(refused.value)
    text, _ = log_ref
    with pytest.raises(InvalidArgument, match='grep="regex"'):
        off.query_artifact(text.artifact_id, jmespath="a")


def test_sql_nested_past_duckdbs_parser_is_told_how_to_write_it_not_to_set_a_limit(off, json_ref):
    ref, _ = json_ref
    with pytest.raises(QueryError, match="nested too deeply") as refused:
        off.query_artifact(ref.artifact_id, sql="SELECT " + " + ".join(["id"] * 3000) + " FROM artifact")
    assert "SET" not in str(refused.value)


def test_an_extract_cut_by_a_real_tokenizer_reruns_with_it(sqlite_url):
    """Pages cut by o200k are other pages than the heuristic cuts: a rerun without the tokenizer said
    "changed" of extracts nothing had changed."""
    text = "\n".join(f"row {i} ERROR é日 {'abc' * (i % 30)}" for i in range(5000))
    with Offloader(sqlite_url, tokenizer="o200k_base", slice_tokens=400, query_tokens=400) as counted:
        aid = counted.put(text, tool="read").artifact_id
        counted.fetch_slice(aid)
        counted.query_artifact(aid, grep="ERROR", limit=1000)
        assert [e["args"]["_tokenizer"] for e in counted.extracts()] == ["o200k_base"] * 2
    with Offloader(sqlite_url, slice_tokens=400, query_tokens=400) as heuristic:
        assert [r["status"] for r in heuristic.rerun()] == ["unchanged", "unchanged"]
        page = heuristic.fetch_slice(aid)  # its own pages are logged as the heuristic's
        assert "_tokenizer" not in heuristic.extracts()[-1]["args"] and page["returned"] > 0
        assert [r["status"] for r in heuristic.rerun()] == ["unchanged"] * 3


def test_query_argument_errors(off, json_ref, log_ref):
    ref, _ = json_ref
    with pytest.raises(InvalidArgument, match="exactly one"):
        off.query_artifact(ref.artifact_id)
    with pytest.raises(InvalidArgument, match="exactly one"):
        off.query_artifact(ref.artifact_id, jmespath="total", grep="x")
    with pytest.raises(InvalidArgument, match="negative"):
        off.query_artifact(ref.artifact_id, jmespath="data", limit=-5)
    lref, _ = log_ref
    with pytest.raises(InvalidArgument, match="JSON"):
        off.query_artifact(lref.artifact_id, jmespath="length(@)")
    with pytest.raises(InvalidArgument, match="tabular"):
        off.query_artifact(lref.artifact_id, sql="SELECT 1 FROM artifact")
    # an empty grep matched every line, and stored the whole artifact again as a derived one
    with pytest.raises(InvalidArgument, match="grep is empty, which matches every line"):
        off.query_artifact(lref.artifact_id, grep="")
    assert len(off.list()[0]) == 2


def test_a_query_error_says_what_the_expression_met_and_an_example_that_runs(off):
    """A well-formed JMESPath that met a missing key was called "Invalid JMESPath expression", and the SQL
    error's example grouped by `status` whatever the table's columns were."""
    doc = off.put({"items": [{"id": i} for i in range(3000)]}, tool="api")
    with pytest.raises(QueryError) as info:
        off.query_artifact(doc.artifact_id, jmespath="length(nosuchkey)")
    assert info.value.model_message().startswith("JMESPath failed on this document: length() needs string or "
                                                 "array or object, got null (a key the document does not hold")
    table = off.put("a,b,order\n" + "".join(f"{i},{i},{'xy'[i % 2]}\n" for i in range(3000)), tool="export")
    with pytest.raises(QueryError) as info:
        off.query_artifact(table.artifact_id, sql="SELECT nosuch FROM artifact")
    example = re.search(r"Example: (.*)$", info.value.model_message()).group(1)
    assert example == 'SELECT "order", count(*) FROM artifact GROUP BY 1'
    assert sorted(map(tuple, map(dict.values, off.query_artifact(table.artifact_id, sql=example)["result"]))) == [
        ("x", 1500), ("y", 1500)]


# -- the extract log and rerun ------------------------------------------------------------------


def test_every_extract_is_logged_and_reruns_unchanged_until_bytes_change(off, json_ref, log_ref):
    jref, _ = json_ref
    lref, _ = log_ref
    off.fetch_slice(lref.artifact_id, offset=-10, session="s1")
    off.query_artifact(lref.artifact_id, grep="ERROR", session="s1")
    off.query_artifact(jref.artifact_id, jmespath="data[?status=='error'].id | [:10]")
    off.query_artifact(jref.artifact_id, sql="SELECT count(*) AS n FROM artifact")
    log = off.extracts()
    assert [e["op"] for e in log] == ["slice", "grep", "jmespath", "sql"]
    assert all(e["result_sha256"] and e["duration_ms"] >= 0 for e in log)
    assert log[0]["session"] == "s1" and log[0]["args"]["offset"] == -10
    assert {r["status"] for r in off.rerun()} == {"unchanged"}
    # rewrite the log artifact's last chunk underneath: its two extracts change, the JSON ones don't
    sha = off.get(lref.artifact_id)["sha256"]
    with off.store.engine.begin() as conn:
        seq = conn.execute(sa.text("SELECT max(seq) FROM chunks WHERE sha256 = :s"), {"s": sha}).scalar()
        data = conn.execute(sa.text("SELECT data FROM chunks WHERE sha256 = :s AND seq = :q"),
                            {"s": sha, "q": seq}).scalar()
        data = bytes(data).replace(b"ERROR", b"ERRQR")
        conn.execute(sa.text("UPDATE chunks SET data = :d WHERE sha256 = :s AND seq = :q"),
                     {"d": data, "s": sha, "q": seq})
    fresh = Offloader(off.settings.url)  # a new process's view: no cached parse
    results = {r["kind"]: r["status"] for r in fresh.rerun()}
    assert results == {"slice": "changed", "grep": "changed", "jmespath": "unchanged", "sql": "unchanged"}
    fresh.close()
