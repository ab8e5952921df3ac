"""Facts a reference states about content must be true: NUL-bearing text is text, the stored item count
is the count of the array the reference names, null counts and hint figures are exact, grep counts
per file hold for paths with colons, and a JSON preview names what it leaves out."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sysconfig
from collections import Counter
from pathlib import Path

import jmespath
import orjson
import pytest
from counting import o200k
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offload import InvalidArgument, Offloader
from offload.content import build_preview, detect, parse_json, render_shape, table
from offload.content.shape import find_main
from offload.store.chunking import json_item_index

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _stdlib_lines(limit: int) -> list[str]:
    """Real source lines, as a log quotes them."""
    lines = []
    for path in sorted(STDLIB.glob("*.py")):
        for line in path.read_text("utf-8", "replace").splitlines():
            if line.strip():
                lines.append(line.strip())
                if len(lines) == limit:
                    return lines
    return lines


def _records(limit: int = 1500) -> list[dict]:
    """One record per standard-library module."""
    return [{"id": i, "path": str(path.relative_to(STDLIB)), "bytes": path.stat().st_size,
             "kind": "test" if "test" in path.parts else "module"}
            for i, path in enumerate(sorted(STDLIB.glob("**/*.py"))[:limit])]


# -- A: NUL bytes in text --------------------------------------------------------------------------


def test_a_log_with_one_nul_byte_is_text_and_its_last_error_reaches_the_preview():
    lines = [f"2024-01-01 12:00:{i % 60:02d} INFO {text}" for i, text in enumerate(_stdlib_lines(40_000))]
    data = ("2024-01-01 boot\x00\n" + "\n".join(lines) + "\nERROR: disk failure on /dev/sda\n").encode()
    found = detect(data, "read")
    assert found.kind == "text"
    assert any("1 NUL byte" in note for note in found.notes)
    preview = build_preview(found, data, 800, o200k)
    assert "ERROR: disk failure on /dev/sda" in preview.text
    assert "2024-01-01 boot\u2400" in preview.text and "\x00" not in preview.text


def test_find_print0_output_is_shown_one_entry_per_line_with_exact_counts():
    data = subprocess.run(["find", str(STDLIB), "-maxdepth", "2", "-name", "*.py", "-print0"], capture_output=True,
                          check=True).stdout
    names = data.split(b"\x00")[:-1]
    assert len(names) > 300 and b"\n" not in data
    found = detect(data, "find")
    assert found.kind == "text"
    assert any(f"NUL-separated (as `find -print0` writes): {len(names):,} entries" in note for note in found.notes)
    preview = build_preview(found, data, 600, o200k)
    shown = preview.text.splitlines()
    assert shown[0] == names[0].decode()
    marker = re.search(r"\[([\d,]+) entries omitted: ([\d,]+)–([\d,]+)\]", preview.text)
    first, last = int(marker[2].replace(",", "")), int(marker[3].replace(",", ""))
    assert shown[first - 1] == names[first - 1].decode() and shown[-1] == names[-1].decode()
    assert int(marker[1].replace(",", "")) == last - first + 1 == len(names) - (len(shown) - 1)
    assert preview.extra["nul_separated_entries"] == len(names)


@pytest.mark.parametrize("make", [
    lambda: next(STDLIB.glob("lib-dynload/*.so")).read_bytes(),
    lambda: os.urandom(200_000),
    lambda: "\n".join(_stdlib_lines(2000)).encode("utf-16-le"),  # no byte order mark
    lambda: next(STDLIB.glob("**/__pycache__/*.pyc")).read_bytes(),
], ids=["elf", "random", "utf16-without-bom", "pyc"])
def test_real_binary_stays_binary(make):
    assert detect(make()).kind == "binary"


# -- B: the stored item count is the reference's -----------------------------------------------------


def test_the_stored_item_index_is_the_array_the_reference_names(sqlite_url):
    off = Offloader(sqlite_url)
    records = _records()
    doc = {"meta": {"page": 1}, "tags": ["x", "y", "z"], "data": {"results": records}}
    ref = off.process("api", doc)
    assert (ref.items, ref.items_path) == (len(records), "data.results")
    assert off.get(ref.artifact_id)["items"] == len(records)  # what show, ls --json and the API report
    page = off.fetch_slice(ref.artifact_id, unit="items", limit=2)
    assert page["total"] == len(records)
    assert json.loads(page["content"]) == records[:2]

    with_bom = b"\xef\xbb\xbf" + orjson.dumps(records)
    ref = off.process("api", with_bom)
    assert ref.items == off.get(ref.artifact_id)["items"] == len(records)


_KEYS = st.sampled_from(["a", "b", "id", "d e", "x.y", "é", 'q"t', "[", "items"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(alphabet='ab,[]{}"\\: ', max_size=5))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                         st.dictionaries(_KEYS, inner, max_size=5)), max_leaves=60)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=st.dictionaries(_KEYS, _VALUES, max_size=6), indent=st.booleans())
def test_the_item_index_follows_find_main_on_any_document(doc, indent):
    data = json.dumps(doc, indent=1 if indent else None).encode()
    main = find_main(parse_json(data))
    index = json_item_index(data)
    if not isinstance(main.value, list):
        assert index is None
        return
    assert index is not None and index.path == main.path
    assert [json.loads(data[start:end]) for start, end in zip(index.starts, index.ends)] == main.value


class _Pairs(list):
    """An object written from its (key, value) pairs, so that a key may repeat."""


def _write(value) -> str:
    if isinstance(value, _Pairs):
        return "{" + ", ".join(f"{json.dumps(key)}: {_write(item)}" for key, item in value) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_write, value)) + "]"
    return json.dumps(value)


_WITH_REPEATS = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), inner), max_size=5).map(_Pairs)),
    max_leaves=40)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(pairs=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), _WITH_REPEATS), min_size=1, max_size=5))
def test_an_item_index_with_repeated_keys_is_the_parsed_main_array_or_none(pairs):
    data = _write(_Pairs(pairs)).encode()
    index = json_item_index(data)
    if index is not None:
        main = find_main(parse_json(data))
        assert index.path == main.path
        assert [json.loads(data[start:end]) for start, end in zip(index.starts, index.ends)] == main.value


def test_no_item_index_when_a_key_repeats():
    # the parsed document keeps the last "x" (an array of 2) at the first one's place: it, not "y", is main
    data = b'{"x": {"a": 1}, "y": [1, 2], "x": [1, 2]}'
    assert find_main(parse_json(data)).path == "x"
    assert json_item_index(data) is None


def test_a_key_repeated_in_escaped_form_is_a_repeat_and_item_pages_follow_the_parsed_document(sqlite_url):
    """"\\u0075sers" is "users": the parsed document keeps the 50-key map, so no index of the 3,000-item
    array; item pages without an index page the main array find_main names, or say there is none."""
    stale = json.dumps([{"id": i, "stale": True} for i in range(3000)])
    fresh = json.dumps({f"user{i}": {"id": i} for i in range(50)})
    data = ('{"users": ' + stale + ', "\\u0075sers": ' + fresh + '}').encode()
    assert isinstance(parse_json(data)["users"], dict) and json_item_index(data) is None
    off = Offloader(sqlite_url)
    ref = off.put(data, tool="api")
    with pytest.raises(InvalidArgument, match="no main array to page"):
        off.fetch_slice(ref.artifact_id, unit="items")
    rows = json.dumps({"meta": {"n": 1}, "meta2": 1, "data": {"rows": [{"k": i} for i in range(500)]}, "data": {
        "rows": [{"k": -i} for i in range(700)]}}).encode()  # json.dumps keeps only the last "data"
    twice = rows.replace(b'"meta2": 1', b'"data": {"rows": [1, 2, 3]}, "meta2": 1')
    ref = off.put(twice, tool="api")
    assert json_item_index(twice) is None and ref.items == 700
    page = off.fetch_slice(ref.artifact_id, unit="items", offset=-1)
    assert (page["total"], json.loads(page["content"])) == (700, [{"k": -699}])
    off.close()


def test_a_nested_main_array_across_index_blocks():
    records = _records()
    results = []
    while len(results) < 250_000:  # past one 16 MB block of the structure pass
        results.extend({**record, "id": len(results) + i} for i, record in enumerate(records))
    data = orjson.dumps({"meta": {"page": 1}, "tags": ["x"], "data": {"results": results}})
    assert len(data) > 17 << 20
    index = json_item_index(data)
    assert (index.path, len(index)) == ("data.results", len(results))
    for i in (0, len(results) // 2, len(results) - 1):
        assert orjson.loads(data[index.starts[i]:index.ends[i]]) == results[i]


# -- C: CSV null counts --------------------------------------------------------------------------------


def _csv_with_nulls(rows: int) -> tuple[bytes, Counter]:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["path", "comment", "ratio"])
    paths = [p.name for p in sorted(STDLIB.glob("*.py"))]
    truth: Counter = Counter()
    for i in range(rows):
        comment = "" if i % 3 else "reviewed"
        ratio = "NA" if i % 10 == 0 else f"{i / 7:.3f}"
        truth["comment"] += comment == ""
        truth["ratio"] += ratio == "NA"
        writer.writerow([paths[i % len(paths)], comment, ratio])
    return out.getvalue().encode(), truth


def test_csv_null_counts_are_over_every_row():
    data, truth = _csv_with_nulls(20_000)
    assert len(data) <= table.EXACT_NULLS_CHARS
    found = detect(data)
    preview = build_preview(found, data, 600, o200k)
    columns = preview.shape["columns"]
    # "NA" is text to SQL (only an empty field is NULL): counted apart, by its spelling
    assert (columns["comment"]["nulls"], columns["ratio"]["null_like"]) == (truth["comment"], {"NA": truth["ratio"]})
    assert "nulls" not in columns["ratio"]
    shape = render_shape(preview.shape)
    assert f"comment: string ({truth['comment']:,} null)" in shape
    # SQL reads the column as text, as the shape says, and how to read its numbers
    assert f'ratio: string ({truth["ratio"]:,} text "NA"; the rest float: TRY_CAST("ratio" AS DOUBLE)' in shape
    assert columns["ratio"]["type"] == "string" and columns["ratio"]["values"] == "float"


def test_csv_null_counts_of_a_big_table_say_they_are_from_the_sample(monkeypatch):
    data, _ = _csv_with_nulls(30_000)
    monkeypatch.setattr(table, "EXACT_NULLS_CHARS", 100_000)
    preview = build_preview(detect(data), data, 600, o200k)
    shape = render_shape(preview.shape)
    assert "types from the first 2,000 rows" in shape
    assert re.search(r"comment: string \([\d,]+ null in sample\)", shape), shape


# -- D: every figure beside a hint is what jmespath returns -------------------------------------------


def _documents() -> dict[str, object]:
    records = _records(5000)
    return {
        "nulls": [None if i % 4 == 0 else record for i, record in enumerate(records)],
        "lists": [[record, {**record, "id": -record["id"]}] if i % 10 == 0 else record
                  for i, record in enumerate(records)],
        "mixed": {"data": {"items": [record if i % 7 else (None if i % 2 else [record, None, record])
                                     for i, record in enumerate(records)]}},
        "small": [None if i % 3 == 0 else record for i, record in enumerate(records[:60])],
    }


@pytest.mark.parametrize("name", list(_documents()))
def test_every_hint_figure_is_what_jmespath_returns(name):
    doc = _documents()[name]
    data = orjson.dumps(doc)
    preview = build_preview(detect(data), data, 800, o200k)
    figures = preview.extra["hint_results"]
    assert figures, preview.hints
    for hint, figure in figures.items():
        result = jmespath.search(hint, doc)
        expected = f"{len(result):,} item{'' if len(result) == 1 else 's'}" if isinstance(result, list) else f"{result:,}"
        assert figure == expected, hint


# -- E: grep counts per file, with colons in the paths ------------------------------------------------


def _grep(root: Path, pattern: str) -> bytes:
    done = subprocess.run(["grep", "-rn", pattern, "."], cwd=root, capture_output=True, check=True)
    return done.stdout


def test_grep_counts_files_whose_names_hold_colons(tmp_path):
    lines = _stdlib_lines(3000)
    for minute in range(30):
        path = tmp_path / "logs" / f"2024-01-01T12:{minute:02d}:00.log"
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n".join(f"ERROR refused {line}" if n % 3 == 0 else line
                                  for n, line in enumerate(lines[minute * 100:minute * 100 + 100])) + "\n")
    data = _grep(tmp_path, "ERROR")
    truth = Counter(line.split(b".log:")[0] + b".log" for line in data.splitlines())
    assert len(truth) == 30
    preview = build_preview(detect(data, "grep"), data, 600, o200k)
    assert preview.extra["files"] == 30 and preview.extra["matches"] == sum(truth.values())
    assert preview.extra["matches_per_file"] == {path.decode(): n for path, n in truth.most_common(20)}


def test_grep_counts_stay_right_when_the_text_holds_colon_numbers(tmp_path):
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("".join(f"value = data[1:{n}:2]\nother = {n}\n" for n in range(200)))
    data = _grep(tmp_path, "data")
    preview = build_preview(detect(data, "grep"), data, 600, o200k)
    assert preview.extra["matches_per_file"] == {"./a.py": 200, "./b.py": 200}


@pytest.mark.parametrize("files_take_turns", [False, True])
def test_grep_without_line_numbers_of_timestamped_lines_counts_its_real_files(tmp_path, files_take_turns):
    """`grep -r ERROR logs` of timestamped lines: the time's `:30:` was read as a line number, and the
    date and hour as part of the path (216 files where there were 3); `host:8080:` the same."""
    names = ["app", "worker", "old/app.1"]
    for name in names:
        path = tmp_path / "logs" / f"{name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"2024-05-01 {i % 24:02d}:{i % 60:02d}:00 ERROR job {i} host:8080: refused\n"
                                for i in range(1000)))
    data = subprocess.run(["grep", "-r", "ERROR", "logs"], cwd=tmp_path, capture_output=True, check=True).stdout
    if files_take_turns:  # as output merged by time is
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[k * 1000 + i] for i in range(1000) for k in range(3))
    preview = build_preview(detect(data, "grep"), data, 600, o200k)
    assert preview.extra["matches_per_file"] == {f"logs/{name}.log": 1000 for name in names}
    assert "3,000 matching lines in 3 files" in preview.text


def test_grep_count_output_is_counted_by_its_counts(tmp_path):
    """`grep -c` writes `path:count`: read as match lines, it was one match in each of 3,000 files."""
    for i in range(300):
        (tmp_path / f"m{i}.py").write_text("x = 1\n" * ((i * 7) % 13) + "y = 2\n")
    data = subprocess.run(["grep", "-rc", "x = 1", "."], cwd=tmp_path, capture_output=True, check=True).stdout
    truth = {f"./m{i}.py": (i * 7) % 13 for i in range(300) if (i * 7) % 13}
    preview = build_preview(detect(data, "grep"), data, 600, o200k)
    assert preview.extra["matches"] == sum(truth.values()) and preview.extra["files"] == len(truth)
    assert f"{sum(truth.values()):,} matching lines in {len(truth):,} files" in preview.text


def test_git_grep_of_a_revision_is_grep_with_its_counts_per_file(tmp_path):
    """`git grep -n X REV` writes "REV:path:line:text": it was taken for text, previewed without counts."""
    for name in ("a.py", "src/b.py", "src/c.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("".join(f"ERROR {n}\nok {n}\n" for n in range(40 * len(name))))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    for context in ([], ["-C", "1"]):
        data = subprocess.run([*git, "grep", "-n", *context, "ERROR", "HEAD"], capture_output=True, check=True).stdout
        assert data.startswith(b"HEAD:a.py:1:ERROR 0\n")
        for tool in (None, "git_grep", "bash"):
            found = detect(data, tool)
            assert found.kind == "grep", (context, tool)
        preview = build_preview(detect(data), data, 600, o200k)
        assert preview.extra["matches_per_file"] == {"HEAD:src/b.py": 320, "HEAD:src/c.py": 320, "HEAD:a.py": 160}


# -- F: what a JSON preview leaves out, and that it shows an item --------------------------------------


def test_omitted_keys_of_a_top_level_object_are_named_so():
    doc = {record["path"]: record for record in _records()}
    data = orjson.dumps(doc)
    preview = build_preview(detect(data), data, 300, o200k)
    assert "of the top-level object" in preview.omitted and "array" not in preview.omitted


def test_the_first_item_is_shown_before_the_keys_around_the_main_array():
    records = _records()
    doc = {"meta": {"page": 1, "per_page": len(records), "generated": "2024-01-01T00:00:00Z", "root": str(STDLIB)},
           "links": {"next": "https://api.example.com/modules?page=2", "prev": None},
           "data": {"modules": records}}
    data = orjson.dumps(doc)
    for budget in (80, 100, 120):
        preview = build_preview(detect(data), data, budget, o200k)
        assert o200k(preview.text) <= budget
        assert '{"id": 0, "path": "__future__.py"' in preview.text, (budget, preview.text)
        assert re.search(r"^items [12]–1,499 of data\.modules", preview.omitted), preview.omitted
