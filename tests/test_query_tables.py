"""SQL over tabular artifacts: what it cannot read, it says how to query instead, with arguments it takes."""

from __future__ import annotations

import re

import pytest

from offload import Offloader
from offload.tools.schemas import QUERY_ARTIFACT_SCHEMA, dispatch


@pytest.fixture
def off(sqlite_url):
    with Offloader(sqlite_url) as offloader:
        yield offloader


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
