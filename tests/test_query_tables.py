"""SQL reads a tabular artifact as its reference describes it, with the delimiter detection found; and what
it cannot read, it says how to query instead, with arguments it takes."""

from __future__ import annotations

import re

import pytest

from offload import Offloader
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


# -- E: advice the model can follow --------------------------------------------------------------


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
