"""SQL reads a tabular artifact as its reference describes it: the delimiter detection found, the shape's
rows, names and NULLs, every row and value of a ragged CSV, JSON keys that differ only in case each under
its own stated name; and what it cannot read, it says how to query instead, with arguments it takes."""

from __future__ import annotations

import json
import re

import pytest

from offload import Offloader, QueryError
from offload.content.table import read_layout, records
from offload.tools.schemas import QUERY_ARTIFACT_SCHEMA, dispatch


@pytest.fixture
def off(sqlite_url):
    with Offloader(sqlite_url) as offloader:
        yield offloader


def sql(off: Offloader, artifact_id: str, query: str) -> list[dict]:
    return off.query_artifact(artifact_id, sql=query)["result"]


# -- A: the delimiter detection found -------------------------------------------------------------------


@pytest.mark.parametrize("delimiter", ["\t", ",", ";", "|"])
def test_sql_reads_every_delimiter_detection_reports(off, delimiter):
    # a field holding each other delimiter, as a decimal comma does in a semicolon-separated export
    others = "".join(d for d in "\t,;|" if d != delimiter).replace("\t", " ")
    fields = ["id", "price", "name"]
    text = delimiter.join(fields) + "\n" + "".join(
        delimiter.join([str(i), f"{i}{others}5", f"item{i}"]) + "\n" for i in range(3000))
    ref = off.put(text, tool="export")
    assert (ref.kind, ref.shape["delimiter"], ref.shape["rows"]) == ("csv", delimiter, 3000)
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n FROM artifact") == [{"n": 3000}]
    assert sql(off, ref.artifact_id, "SELECT * FROM artifact WHERE id = 7") == [
        {"id": 7, "price": f"7{others}5", "name": "item7"}]


# -- B: keys that differ only in case ------------------------------------------------------------------


def test_keys_differing_only_in_case_are_never_read_for_one_another(off):
    aid = off.put([{"Name": i, "name": -i} for i in range(3000)], tool="api").artifact_id
    with pytest.raises(QueryError) as caught:  # `name` would read the column of "Name"
        sql(off, aid, 'SELECT sum("name") AS s FROM artifact')
    assert '"Name_1" holds the key "Name"; "name_2" holds the key "name"' in str(caught.value)
    out = off.query_artifact(aid, sql="SELECT sum(Name_1) AS up, sum(name_2) AS down FROM artifact")
    assert out["result"] == [{"up": 4498500, "down": -4498500}]
    assert '"name_2" holds the key "name"' in out["note"]
    assert "name_2" in dispatch(off, "query_artifact", {"artifact_id": aid, "sql": "SELECT 1 AS one"}).text


def test_a_result_stored_as_a_derived_artifact_keeps_the_note(off, real_count):
    # stored whole because too big to show inline, the result lost the note saying which column is which key
    aid = off.put([{"Name": i, "name": -i, "pad": "x" * 40} for i in range(3000)], tool="api").artifact_id
    out = off.query_artifact(aid, sql="SELECT * FROM artifact")
    assert "derived_from" in out and '"name_2" holds the key "name"' in out["text"]
    # the JSON's own copy gives way first when the budget is tight, and says so
    assert '"name_2" holds the key "name"' in out.get("note", "") or "note" in out["left_out"]["fields"]
    text = dispatch(off, "query_artifact", {"artifact_id": aid, "sql": "SELECT * FROM artifact"}).text
    assert '"name_2" holds the key "name"' in text
    assert real_count(text) <= off.settings.reference_tokens


def test_a_derived_result_with_the_note_still_shows_a_row(off, real_count):
    # its text had ~370 tokens beside its JSON, which held the note too: the rows of 5 keys gave way
    # to the hints, and it showed none (one artifact id in three or so: ids tokenize apart)
    items = [{"Name": f"n{i}", "name": f"x{i}", "status": "ok" if i % 3 else "bad", "v": i, "desc": "word " * 30}
             for i in range(3000)]
    aid = off.put(items, tool="api").artifact_id
    for _ in range(6):
        out = off.query_artifact(aid, sql="SELECT * FROM artifact")
        assert '{"Name_1": "n0"' in out["text"], out["text"]
        assert '"name_2" holds the key "name"' in out["text"]
        assert real_count(json.dumps(out, separators=(",", ":"))) <= off.settings.reference_tokens


def test_case_renames_reach_ndjson_nested_keys_and_taken_names(off):
    rows = "".join(f'{{"id": {i}, "ID": "x{i}", "id_1": {i * 2}, "s": {{"X": {i}, "x": {-i}}}}}\n'
                   for i in range(3000))
    ref = off.put(rows, tool="api")
    assert ref.kind == "ndjson"
    out = off.query_artifact(ref.artifact_id, sql="SELECT id_2, ID_3, id_1, s.X_1 AS a, s.x_2 AS b FROM artifact "
                                                  "WHERE id_2 = 5")
    assert out["result"] == [{"id_2": 5, "ID_3": "x5", "id_1": 10, "a": 5, "b": -5}]
    assert '"s.x_2" holds the key "x"' in out["note"] and '"id_2" holds the key "id"' in out["note"]


def test_case_renames_reach_values_nested_600_levels_deep(off):
    # the renaming walked the rows by recursion: a RecursionError (internal_error) from ~500 levels
    deep: object = 1
    for _ in range(600):
        deep = [deep]
    rows = [{"Name": i, "name": -i, "tags": [{"B": i}, {"b": -i}], "deep": deep if i == 0 else None}
            for i in range(3000)]
    aid = off.put(rows, tool="api").artifact_id
    out = off.query_artifact(aid, sql="SELECT sum(Name_1) AS up, sum(name_2) AS down, "
                                      "sum(tags[1].B_1) AS b1, sum(tags[2].b_2) AS b2 FROM artifact")
    assert out["result"] == [{"up": 4498500, "down": -4498500, "b1": 4498500, "b2": -4498500}], out
    assert '"tags[].B_1" holds the key "B"' in out["note"]  # the first found is _1, in the items' order


def test_a_csv_whose_first_or_last_header_field_is_empty_is_a_table(off):
    """pandas' to_csv writes its index column with no name (",a,b"), and some exporters end every line
    with the delimiter: both were plain text, with no shape and no SQL."""
    pandas = ",a,b\n" + "".join(f"{i},{i * 2},n{i}\n" for i in range(3000))
    ref = off.put(pandas, tool="export")
    assert ref.kind == "csv" and list(ref.shape["columns"]) == ["column_0", "a", "b"]
    assert sql(off, ref.artifact_id, "SELECT column_0, a, b FROM artifact WHERE a = 8") == [
        {"column_0": 4, "a": 8, "b": "n4"}]
    trailing = "a,b,\n" + "".join(f"{i},n{i},\n" for i in range(3000))
    ref = off.put(trailing, tool="export")
    assert ref.kind == "csv" and list(ref.shape["columns"]) == ["a", "b", "column_2"]
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, count(column_2) AS filled FROM artifact") == [
        {"n": 3000, "filled": 0}]


def test_csv_header_names_differing_only_in_case_are_the_shapes(off):
    ref = off.put("Name,name,a,a\n" + "".join(f"{i},{-i},{i},{i * 2}\n" for i in range(3000)), tool="export")
    names = list(ref.shape["columns"])
    assert names == ["Name (1)", "name (2)", "a", "a (2)"]
    row = sql(off, ref.artifact_id, "SELECT * FROM artifact WHERE \"Name (1)\" = 3")
    assert row == [{"Name (1)": 3, "name (2)": -3, "a": 3, "a (2)": 6}]


# -- C: ragged rows --------------------------------------------------------------------------------


@pytest.mark.parametrize("delimiter", ["|", ","])
def test_a_last_line_counting_the_rows_before_it_is_no_row(off, delimiter):
    """`psql -A` (and `-F,`) ends with `(3000 rows)`: read as a row, it made 3,001, a column of numbers
    text, and one null in every other column. Only a count that is exact is taken for a footer."""
    body = "".join(f"{i}{delimiter}{2 * i}\n" for i in range(1, 3_001))
    data = f"n{delimiter}m\n{body}(3000 rows)\n".encode()
    ref = off.put(data, tool="psql")
    assert ref.shape["rows"] == 3_000 and ref.shape["columns"]["n"] == {"type": "integer"}
    result = off.query_artifact(ref.artifact_id, sql="SELECT count(*) c, typeof(n) t, sum(n) s FROM artifact GROUP BY 2")
    assert result["result"] == [{"c": 3_000, "t": "BIGINT", "s": 4_501_500}]
    assert [row for _, row in records(data.decode(), read_layout(data, data.decode(), delimiter))][-1] == ["3000", "6000"]
    wrong = f"n{delimiter}m\n{body}(2999 rows)\n".encode()  # not the count: a record, as it is
    assert off.put(wrong, tool="psql").shape["rows"] == 3_001


def test_a_preamble_of_comments_before_the_header_is_no_row_and_sql_reads_the_table(off):
    """An export's `# exported from …` lines before the header made the whole table text, and SQL
    refused it. A `#` line that has the table's fields is its header (VCF's `#CHROM`), and a `#` line in
    the body is a row, as it always was."""
    body = "".join(f"{i},name {i},{i * 0.5}\n" for i in range(3000))
    data = "# exported from test\n# by psql, 2026-12-07\nid,name,score\n" + body + "# not a comment,x,1\n"
    ref = off.put(data, tool="export")
    assert ref.kind == "csv" and ref.shape["rows"] == 3001 and ref.shape["comment_lines"] == 2
    assert list(ref.shape["columns"]) == ["id", "name", "score"]
    assert "2 # comment lines before it, not rows" in ref.render()
    assert ref.preview.startswith("# exported from test\n# by psql, 2026-12-07\nid,name,score\n0,name 0,0.0")
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, max(name) AS top FROM artifact WHERE name LIKE 'name %'") == [
        {"n": 3000, "top": "name 999"}]
    assert sql(off, ref.artifact_id, "SELECT id FROM artifact WHERE name = 'x'") == [{"id": "# not a comment"}]
    vcf = "##fileformat=VCFv4.2\n##source=test\n#CHROM\tPOS\tID\n" + "".join(f"chr1\t{i}\trs{i}\n" for i in range(3000))
    ref = off.put(vcf, tool="vcf")
    assert ref.shape["comment_lines"] == 2 and list(ref.shape["columns"]) == ["#CHROM", "POS", "ID"]
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, max(POS) AS m FROM artifact") == [{"n": 3000, "m": 2999}]
    spaced = off.put("\n# one\n\n# two\n\nid,name\n" + "".join(f"{i},n{i}\n" for i in range(3000)), tool="export")
    assert (spaced.shape["rows"], spaced.shape["comment_lines"]) == (3000, 2)  # blank lines are neither
    assert sql(off, spaced.artifact_id, "SELECT count(*) AS n FROM artifact") == [{"n": 3000}]
    hashed = off.put("#id,name\n" + "".join(f"{i},n{i}\n" for i in range(3000)), tool="export")
    assert "comment_lines" not in hashed.shape and list(hashed.shape["columns"]) == ["#id", "name"]


def test_a_ragged_csv_keeps_every_row_and_value_and_names_the_lines(off):
    lines = ["id,v"] + [f"{i},{i}" + (",extra" if i == 2500 else "") for i in range(3000)]
    lines[11] = "10"  # one field short
    ref = off.put("\n".join(lines) + "\n", tool="export")
    out = dispatch(off, "query_artifact", {"artifact_id": ref.artifact_id, "sql": "SELECT count(*) AS n FROM artifact"})
    assert not out.is_error and out.structured["result"] == [{"n": 3000}]
    note = out.structured["note"]
    assert len(note) < 400, note
    assert "(line 2,501)" in note and '"column_2"' in note and "(line 11)" in note and "fetch_slice" in note
    assert sql(off, ref.artifact_id, "SELECT id, v, column_2 FROM artifact WHERE column_2 IS NOT NULL OR v IS NULL "
                                     "ORDER BY id") == [{"id": 10, "v": None, "column_2": None},
                                                        {"id": 2500, "v": 2500, "column_2": "extra"}]
    assert off.fetch_slice(ref.artifact_id, offset=2501, limit=1)["content"] == "2500,2500,extra"


def test_the_shape_names_the_columns_sql_adds_for_ragged_records(off):
    # 20 records carry two fields past the header, 26 lack one: over every row, as SQL reads them
    lines = ["id,name,score"] + [f"{i},n{i}" + ("" if i % 777 == 3 else f",{i % 10}")
                                 + (",x,y" if i % 1000 == 5 else "") for i in range(20_000)]
    ref = off.put("\n".join(lines) + "\n", tool="export")
    assert ref.shape["ragged"] == {"longer": 20, "shorter": 26, "extra_columns": 2,
                                   "extra_names": ["column_3", "column_4"]}
    assert ("ragged: 20 rows have more fields than the header's 3 (SQL reads the extra ones as "
            '"column_3", "column_4"); 26 rows have fewer (SQL reads the missing ones as NULL)') in ref.render()
    columns = [row["column_name"] for row in sql(off, ref.artifact_id, "SELECT column_name FROM (DESCRIBE artifact)")]
    assert columns == ["id", "name", "score", "column_3", "column_4"]
    assert sql(off, ref.artifact_id, "SELECT count(column_4) AS longer, count(*) - count(score) AS shorter "
                                     "FROM artifact") == [{"longer": 20, "shorter": 26}]


def test_ragged_records_past_the_exact_pass_are_said_to_be_from_the_sample(off, monkeypatch):
    from offload.content import table
    monkeypatch.setattr(table, "EXACT_NULLS_CHARS", 10_000)
    lines = ["a,b"] + [f"{i},{i}" + ("," * (i // 100) if i % 100 == 0 else "") for i in range(1, 6000)]
    ref = off.put("\n".join(lines) + "\n", tool="export")
    # the first 2,000 rows hold 20 longer records (of 59), the widest with 22 fields: column_2 … column_21
    assert ref.shape["ragged"] == {"longer": 20, "extra_columns": 20, "extra_names": ["column_2", "column_21"],
                                   "from": "sample"}
    assert ("ragged in the first 2,000 rows: 20 rows have more fields than the header's 2 (SQL reads the "
            'extra ones as 20 more columns, "column_2" … "column_21")') in ref.render()


def test_lines_starting_with_a_hash_are_rows(off):
    # DuckDB's sniffer took them for comments in a table of up to ~500 rows, and dropped them
    text = "id,v\n" + "".join(f"{'#' if i % 10 == 1 else ''}{i},{i}\n" for i in range(500))
    ref = off.put(text, tool="export")
    assert ref.shape["rows"] == 500
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, count(*) FILTER (id LIKE '#%') AS hashed "
                                     "FROM artifact") == [{"n": 500, "hashed": 50}]


# -- C2: pipe tables drawn for people ------------------------------------------------------------------

_DRAWN = {
    # psql: a rule under the header, cells padded, NULL an empty cell, a row-count footer
    "psql": lambda rows: (" id |  name   | v \n----+---------+---\n"
                          + "".join(f" {i:>4} | n{i:<6} | {'' if i % 100 == 7 else i}\n" for i in rows)
                          + f"({len(rows):,} rows)\n"),
    # Markdown: pipes at both edges, alignment colons in the rule, an empty first cell
    "markdown": lambda rows: ("| id | name | v |\n|---:|:-----|--:|\n"
                              + "".join(f"| {i} | {'' if i % 100 == 7 else f'n{i}'} | {'' if i % 100 == 7 else i} |\n"
                                        for i in rows)),
    # the MySQL client: rules above and below, its own footer
    "mysql": lambda rows: ("+------+---------+------+\n| id   | name    | v    |\n+------+---------+------+\n"
                           + "".join(f"| {i:>4} | n{i:<6} | {'NULL' if i % 100 == 7 else i:>4} |\n" for i in rows)
                           + f"+------+---------+------+\n{len(rows)} rows in set (0.01 sec)\n"),
    # `sqlite3 -box`: drawn with box characters, rules above, under the header and below
    "sqlite-box": lambda rows: ("┌──────┬─────────┬──────┐\n│  id  │  name   │  v   │\n├──────┼─────────┼──────┤\n"
                                + "".join(f"│ {i:<4} │ n{i:<6} │ {'' if i % 100 == 7 else i:<4} │\n" for i in rows)
                                + "└──────┴─────────┴──────┘\n"),
    # `psql -P linestyle=unicode`: box characters between the cells only, and psql's footer
    "psql-unicode": lambda rows: (" id  │  name   │  v   \n─────┼─────────┼──────\n"
                                  + "".join(f" {i:>4} │ n{i:<6} │ {'' if i % 100 == 7 else i:>4}\n" for i in rows)
                                  + f"({len(rows):,} rows)\n"),
}


@pytest.mark.parametrize("style", sorted(_DRAWN))
def test_a_pipe_table_drawn_for_people_is_read_without_its_rules_and_padding(off, style):
    psql = style.startswith("psql")
    ref = off.put(_DRAWN[style](range(3000)) + ("\n" if psql else ""), tool="psql")  # psql ends so
    assert (ref.kind, ref.shape["rows"], list(ref.shape["columns"])) == ("csv", 3000, ["id", "name", "v"])
    # its last row, and psql's footer: the one tail line was the blank line psql ends with
    assert "2999" in ref.preview.rsplit("omitted", 1)[-1] and (not psql or "(3,000 rows)" in ref.preview)
    assert "ragged" not in ref.shape and ref.shape["columns"]["id"]["type"] == "integer"
    drawn = "box-drawn │" if style in ("sqlite-box", "psql-unicode") else "pipe"  # they were text
    said = f"3,000 rows × 3 columns ({drawn}-separated, header row; rule lines are not rows, cells are trimmed)"
    assert said in ref.render()
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, min(id) AS lo, max(id) AS hi FROM artifact") == [
        {"n": 3000, "lo": 0, "hi": 2999}]
    seven = sql(off, ref.artifact_id, "SELECT name, v FROM artifact WHERE id = 107")
    assert seven == [{"name": "n107", "v": None} if style in ("psql", "psql-unicode", "sqlite-box") else
                     {"name": None, "v": None} if style == "markdown" else {"name": "n107", "v": "NULL"}]


def test_a_psql_table_whose_cells_span_lines_or_hold_a_pipe_is_text_and_says_why(off):
    """Read as cells, psql's continuation lines were rows (467 where its footer said 463) and a cell
    holding `||` was split into two columns, silently."""
    rows = [f" {i:>4} | f{i:<5} | {'select 1' if i % 50 else 'select $1 || $2'}" for i in range(3000)]
    spanning = rows[:100] + [" 9999 | long  | line one +", "      |       | line two"] + rows[100:]
    for body, why in (("\n".join(rows), "cells where its header has 3 (a | inside a cell?)"),
                      ("\n".join(r.replace("||", "") for r in spanning), "has a cell that goes on over lines")):
        text = "  oid | name   | src\n------+--------+-----\n" + body + "\n(3,001 rows)\n"
        ref = off.put(text, tool="psql")
        assert ref.kind == "text" and ref.shape is None
        assert any(note.startswith("a table drawn for people, read as text: line ") and why in note
                   for note in ref.notes), ref.notes
    # the unicode line style marks such a cell `↵` (its 900 continuation lines had been rows), and a
    # `│` inside a cell is named as the `│` it is
    boxed = [f"│ {i:>4} │ f{i:<5} │ {'line one    ↵' if i % 3 else 'one line    '}│" for i in range(2_700)]
    boxed = [row + ("\n│      │        │ line two     │" if "↵" in row else "") for row in boxed]
    text = "┌──────┬────────┬──────────────┐\n│  id  │ name   │ note         │\n├──────┼────────┼──────────────┤\n"
    ref = off.put(text + "\n".join(boxed) + "\n└──────┴────────┴──────────────┘\n(2700 rows)\n", tool="psql")
    assert ref.kind == "text" and any("has a cell that goes on over lines" in note for note in ref.notes)
    piped = text + "\n".join(f"│ {i:>4} │ f{i:<5} │ {'a │ b' if i == 7 else 'ab'}         │" for i in range(2_700))
    ref = off.put(piped + "\n└──────┴────────┴──────────────┘\n", tool="psql")
    assert any("(a │ inside a cell?)" in note for note in ref.notes), ref.notes


def test_a_pipe_separated_export_without_rules_is_read_as_it_was():
    data = ("id|v\n" + "".join(f"{i}| {i} \n" for i in range(3000))).encode()
    text = data.decode()
    layout = read_layout(data, text, "|")
    assert (layout.framed, layout.quote, layout.rows) == ("", '"', 3000)
    assert next(records(text, layout)) == (0, ["id", "v"]) and list(records(text, layout))[1] == (1, ["0", " 0 "])


# -- D: the shape and SQL agree --------------------------------------------------------------------


def test_a_stray_quote_is_a_plain_character_for_the_shape_and_sql(off):
    ref = off.put("id\tnote\n" + "".join(f'{i}\t"{i} inch\n' for i in range(4000)), tool="export")
    assert ref.shape["rows"] == 4000 and ref.shape["quoting"] == "none"
    assert "4,000 rows × 2 columns (tab-separated, header row, quotes as plain text)" in ref.render()
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, max(note) FILTER (id = 7) AS seven FROM artifact") == [
        {"n": 4000, "seven": '"7 inch'}]


def test_well_formed_quotes_still_quote(off):
    ref = off.put("id,note\n" + "".join(f'{i},"a, b\n""c"""\n' for i in range(3000)), tool="export")
    assert ref.shape["rows"] == 3000 and "quoting" not in ref.shape
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, max(note) AS note FROM artifact") == [
        {"n": 3000, "note": 'a, b\n"c"'}]


def test_a_quote_beside_a_space_is_read_as_the_shape_reads_it(off):
    # DuckDB alone trims the space and reads 'x'; the shape (Python's csv) keeps ' "x"' as the value
    ref = off.put("id,v\n" + "".join(f'{i}, "x{i}"\n' for i in range(3000)), tool="export")
    assert ref.shape["rows"] == 3000
    assert sql(off, ref.artifact_id, "SELECT v FROM artifact WHERE id = 3") == [{"v": ' "x3"'}]


def test_null_counts_are_what_sql_reads_as_null(off):
    values = ["", "NA", "null", "  ", "1.5", "NaN"]
    ref = off.put("id,v\n" + "".join(f"{i},{values[i % 6]}\n" for i in range(3000)), tool="export")
    column = ref.shape["columns"]["v"]
    assert column["nulls"] == 500 and column["null_like"] == {"NA": 500, "null": 500}
    counts = sql(off, ref.artifact_id, "SELECT count(*) - count(v) AS nulls, count(*) FILTER (v = 'NA') AS na "
                                       "FROM artifact")
    assert counts == [{"nulls": 500, "na": 500}]
    assert re.search(r'v: string \(500 null, 500 text "(NA|null)", 500 text "(NA|null)"\)', ref.render())


def test_a_column_of_numbers_beside_null_like_text_is_the_text_sql_reads_and_says_how_to_cast(off):
    """MariaDB's batch output writes NULL as the text NULL: SQL reads such a column as VARCHAR, so its
    max() was the text 'NULL'. The shape said integer; it says string now, and the cast that reads it."""
    data = "id\tmaxlen\n" + "".join(f"{i}\t{'NULL' if i % 3 else i * 10}\n" for i in range(3000))
    ref = off.put(data, tool="mysql")
    column = ref.shape["columns"]["maxlen"]
    assert column == {"type": "string", "null_like": {"NULL": 2000}, "values": "integer"}
    assert sql(off, ref.artifact_id, "SELECT typeof(maxlen) AS t FROM artifact LIMIT 1") == [{"t": "VARCHAR"}]
    cast = re.search(r'TRY_CAST\("maxlen" AS BIGINT\)', ref.render())[0]
    assert sql(off, ref.artifact_id, f"SELECT max({cast}) AS m, count({cast}) AS n FROM artifact") == [
        {"m": 29_970, "n": 1_000}]


# -- E: advice the model can follow --------------------------------------------------------------


def test_a_json_document_without_a_main_array_is_not_offered_sql(off):
    """`npm ls --json` (an object of objects) was offered sql="SELECT … FROM artifact", which it refuses."""
    tree = off.put({"dependencies": {f"pkg{i}": {"version": "1.0.0"} for i in range(3000)}}, tool="npm")
    listed = off.put({"items": [{"id": i} for i in range(3000)]}, tool="api")
    assert "sql=" not in tree.render().split("Next: ")[1] and "jmespath=…" in tree.render().split("Next: ")[1]
    assert 'sql="SELECT … FROM artifact"' in listed.render().split("Next: ")[1]


def test_sql_on_a_json_object_advises_a_call_query_artifact_takes(off):
    aid = off.put({f"k{i}": {"v": i} for i in range(3000)}, tool="api").artifact_id
    out = dispatch(off, "query_artifact", {"artifact_id": aid, "sql": "SELECT 1"})
    assert out.is_error
    call = re.search(r"query_artifact\((.*?)\)\.", out.text)
    assert call, out.text
    arguments = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', call[1]))
    assert set(re.findall(r"(\w+)=", out.text)) <= set(QUERY_ARTIFACT_SCHEMA["properties"]), out.text
    assert arguments["artifact_id"] == aid
    assert not dispatch(off, "query_artifact", arguments).is_error


# each column's values, and the type SQL reads them as (DuckDB's sniffer over every row)
_TYPED_COLUMNS = {
    "codes": (["007", "5", "123"], "VARCHAR"), "signed": (["+5", "6"], "VARCHAR"), "negative_zeros": (["-007", "-5"], "BIGINT"),
    "blanks": ([" 5", "6 ", "\t7"], "BIGINT"), "ints": (["0", "10", "-3"], "BIGINT"), "hex": (["0x1F", "2"], "BIGINT"),
    "huge": (["99999999999999999999", "1"], "DOUBLE"), "floats": (["1.5", "-00.5", ".5", "5.", "1e5", "-1E5"], "DOUBLE"),
    "float_codes": (["05.5", "1.5"], "VARCHAR"), "float_blank": (["1.5 ", "2.5"], "VARCHAR"),
    "signed_float": (["+1.5", "2.5"], "VARCHAR"), "mixed_numbers": (["1", "1.5"], "DOUBLE"), "nan": (["NaN", "1.5"], "DOUBLE"),
    "inf": (["inf", "1.5"], "VARCHAR"), "bools": (["true", "False", "t", "F", "yes", "NO"], "BOOLEAN"),
    "not_bools": (["y", "n"], "VARCHAR"), "dates": (["2024-01-02", "2024-1-3"], "DATE"), "slashed": (["2024/01/02"], "DATE"),
    "date_and_time": (["2024-01-02", "2024-01-02 03:04"], "VARCHAR"),
    "datetimes": (["2024-01-02T03:04", "2024-01-02 03:04:05.123"], "TIMESTAMP"),
    "zoned": (["2024-01-02T03:04:05Z", "2024-01-02 03:04:05+02:00"], "TIMESTAMP WITH TIME ZONE"),
    "times": (["03:04:05", "23:59:59"], "TIME"), "digits_elsewhere": (["٣", "1"], "VARCHAR"),
}
_SHAPE_TYPES = {"VARCHAR": "string", "BIGINT": "integer", "DOUBLE": "float", "BOOLEAN": "bool", "DATE": "date",
                "TIMESTAMP": "datetime", "TIMESTAMP WITH TIME ZONE": "datetime", "TIME": "time"}


def test_a_csv_shape_names_the_type_sql_reads_each_column_as(off):
    # `007` was shown as an integer (SQL reads VARCHAR: sum() fails), dates beside datetimes as
    # datetimes (VARCHAR), yes/no as text (BOOLEAN)
    names = list(_TYPED_COLUMNS)
    rows = [",".join(values[i % len(values)] for values, _ in _TYPED_COLUMNS.values()) for i in range(3000)]
    ref = off.put(",".join(names) + "\n" + "\n".join(rows) + "\n", tool="export")
    assert ref.kind == "csv"
    read = off.query_artifact(ref.artifact_id, sql="SELECT " + ", ".join(f'typeof("{n}") AS "{n}"' for n in names)
                              + " FROM artifact LIMIT 1")["result"][0]
    assert read == {name: sql_type for name, (_, sql_type) in _TYPED_COLUMNS.items()}  # the table as built here
    shown = {name: column["type"] for name, column in ref.shape["columns"].items()}
    assert shown == {name: _SHAPE_TYPES[sql_type] for name, (_, sql_type) in _TYPED_COLUMNS.items()}


@pytest.mark.parametrize("values", [[10**40 + i for i in range(2000)], [1, 2**64 + 1, 2.5] * 700],
                         ids=["beyond-128-bits", "beyond-64-bits-mixed"])
def test_an_array_of_integers_beyond_64_bits_is_read_by_sql(off, values):
    """DuckDB's reader called such an array malformed ("Malformed JSON at byte 42"), though the reference
    offered sql=: its rows are read as objects of one key, `json`, and the integers as DOUBLE."""
    ref = off.process("api", values)
    got = sql(off, ref.artifact_id, "SELECT count(*) AS n, max(json) AS top, typeof(max(json)) AS t FROM artifact")
    assert got == [{"n": len(values), "top": float(max(values)), "t": "DOUBLE"}]


def test_a_csv_column_is_typed_by_every_row_as_sql_types_it(off):
    """The shape's types came from the first 2,000 rows: a column whose 3,001st value was `abc` was shown
    as integers, and `v > 100` failed in SQL (VARCHAR). Up to 1 MiB of table, every row counts."""
    csv = "id,v,w\n" + "".join(f"{i},{i if i < 3000 else 'abc'},{i * 0.5 if i != 4000 else 7}\n" for i in range(5000))
    ref = off.process("export", csv)
    assert ref.kind == "csv" and "sampled" not in ref.shape and "types from the first" not in ref.render()
    read = sql(off, ref.artifact_id, "SELECT typeof(id) AS id, typeof(v) AS v, typeof(w) AS w FROM artifact LIMIT 1")
    assert read == [{"id": "BIGINT", "v": "VARCHAR", "w": "DOUBLE"}]
    assert {name: column["type"] for name, column in ref.shape["columns"].items()} == {
        "id": "integer", "v": "string", "w": "float"}


def test_a_column_of_integers_and_floats_that_meets_text_is_typed_at_once():
    """The check of a block of values backtracked through every way of reading each as an integer or a
    float when one was text: 1.6 s for 40 values, exponential (a 3,000-row CSV never finished)."""
    import subprocess
    import sys

    script = ("from offload.content.table import describe_table\n"
              "rows = [f'{i},{i if i % 2 else i + 0.5}' for i in range(3000)] + ['3000,abc']\n"
              "text = 'id,v\\n' + '\\n'.join(rows) + '\\n'\n"
              "print(describe_table(text.encode(), text, ',')['columns']['v']['type'])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "string", done.stderr


def test_a_table_written_without_a_header_row_is_a_table_whose_first_line_is_a_row(off):
    """`sqlite3 -csv`, `psql -At` and `mysql -N` write no header: a number or a date where a name would
    be made such output text, with no column types and no SQL. Its first line is a row now, its columns
    column0, column1… in the shape and in SQL alike (DuckDB's own names for 12 columns are column00…)."""
    rows = [f"{i},name{i},{i * 1.5},{'abc'[i % 3]}" for i in range(3_000)]
    ref = off.put("\n".join(rows) + "\n", tool="sqlite3")
    assert ref.kind == "csv" and ref.shape["rows"] == 3_000 and ref.shape["header"] is False
    assert ref.shape["columns"] == {"column0": {"type": "integer"}, "column1": {"type": "string"},
                                    "column2": {"type": "float"}, "column3": {"type": "string"}}
    assert "no header row: its first line is a row" in ref.render() and ref.preview.startswith("0,name0,0.0,a\n")
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, min(column0) AS lo, max(column2) AS hi FROM artifact") == [
        {"n": 3_000, "lo": 0, "hi": 4_498.5}]
    wide = off.put("".join(",".join(str(i * (3 * j + 1)) for j in range(12)) + "\n" for i in range(1, 501)),
                   tool="psql")
    assert list(wide.shape["columns"]) == [f"column{j}" for j in range(12)]
    assert sql(off, wide.artifact_id, "SELECT sum(column11) AS s, count(*) AS n FROM artifact") == [
        {"s": 34 * 500 * 501 // 2, "n": 500}]
    piped = off.put("".join(f"{i}|user{i}|2024-01-{1 + i % 28:02d}\n" for i in range(3_000)), tool="psql")
    assert piped.shape["rows"] == 3_000 and piped.shape["columns"]["column2"]["type"] == "date"
    # a header stays a header; a log with a comma a line, text
    named = off.put("id,name\n" + "".join(f"{i},n{i}\n" for i in range(3_000)), tool="export")
    assert "header" not in named.shape and list(named.shape["columns"]) == ["id", "name"]
    log = off.put("".join(f"12:00:{i % 60:02d},848 INFO worker {i} started\n" for i in range(3_000)), tool="read")
    assert log.kind == "text"
    mixed = off.put("a,1,x\n" + "".join(f"{i},{i},y\n" for i in range(3_000)), tool="read")
    assert mixed.kind == "text"  # a name above numbers is no row, and a number is no name: as before
    # not rows: a header of years or positions, cells padded for people (`psql -t`), a log with one typed
    # column (its error lines are listed as a text's), a ragged record's extra column named as SQL names it
    def put(text: str):
        return off.put(text, tool="read")

    assert put("Country,2019,2020,2021\n" + "".join(f"c{i},{i},{2 * i},{3 * i}\n" for i in range(3_000))).kind == "text"
    assert put(",0,1,2\n" + "".join(f"{i},{i / 7},{i / 3},{i / 9}\n" for i in range(3_000))).kind == "text"
    assert put("".join(f" {i:>5} | user{i:<5} | {i * 1.5:>8} | 2024-01-01\n" for i in range(3_000))).kind == "text"
    assert put("".join(f"2026-12-08T01:26:{i % 60:02d}\tINFO\tjob {i}\n" for i in range(3_000))).kind == "text"
    ragged = put("".join(f"{i},{i * 1.5},x{i}" + (",extra" if i == 2_500 else "") + "\n" for i in range(3_000)))
    assert 'SQL reads the extra ones as "column3"' in ragged.render() and "first row's 3" in ragged.render()
    assert sql(off, ragged.artifact_id, "SELECT count(column3) AS n FROM artifact") == [{"n": 1}]
    # decimal commas between semicolons split at the commas make a table of one integer column: text
    decimal = off.put("".join(f"{i},5;{i + 3},7;abc\n" for i in range(3_000)), tool="read")
    assert decimal.kind == "text"


def test_the_next_calls_name_the_array_sql_reads_as_its_table(off):
    """A document of two arrays (`data.orders`, `data.refunds`): nothing said which one `artifact` is."""
    doc = {"meta": {"page": 1}, "data": {"orders": [{"id": i, "total": i * 2.5} for i in range(3_000)],
                                         "refunds": [{"id": i} for i in range(40)]}}
    ref = off.process("http_get", json.dumps(doc))
    assert 'sql="SELECT … FROM artifact" (the rows of data.orders)' in ref.render()
    assert sql(off, ref.artifact_id, "SELECT count(*) AS n, max(total) AS m FROM artifact") == [{"n": 3_000, "m": 7_497.5}]
    top = off.process("http_get", json.dumps(doc["data"]["orders"]))
    assert 'sql="SELECT … FROM artifact" |' in top.render()
