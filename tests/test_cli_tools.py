"""The CLI of the companion tools, run as a real process: slice, query, query --all, extracts, rerun, demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sqlalchemy as sa


def offload(url: str, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "offload", "--url", url, *args], capture_output=True,
                          input=input, timeout=300)


@pytest.fixture
def stored(sqlite_url, tmp_path):
    log = "".join(f"step {i} ok\n" for i in range(30_000)) + "FATAL: disk quota exceeded\n"
    records = [{"id": i, "status": "error" if i % 10 == 0 else "ok"} for i in range(20_000)]
    (tmp_path / "log.txt").write_text(log)
    (tmp_path / "records.json").write_text(json.dumps(records))
    ids = {}
    for name, tool in (("log.txt", "bash"), ("records.json", "api")):
        out = offload(sqlite_url, "put", str(tmp_path / name), "--tool", tool, "--json")
        assert out.returncode == 0, out.stderr.decode()
        ids[name] = json.loads(out.stdout)["artifact_id"]
    return ids, log, records


def test_slice_json_and_text(sqlite_url, stored):
    ids, log, _ = stored
    out = offload(sqlite_url, "slice", ids["log.txt"], "--offset", "-2", "--json")
    page = json.loads(out.stdout)
    assert page["content"].split("\n") == log.split("\n")[-3:-1] and page["next"] is None
    out = offload(sqlite_url, "slice", ids["log.txt"], "--offset", "10", "--limit", "3")
    assert out.stdout.decode().split("\n")[:3] == ["step 10 ok", "step 11 ok", "step 12 ok"]
    assert "next: offload slice" in out.stderr.decode()


def test_query_each_engine(sqlite_url, stored):
    ids, _, records = stored
    out = offload(sqlite_url, "query", ids["records.json"], "--jmespath", "length([?status=='error'])", "--json")
    assert json.loads(out.stdout)["result"] == sum(r["status"] == "error" for r in records)
    out = offload(sqlite_url, "query", ids["log.txt"], "--grep", "FATAL", "--json")
    assert json.loads(out.stdout)["result"] == ["30000: FATAL: disk quota exceeded"]
    out = offload(sqlite_url, "query", ids["records.json"], "--sql",
                  "SELECT count(*) AS n FROM artifact WHERE status = 'ok'", "--json")
    assert json.loads(out.stdout)["result"] == [{"n": 18_000}]


def test_query_all_prints_one_json_line_per_artifact(sqlite_url, stored):
    ids, _, _ = stored
    out = offload(sqlite_url, "query", "--all", "--since", "1h", "--jmespath", "length(@)")
    lines = [json.loads(line) for line in out.stdout.decode().splitlines()]
    by_id = {line["artifact_id"]: line for line in lines}
    assert by_id[ids["records.json"]]["result"] == 20_000 and by_id[ids["records.json"]]["ok"]
    assert not by_id[ids["log.txt"]]["ok"] and "JSON" in by_id[ids["log.txt"]]["error"]
    out = offload(sqlite_url, "query", "--all", "--tool", "api", "--jmespath", "[0].id")
    assert [json.loads(x)["result"] for x in out.stdout.decode().splitlines()] == [0]
    assert out.returncode == 0  # and with some failing rows (the log above), too
    out = offload(sqlite_url, "query", "--all", "--grep", "(")  # fails on every artifact: it exited 0
    assert out.returncode == 2 and "failed on all" in out.stderr.decode()
    assert all(not json.loads(x)["ok"] for x in out.stdout.decode().splitlines())


def test_bad_queries_exit_nonzero_with_a_message(sqlite_url, stored):
    ids, _, _ = stored
    out = offload(sqlite_url, "query", ids["records.json"], "--jmespath", "[?status=='error'")
    assert out.returncode == 2 and "error:" in out.stderr.decode()
    out = offload(sqlite_url, "slice", ids["log.txt"], "--limit", "-1")
    assert out.returncode == 2 and "negative" in out.stderr.decode()
    out = offload(sqlite_url, "slice", "art_unknown00000000")
    assert out.returncode == 1 and "offload ls" in out.stderr.decode()


def test_extracts_and_rerun_flag_altered_bytes(sqlite_url, stored):
    ids, _, _ = stored
    offload(sqlite_url, "slice", ids["log.txt"], "--offset", "-1")
    offload(sqlite_url, "query", ids["records.json"], "--jmespath", "[?status=='error'].id | [:3]")
    log = json.loads(offload(sqlite_url, "extracts", "--json").stdout)["items"]
    assert [e["op"] for e in log] == ["slice", "jmespath"]
    out = offload(sqlite_url, "rerun", "--json")
    assert out.returncode == 0
    assert {r["status"] for r in json.loads(out.stdout)["results"]} == {"unchanged"}
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:  # same length, one word altered: the line index still fits
        sha = conn.execute(sa.text("SELECT sha256 FROM artifacts WHERE id = :i"), {"i": ids["log.txt"]}).scalar()
        data = conn.execute(sa.text("SELECT data FROM chunks WHERE sha256 = :s"), {"s": sha}).scalar()
        conn.execute(sa.text("UPDATE chunks SET data = :d WHERE sha256 = :s"),
                     {"d": data.replace(b"FATAL", b"FATQL"), "s": sha})
    engine.dispose()
    out = offload(sqlite_url, "rerun", "--json")
    assert out.returncode == 1, out.stderr.decode()[-3000:]
    assert out.stdout, out.stderr.decode()[-3000:]
    statuses = {r["artifact_id"]: r["status"] for r in json.loads(out.stdout)["results"]}
    assert statuses == {ids["log.txt"]: "changed", ids["records.json"]: "unchanged"}
    out = offload(sqlite_url, "rerun", "--artifact", ids["records.json"])
    assert out.returncode == 0 and "1 unchanged" in out.stdout.decode()


def test_demo_runs_on_the_default_store(tmp_path):
    """`offload demo` with no URL: the per-user default store in the (isolated) home folder."""
    out = subprocess.run([sys.executable, "-m", "offload", "demo"], capture_output=True, timeout=600)
    text = out.stdout.decode()
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    assert "stored whole as art_" in text and "matching lines in all" in text
    assert str(tmp_path / "home") in text  # the embedded default store lives in the user's data folder


def test_extracts_page_with_a_limit_and_a_cursor(sqlite_url, stored):
    ids, _, _ = stored
    for offset in range(3):
        offload(sqlite_url, "slice", ids["log.txt"], "--offset", str(offset))
    whole = json.loads(offload(sqlite_url, "extracts", "--json").stdout)
    first = json.loads(offload(sqlite_url, "extracts", "--limit", "2", "--json").stdout)
    rest = json.loads(offload(sqlite_url, "extracts", "--limit", "2", "--cursor", first["next_cursor"], "--json").stdout)
    assert [e["id"] for e in first["items"] + rest["items"]] == [e["id"] for e in whole["items"]]
    assert len(whole["items"]) == 3 and rest["next_cursor"] is None
    out = offload(sqlite_url, "extracts", "--limit", "2")
    assert f"more: offload extracts --limit 2 --cursor {first['next_cursor']}" in out.stdout.decode()


def test_extracts_and_rerun_of_an_unknown_artifact_say_not_found(sqlite_url, stored):
    """Both printed an empty log ("0 unchanged, 0 changed, 0 failed") and exited 0."""
    ids, _, _ = stored
    for args in (["rerun", "--artifact", "art_aaaaaaaaaaaaaaaa"], ["extracts", "--artifact", "art_aaaaaaaaaaaaaaaa"]):
        out = offload(sqlite_url, *args)
        assert out.returncode == 1 and "art_aaaaaaaaaaaaaaaa" in out.stderr.decode(), out.stderr
    out = offload(sqlite_url, "extracts", "--artifact", ids["log.txt"])  # a real one with no extracts yet
    assert out.returncode == 0
