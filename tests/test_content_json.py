"""JSON and NDJSON previews on a real multi-MB document built from the standard library: budgets,
balanced structure, exact counts, bounded shapes, and hints that jmespath runs on the document."""

from __future__ import annotations

import json
import re
import sysconfig
import time
from collections import Counter
from pathlib import Path

import jmespath
import orjson
import pytest

from offload.content import build_preview, detect, render_shape
from offload.content.shape import describe_json, find_main

from counting import BUDGETS, COUNTERS, crude, o200k  # noqa: E402,F401
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _file_records() -> list[dict]:
    """One realistic record per standard-library module: sizes, kind, functions, docstring line."""
    records = []
    for path in sorted(STDLIB.glob("**/*.py"))[:1500]:
        text = path.read_text("utf-8", "replace")
        doc = re.search(r'^\s*(?:"""|\'\'\')\s*(.+)', text)
        name = path.name
        kind = ("test" if "test" in path.parts or name.startswith("test_") else
                "package" if name == "__init__.py" else "private" if name.startswith("_") else "module")
        records.append({
            "path": str(path.relative_to(STDLIB)),
            "kind": kind,
            "bytes": path.stat().st_size,
            "lines": text.count("\n"),
            "defs": re.findall(r"^def (\w+)", text, re.M)[:12],
            "doc": doc.group(1).strip() if doc else None,
            "content-type": "text/x-python" if text.isascii() else "text/x-python; charset=utf-8",
        })
    return records


@pytest.fixture(scope="module")
def stdlib_records() -> list[dict]:
    return _file_records()


@pytest.fixture(scope="module")
def big_document(stdlib_records) -> tuple[bytes, dict]:
    """About 4 MB: the records repeated with distinct ids under data.files, beside small siblings."""
    files = []
    while len(orjson.dumps(files)) < 4_000_000:
        for record in stdlib_records:
            files.append({"id": len(files), **record})
    doc = {"data": {"files": files, "next_cursor": None}, "meta": {"root": str(STDLIB), "count": len(files)}}
    return orjson.dumps(doc), doc


def _balanced(text: str) -> bool:
    """Brackets outside strings never go negative and close at the end."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0 and not in_string


@pytest.mark.parametrize("count", COUNTERS)
def test_big_json_preview_is_within_budget_balanced_and_exact(big_document, count):
    data, doc = big_document
    files = doc["data"]["files"]
    found = detect(data)
    assert found.kind == "json"
    for budget in BUDGETS:
        preview = build_preview(found, data, budget, count)
        assert count(preview.text) <= budget
        assert {key: preview.extra[key] for key in ("items", "items_path", "top_level_keys")} == \
            {"items": len(files), "items_path": "data.files", "top_level_keys": 2}
        assert preview.truncated
        if budget < 300:
            continue
        assert _balanced(preview.text), preview.text
        marker = re.search(r"… \[([\d,]+) items? omitted: data\.files\[(\d+):(\d+)\]\] …", preview.text)
        n, first, end = (int(group.replace(",", "")) for group in marker.groups())
        assert n == end - first and end in (len(files) - 1, len(files))  # the last item, when it fits
        assert preview.omitted.startswith(f"items {first:,}–{end - 1:,} of data.files ({n:,} of {len(files):,} items)")
        item_lines = [line.strip().rstrip(",") for line in preview.text.split("\n")
                      if line.startswith("      {")]
        shown = list(range(first)) + list(range(end, len(files)))
        assert len(item_lines) == len(shown)
        for index, line in zip(shown, item_lines):
            if "…" not in line:
                assert orjson.loads(line) == files[index]
            else:
                assert f'"id": {index},' in line


def test_big_json_shape_counts_are_exact_and_render(big_document):
    data, doc = big_document
    files = doc["data"]["files"]
    preview = build_preview(detect(data), data, 800, o200k)
    node = preview.shape["keys"]["data"]["keys"]["files"]
    assert node["length"] == len(files) and node["sampled"] == 2000
    kinds = node["items"]["keys"]["kind"]
    assert kinds["values"] == dict(Counter(record["kind"] for record in files).most_common())
    assert "values_from" not in kinds  # recounted over every item, not the sample
    assert node["items"]["keys"]["id"]["min"] == 0 and node["items"]["keys"]["id"]["max"] == len(files) - 1
    assert node["items"]["keys"]["doc"]["type"] in ("string|null", "null|string")
    json.dumps(preview.shape)  # JSON-serializable
    rendered = render_shape(preview.shape)
    assert f"data.files: array[{len(files):,}] of objects (8 keys, sampled 2,000):" in rendered
    assert f'"module"({kinds["values"]["module"]:,})' in rendered
    assert '"content-type": ' in rendered


def test_big_json_hints_run_on_the_document_and_find_something(big_document):
    data, doc = big_document
    files = doc["data"]["files"]
    preview = build_preview(detect(data), data, 800, o200k)
    assert 2 <= len(preview.hints) <= 4
    assert preview.hints[0] == "length(data.files)"
    rarest = min(Counter(record["kind"] for record in files).items(), key=lambda pair: pair[1])
    filters = [hint for hint in preview.hints if "[?" in hint]
    assert filters == [f"data.files[?kind=='{rarest[0]}']"]
    for hint in preview.hints:
        result = jmespath.search(hint, doc)
        assert result not in (None, [], {}, ""), hint
    assert len(jmespath.search(filters[0], doc)) == rarest[1]
    assert jmespath.search("length(data.files)", doc) == len(files)
    results = preview.extra["hint_results"]  # exact summaries, shown next to each hint
    assert results["length(data.files)"] == f"{len(files):,}"
    assert results[filters[0]] == f"{rarest[1]:,} items"


def test_hint_results_on_a_big_array_are_exact_or_absent():
    rows = [{"id": i, "state": "failed" if i % 97 == 0 else "done", "worker": f"w{i % 13}"} for i in range(60_000)]
    doc = {"jobs": rows}
    data = orjson.dumps(doc)
    preview = build_preview(detect(data), data, 500, o200k)
    assert preview.hints[:2] == ["length(jobs)", "jobs[?state=='failed']"]
    assert len(preview.extra["hint_results"]) == len(preview.hints)
    for hint, summary in preview.extra["hint_results"].items():
        result = jmespath.search(hint, doc)
        assert summary == (f"{len(result):,} items" if isinstance(result, list) else f"{result:,}")


def test_the_main_array_of_numbers_or_strings_has_exact_figures():
    # the extremes and the rare value lie past the 2,000 items the shape looks at
    numbers = [i % 1000 for i in range(50_000)] + [-7, 10**6] + [3] * 1000
    levels = ["info"] * 40_000 + ["warn"] * 9_000 + ["fatal"]
    for doc, rendered in (({"samples": numbers}, "samples: array[51,002] of integer -7–1,000,000 (sampled 2,000)"),
                          ({"levels": levels}, '"info"(40,000)|"warn"(9,000)|"fatal"(1)')):
        data = orjson.dumps(doc)
        shape = build_preview(detect(data), data, 500, o200k).shape
        assert rendered in render_shape(shape), render_shape(shape)
        assert "in sample" not in render_shape(shape)


def test_a_document_that_gives_a_key_twice_is_not_shown_as_complete():
    """A parser keeps the last value of a key given twice: {"items": [5,000 items], "items": []} parsed to
    {"items": []}, shown "complete" as if the result were empty."""
    data = ('{"items": [' + ",".join('{"id": %d}' % i for i in range(5000)) + '], "items": []}').encode()
    preview = build_preview(detect(data), data, 800, o200k)
    assert preview.truncated and 'the earlier values of "items"' in preview.omitted
    small = b'{"a": 1,' + b" " * 20_000 + b'"a": 2}'  # too big to show as it is, its parse small
    preview = build_preview(detect(small), small, 300, o200k)
    assert preview.truncated and 'the earlier values of "a"' in preview.omitted
    pretty = json.dumps({"rows": [{"id": i, "tags": ["x"]} for i in range(40)]}, indent=8).encode()
    preview = build_preview(detect(pretty), pretty, 1500, o200k)  # whitespace: complete, as before
    assert not preview.truncated and preview.omitted == "" and o200k(preview.text) <= 1500


def test_hints_never_quote_a_control_character():
    # `[?status=='a\x00b']` reached the model with a raw NUL in it
    for odd in ("a\x00b", "a\tb", "a\rb"):
        doc = [{"id": i, "status": odd if i % 50 == 0 else "ok"} for i in range(3000)]
        data = json.dumps(doc).encode()
        preview = build_preview(detect(data), data, 800, o200k)
        assert preview.hints and not any(not hint.isprintable() for hint in preview.hints), preview.hints


def test_quoted_field_names_in_hints():
    rows = [{"content-type": "text/html" if i % 9 else "application/pdf", "http status": 200 + i % 3,
             "id": i} for i in range(5000)]
    doc = {"responses": rows}
    data = orjson.dumps(doc)
    preview = build_preview(detect(data), data, 300, o200k)
    assert "responses[?\"content-type\"=='application/pdf']" in preview.hints
    projection = next(hint for hint in preview.hints if ".{" in hint)
    assert '"http status": "http status"' in projection or '"content-type": "content-type"' in projection
    for hint in preview.hints:
        assert jmespath.search(hint, doc)


def test_top_level_array_keeps_valid_json_once_marker_lines_are_removed():
    rows = [{"id": i, "ok": i % 5 != 0, "tag": f"t{i % 4}"} for i in range(100_000)]
    data = orjson.dumps(rows)
    preview = build_preview(detect(data), data, 800, o200k)
    assert o200k(preview.text) <= 800
    kept = "\n".join(line for line in preview.text.split("\n") if not line.strip().startswith("… ["))
    parsed = orjson.loads(kept)
    assert parsed[:-1] == rows[: len(parsed) - 1] and parsed[-1] == rows[-1]
    assert re.search(r"… \[[\d,]+ items omitted: \[\d+:99999\]\] …", preview.text)
    assert preview.hints[:2] == ["length(@)", "[?tag=='t0']"] or "length(@)" in preview.hints


def test_long_string_values_are_shortened_inside_their_quotes():
    bodies = [("lorem ipsum dolor " * 600)[: 5000 + i] for i in range(300)]
    rows = [{"id": i, "body": body} for i, body in enumerate(bodies)]
    data = orjson.dumps({"pages": rows})
    preview = build_preview(detect(data), data, 800, o200k)
    lines = [line.strip().rstrip(",") for line in preview.text.split("\n") if line.strip().startswith('{"id"')]
    assert lines
    for line in lines:
        row = orjson.loads(line)  # still valid JSON: the marker sits inside the string
        kept, hidden = re.fullmatch(r"(.*)…\[\+([\d,]+) chars\]", row["body"], re.S).groups()
        original = bodies[row["id"]]
        assert original.startswith(kept) and len(kept) + int(hidden.replace(",", "")) == len(original)
    assert "long strings shortened" in preview.omitted


def test_a_big_map_is_the_main_collection():
    packages = {f"node_modules/pkg-{i}": {"version": f"1.{i % 10}.0", "dev": i % 3 == 0} for i in range(6000)}
    doc = {"name": "app", "lockfileVersion": 3, "packages": packages}
    data = orjson.dumps(doc)
    preview = build_preview(detect(data), data, 500, o200k)
    assert preview.extra["keys"] == 6000 and preview.extra["keys_path"] == "packages"
    assert "length(keys(packages))" in preview.hints
    assert jmespath.search("length(keys(packages))", doc) == 6000
    assert re.search(r"… \[[\d,]+ keys omitted: entries \d+–5,998 of packages\] …", preview.text)
    assert _balanced(preview.text) and o200k(preview.text) <= 500


def test_a_small_document_is_shown_whole():
    data = b'{"ok": true, "items": [1, 2, 3]}'
    preview = build_preview(detect(data), data, 300, o200k)
    assert preview.text == data.decode() and not preview.truncated and preview.omitted == ""
    assert preview.extra["items"] == 3


@pytest.mark.parametrize("count", COUNTERS)
def test_ndjson_rows(stdlib_records, count):
    rows = [{"row": i, **record} for i, record in enumerate(stdlib_records * 3)]
    data = b"\n".join(orjson.dumps(row) for row in rows) + b"\n"
    found = detect(data)
    assert found.kind == "ndjson" and len(found.doc) == len(rows)
    for budget in BUDGETS:
        preview = build_preview(found, data, budget, count)
        assert count(preview.text) <= budget
        assert preview.extra["rows"] == len(rows)
        if budget >= 300:
            shown = [line for line in preview.text.split("\n") if not line.startswith("… [")]
            marker = re.search(r"… \[([\d,]+) rows? omitted: lines ([\d,]+)–([\d,]+)\] …", preview.text)
            first, last = (int(group.replace(",", "")) for group in marker.groups()[1:])
            for index, line in zip(list(range(first)) + list(range(last + 1, len(rows))), shown):
                assert f'"row": {index},' in line
    assert preview.hints[0] == "length(@)"
    for hint in preview.hints:
        assert jmespath.search(hint, found.doc), hint
    kinds = Counter(row["kind"] for row in rows)
    assert preview.shape["items"]["keys"]["kind"]["values"] == dict(kinds.most_common())


def test_shapes_stay_bounded():
    wide = {f"field_{i}": {"nested": [{"k": j} for j in range(50)]} for i in range(300)}
    deep: dict = {"leaf": 1}
    for level in range(40):
        deep = {f"level{level}": deep, "sibling": level}
    doc = {"wide": [wide] * 3, "deep": deep}
    shape = describe_json(doc, find_main(doc))
    assert len(json.dumps(shape)) < 40_000
    assert shape["keys"]["wide"]["items"]["more_keys"] == 300 - 25
    node, depth = shape["keys"]["deep"], 1
    while "keys" in node and node["keys"]:
        node, depth = next(iter(node["keys"].values())), depth + 1
    assert depth <= 8
    assert len(render_shape(shape).split("\n")) <= 40


@pytest.mark.slow
def test_50_mb_json_is_dominated_by_the_parse():
    rows = [{"id": i, "name": f"item-{i}", "status": "error" if i % 29 == 0 else "ok", "price": i % 1000 / 10,
             "owner": {"login": f"user{i % 500}", "type": "User"}, "tags": ["a", "b"]} for i in range(357_728)]
    data = orjson.dumps({"data": {"items": rows}})
    del rows
    started = time.perf_counter()
    orjson.loads(data)
    parse = time.perf_counter() - started
    started = time.perf_counter()
    found = detect(data)
    preview = build_preview(found, data, 2000, o200k)
    total = time.perf_counter() - started
    assert preview.extra["items"] == 357_728
    assert total < 3 * parse + 0.5, (parse, total)


# -- writing JSON: jsontext.dumps past every recursive encoder --------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from offload.jsontext import _dumps_deep, _finite, dumps  # noqa: E402

_keys = st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none(),
                  st.floats(allow_nan=True, allow_infinity=True))
_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(_values, st.booleans(), st.sampled_from([None, 2]), st.booleans())
def test_the_deep_writer_writes_what_the_standard_library_writes(value, sort_keys, indent, ensure_ascii):
    """Where json.dumps works, the loop over a stack that takes over beyond its depth writes the same text."""
    try:
        expected = json.dumps(_finite(value), default=str, sort_keys=sort_keys, indent=indent, ensure_ascii=ensure_ascii)
    except TypeError:  # sorting keys of mixed types: the deep writer sorts them by their text instead
        return
    assert _dumps_deep(value, sort_keys=sort_keys, indent=indent, ensure_ascii=ensure_ascii,
                       non_str_keys=False) == expected


def test_dumps_writes_any_depth_and_refuses_only_a_cycle():
    deep: object = 0
    for _ in range(50_000):
        deep = {"next": deep}
    text = dumps(deep)
    assert text.startswith(b'{"next": {"next": ') and text.count(b"{") == 50_000
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps({"a": [[loop]]})
    with pytest.raises(TypeError, match="not tuple"):
        dumps({(1, 2): _nest_list(300)})
    assert dumps({(1, 2): _nest_list(300)}, non_str_keys=True).startswith(b'{"(1, 2)": [[[')


def _nest_list(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_wide_array_of_objects_keeps_a_compact_shape_naming_every_key(sqlite_url, real_count):
    """An issue list's shape (14 keys, nested users, labels, milestones: ~330 tokens) gave way whole at the
    default budget, and with the preview showing 5 keys of each item no reference named `labels` or
    `milestone`. Its compact form names every key, with the values of the few-valued ones."""
    import random

    from offload import Offloader

    rng = random.Random(3)
    labels = [{"id": 1000 + i, "name": name, "color": "d73a4a"} for i, name in enumerate(["bug", "docs", "question"])]
    users = [{"login": f"user{i}", "id": 5000 + i, "type": "User", "site_admin": i == 0,
              "avatar_url": f"https://avatars.example/u/{5000 + i}"} for i in range(300)]
    issues = [{"id": 900_000 + n, "number": n, "title": f"Issue {n}: " + rng.choice(["crash on start", "slow query"]),
               "state": rng.choice(["open", "closed"]), "locked": False, "user": rng.choice(users),
               "labels": rng.sample(labels, rng.choice([0, 1, 2])), "assignees": rng.sample(users, rng.choice([0, 1])),
               "milestone": None if n % 3 else {"id": 77, "title": "v2.0", "state": "open"},
               "comments": rng.randint(0, 40), "created_at": f"2023-{1 + n % 12:02d}-{1 + n % 28:02d}T10:00:00Z",
               "closed_at": None, "body": "Steps to reproduce:\n1. run it\n2. see error\n" * rng.randint(1, 3),
               "reactions": {"+1": rng.randint(0, 9), "-1": 0, "heart": rng.randint(0, 3)}}
              for n in range(1, 1001)]
    with Offloader(sqlite_url) as off:
        ref = off.process("http_get", json.dumps(issues, indent=2))
        text = ref.render()
        assert real_count(text) <= 800
        shape = text.split("Shape:\n", 1)[1].split("\nPreview", 1)[0]
        assert all(f"{key}: " in shape for key in issues[0]), shape
        assert 'state: "' in shape and "labels: array[0–2]" in shape and "user: {…5 keys}" in shape
        assert '"id": 900001' in ref.preview  # and an item beside it
    full = render_shape(describe_json(issues))
    assert len(render_shape(describe_json(issues), compact=True)) < len(full) / 2


def test_collapsed_and_cut_containers_say_one_item_or_key_in_the_singular():
    from offload.content.jsonview import Cuts, Limits, compact

    shown = compact({"a": [[1]], "b": {"c": {"d": 1}}, "e": [1, 2], "f": 1}, Limits(20, 3, 1, 0), Cuts())
    assert shown == '{"a": […[1 item]], "b": {…[1 key]}, "e": […[2 items]], …[+1 key]}'
