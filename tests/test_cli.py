"""Issue 2's commands: init, put, cat, show, ls, rm, gc, verify, db upgrade — and their errors.

Most run in-process through typer's runner (the real commands, real stores, real files); the ones whose
point is a real process (exit codes, raw bytes on stdout) run the command in a fresh interpreter.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from offload.cli import app

STDLIB = Path(sysconfig.get_paths()["stdlib"])
CLI = [sys.executable, "-c", "from offload.cli import main; main()"]
README = Path(__file__).resolve().parents[1] / "README.md"
CONTRACT = ("artifact_id", "tool", "kind", "content_type", "bytes", "chars", "lines", "items", "tokens", "sha256",
            "preview", "shape", "hints", "truncated")

runner = CliRunner()


def offload(*args: str, input: bytes | str | None = None, ok: bool = True):
    result = runner.invoke(app, list(args), input=input)
    if ok:
        assert result.exit_code == 0, f"offload {' '.join(args)} → {result.exit_code}: {result.output}"
    return result


def offload_json(*args: str, input: bytes | str | None = None):
    return json.loads(offload(*args, "--json", input=input).stdout)


def offload_process(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    """The real command line in a fresh process (the environment is the test's isolated one)."""
    return subprocess.run([*CLI, *args], input=input, capture_output=True, timeout=120)


def store_rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT id, status, sha256 FROM artifacts ORDER BY id").fetchall()


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


# -- documentation ---------------------------------------------------------------------------------


def _command_names(group, prefix: str = "") -> list[str]:
    names = []
    for name, command in sorted(group.commands.items()):
        if getattr(command, "hidden", False):
            continue
        if hasattr(command, "commands"):
            names += _command_names(command, f"{prefix}{name} ")
        else:
            names.append(prefix + name)
    return names


def test_every_command_is_documented_in_the_readme():
    readme = README.read_text()
    names = _command_names(typer.main.get_command(app))
    assert {"init", "put", "cat", "show", "ls", "rm", "gc", "verify", "db upgrade"} <= set(names)
    missing = [name for name in names if not re.search(rf"`offload {re.escape(name)}[ `]", readme)]
    assert not missing, f"commands not documented in README.md: {missing}"


# -- init ---------------------------------------------------------------------------------------


def test_init_makes_a_private_project_store_that_later_commands_find(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    result = offload("init")
    folder = project / ".offload"
    assert str(folder) in result.stdout
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    assert stat.S_IMODE((folder / "store.db").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert result.stdout.startswith("Initialized an offload store in")
    again = offload("init")  # again: harmless, and says so (it said "Initialized" again)
    assert again.stdout == f"An offload store is in {folder} already; its artifacts are kept\n"

    # found like git finds a repository: from a subdirectory, without --url
    (project / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(project / "src" / "pkg")
    ref = offload_json("put", str(STDLIB / "typing.py"), "--tool", "cat")
    assert [row[0] for row in store_rows(folder / "store.db")] == [ref["artifact_id"]]
    assert stat.S_IMODE((folder / "store.db").stat().st_mode) == 0o600


@pytest.mark.parametrize("name", ["pc%41t", "we?ird", "a#b c ü"])
def test_init_and_discovery_work_in_a_folder_whose_name_holds_url_characters(tmp_path, monkeypatch, name):
    """The store URL was f"sqlite:///{path}": in pc%41t, init named the right folder and made the store in a
    sibling pcAt/.offload/; in we?ird, a file named `we` in the parent."""
    parent = tmp_path / "projects"
    project = parent / name
    (project / "src").mkdir(parents=True)
    monkeypatch.chdir(project)
    assert str(project / ".offload") in offload("init").stdout
    monkeypatch.chdir(project / "src")  # found from below, without --url
    ref = offload_json("put", str(STDLIB / "typing.py"), "--tool", "cat")
    assert [row[0] for row in store_rows(project / ".offload" / "store.db")] == [ref["artifact_id"]]
    assert [p.name for p in parent.iterdir()] == [name]
    assert sorted(p.name for p in project.iterdir()) == [".offload", "src"]


# -- put / cat / show / ls ----------------------------------------------------------------------------


def test_put_a_file_and_stdin_prints_the_reference_as_json(url, real_count):
    source = STDLIB / "typing.py"
    data = source.read_bytes()
    from_file = offload_json("--url", url, "put", str(source), "--tool", "cat")
    from_stdin = offload_json("--url", url, "put", "-", "--tool", "cat", input=data)
    for ref in (from_file, from_stdin):
        assert set(CONTRACT) <= set(ref), f"missing fields: {set(CONTRACT) - set(ref)}"
        assert ref["artifact_id"].startswith("art_") and ref["tool"] == "cat"
        assert (ref["kind"], ref["content_type"]) == ("text", "text/plain")
        assert ref["bytes"] == len(data) and ref["lines"] == data.count(b"\n")
        assert ref["chars"] == len(data.decode()) and ref["sha256"] == hashlib.sha256(data).hexdigest()
        assert ref["truncated"] is True and ref["items"] is None and ref["hints"] == [] and ref["shape"] is None
        assert ref["tokens"] > 10_000 and ref["tokens_estimated"] is True
        assert ref["preview"].startswith('"""\nThe typing module')
        assert real_count(ref["preview"]) < 800
    assert from_file["artifact_id"] != from_stdin["artifact_id"]  # each put is its own artifact

    # without --json: the text the model sees
    text = offload("--url", url, "put", str(source), "--tool", "cat").stdout
    assert "was stored whole as art_" in text and f"{len(data):,} bytes" in text
    assert real_count(text) <= 800


def test_put_json_has_shape_items_and_hints(url, tmp_path):
    rows = [{"name": p.name, "bytes": p.stat().st_size} for p in sorted(STDLIB.glob("*.py"))] * 20
    document = tmp_path / "modules.json"
    document.write_text(json.dumps({"modules": rows}))
    ref = offload_json("--url", url, "put", str(document), "--tool", "http_get")
    assert ref["kind"] == "json" and ref["items"] == len(rows) and ref["shape"]
    assert ref["hints"] and all(isinstance(h, str) for h in ref["hints"])


def test_cat_writes_the_exact_bytes_including_binary(url):
    png = STDLIB / "idlelib" / "Icons" / "idle_256.png"
    ref = offload_json("--url", url, "put", str(png), "--tool", "download")
    assert ref["kind"] == "binary" and ref["content_type"] == "image/png"
    assert offload("--url", url, "cat", ref["artifact_id"]).stdout_bytes == png.read_bytes()
    # (a real process writing binary to a real stdout: test_offload.py's 3MB-binary case)


def test_show_prints_metadata_and_the_reference_the_model_saw(url):
    source = STDLIB / "typing.py"
    ref = offload_json("--url", url, "put", str(source), "--tool", "cat", "--session", "conv-1")
    shown = offload("--url", url, "show", ref["artifact_id"]).stdout
    assert ref["artifact_id"] in shown and "conv-1" in shown and ref["sha256"] in shown
    assert "preview the model saw:" in shown and ref["preview"].splitlines()[1] in shown
    assert f"tokens: {ref['tokens']} (estimate)" in shown  # no tokenizer configured: an estimate, and says so
    meta = offload_json("--url", url, "show", ref["artifact_id"])
    assert meta["id"] == ref["artifact_id"] and meta["tool"] == "cat" and meta["session"] == "conv-1"
    assert meta["bytes"] == source.stat().st_size and meta["args"] == {"file": str(source)}
    assert meta["reference"]["preview"] == ref["preview"]
    assert meta["created_at"].endswith("Z")


def test_ls_lists_newest_first_with_a_cursor(url):
    ids = []
    for name in ("abc.py", "ast.py", "typing.py"):
        ids.append(offload_json("--url", url, "put", str(STDLIB / name), "--tool", "cat")["artifact_id"])
        time.sleep(0.01)
    page = offload_json("--url", url, "ls", "--limit", "2")
    assert set(page) == {"items", "next_cursor"}
    assert [item["id"] for item in page["items"]] == ids[::-1][:2]
    assert page["next_cursor"]
    rest = offload_json("--url", url, "ls", "--limit", "2", "--cursor", page["next_cursor"])
    assert [item["id"] for item in rest["items"]] == ids[:1] and rest["next_cursor"] is None
    assert offload_json("--url", url, "ls", "--tool", "nope") == {"items": [], "next_cursor": None}
    table = offload("--url", url, "ls").stdout
    assert all(artifact_id in table for artifact_id in ids)


def test_the_printed_next_page_command_lists_the_same_listing(url):
    """`more: offload ls --cursor …` dropped the filters and limit: followed, it listed every tool's
    artifacts; `extracts --artifact` lost its artifact the same way."""
    ids = {tool: [] for tool in ("a", "b")}
    for n in range(3):
        for tool in ids:
            ids[tool].append(offload_json("--url", url, "put", "-", "--tool", tool, input=f"{tool}{n}\n" * 9000)
                             ["artifact_id"])
            time.sleep(0.01)
    assert _followed(url, ["ls", "--tool", "a", "--limit", "1"], r"^(art_\w+)") == ids["a"][::-1]
    for artifact_id in ids["a"] + ids["b"]:
        offload("--url", url, "slice", artifact_id, "--limit", "1")
    offload("--url", url, "slice", ids["b"][1], "--offset", "5", "--limit", "1")
    assert _followed(url, ["extracts", "--artifact", ids["b"][1], "--limit", "1"],
                     r"^ext_\w+\s+\S+\s+(art_\w+)") == [ids["b"][1]] * 2


def _followed(url: str, args: list[str], row: str) -> list[str]:
    """What `row` finds on every page of a listing, following each `more:` command it prints."""
    seen = []
    while True:
        out = offload("--url", url, *args).stdout
        seen += re.findall(row, out, re.M)
        more = re.search(r"^more: offload (.*)$", out, re.M)
        if more is None:
            return seen
        args = shlex.split(more.group(1))


@pytest.mark.parametrize("args, says", [
    (["ls", "--limit", "9223372036854775807"], "limit must be an integer from 1 to 100,000"),
    (["ls", "--limit", "0"], "limit must be an integer from 1 to 100,000"),
    (["extracts", "--limit", "999999999999999999999"], "limit must be an integer from 1 to 100,000"),
    (["ls", "--kind", "nonsense"], "kind must be one of json, ndjson, csv, grep, shell, text, binary"),
])
def test_a_listing_refuses_a_limit_or_kind_it_cannot_take_in_one_line(url, args, says):
    # a 64-bit limit was an OverflowError traceback on SQLite; an unknown kind listed nothing
    offload("--url", url, "put", "-", "--tool", "t", input="x\n" * 9000)
    result = offload("--url", url, *args, ok=False)
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output


def test_an_empty_filtered_listing_says_nothing_matches(url):
    offload("--url", url, "put", "-", "--tool", "t", input="x\n" * 9000)
    assert offload("--url", url, "ls", "--tool", "zzz").stdout.strip() == "No artifacts match."
    empty = f"sqlite:///{Path(url[10:]).parent / 'empty.db'}"
    offload("--url", empty, "db", "upgrade")
    assert offload("--url", empty, "ls").stdout.strip() == "No artifacts stored."


@pytest.mark.parametrize("token", ["", "short", "=team-a"])
def test_serve_refuses_a_token_too_short_to_be_one(url, token):
    # `--token "$TOKEN"` with TOKEN unset served 0.0.0.0 with a token no request could present
    from offload.api.server import build_config
    from offload.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="a token must be at least 16 characters"):
        build_config("127.0.0.1", {token.split("=")[0]: None})
    if token == "":  # the command itself, in a process of its own (a server that starts would not end)
        result = subprocess.run([*CLI, "--url", url, "serve", "--host", "0.0.0.0", "--port", "8", "--token", token],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and "a token must be at least 16 characters" in result.stderr


@pytest.mark.parametrize("args, says", [
    (["ID", "--all", "-g", "1"], "give an artifact id (ID) or --all, not both"),  # the id was ignored
    (["--all"], "give exactly one of --jmespath, --grep or --sql"),  # said once per artifact, then exit 2
    (["ID", "--tool", "t", "-g", "1"], "--tool and --since choose the artifacts of --all"),
])
def test_query_refuses_an_id_beside_all_and_all_without_one_expression(url, args, says):
    aid = offload_json("--url", url, "put", "-", "--tool", "t", input="1\n" * 9000)["artifact_id"]
    result = offload("--url", url, "query", *[aid if arg == "ID" else arg for arg in args], ok=False)
    assert result.exit_code == 2 and says.replace("ID", aid) in " ".join(result.output.replace("│", "").split())


def test_a_slice_past_the_end_says_so_and_claims_no_line(url):
    aid = offload_json("--url", url, "put", "-", "--tool", "t", input="x\n" * 100_000)["artifact_id"]
    result = offload("--url", url, "slice", aid, "--offset", "200000")
    assert "— no lines at offset 200,000 of 100,000" in result.stderr  # it said "lines 200,000–200,000"
    assert "offset 200,000 is past the end: the artifact has 100,000 lines" in result.stderr
    assert "— lines 99,999–99,999 of 100,000" in offload("--url", url, "slice", aid, "--offset", "99999").stderr


def test_an_empty_session_is_no_session(url):
    # it was a session of its own, listed by stats as a second "-" beside the artifacts of none
    offload("--url", url, "put", "-", "--tool", "t", "--session", "", input="x\n" * 9000)
    offload("--url", url, "put", "-", "--tool", "t", input="y\n" * 9000)
    sessions = offload_json("--url", url, "stats")["by_session"]
    assert [(group["name"], group["artifacts"]) for group in sessions] == [(None, 2)]


# -- rm / gc / verify / db upgrade ---------------------------------------------------------------------


def test_rm_deletes_and_the_id_then_says_deleted(url, tmp_path):
    data = (STDLIB / "typing.py").read_bytes()
    first = offload_json("--url", url, "put", "-", "--tool", "cat", input=data)["artifact_id"]
    second = offload_json("--url", url, "put", "-", "--tool", "cat", input=data)["artifact_id"]
    assert f"deleted {first}" in offload("--url", url, "rm", first).stdout
    gone = offload("--url", url, "cat", first, ok=False)
    assert gone.exit_code == 1 and "was deleted" in gone.stderr
    assert offload("--url", url, "cat", second).stdout_bytes == data  # the shared content stays
    report = offload_json("--url", url, "gc")
    assert report["contents_removed"] == 0 and report["total_bytes"] == len(data)
    offload("--url", url, "rm", second)
    assert offload_json("--url", url, "gc")["total_bytes"] == 0


def test_gc_expires_and_an_expired_id_says_expired(url, monkeypatch):
    monkeypatch.setenv("OFFLOAD_TTL_DAYS", str(1 / 86_400 / 10))  # a tenth of a second
    ref = offload_json("--url", url, "put", str(STDLIB / "typing.py"), "--tool", "cat")
    time.sleep(0.3)
    report = offload_json("--url", url, "gc")
    assert report["expired"] == 1 and report["contents_removed"] == 1
    text = offload("--url", url, "gc").stdout
    assert text.startswith("expired 0, evicted 0")
    for command in ("cat", "show"):
        result = offload("--url", url, command, ref["artifact_id"], ok=False)
        assert result.exit_code == 1 and "expired" in result.stderr and "No artifact" not in result.stderr


def test_verify_finds_a_tampered_chunk(url, tmp_path):
    ref = offload_json("--url", url, "put", str(STDLIB / "typing.py"), "--tool", "cat")
    assert "All stored content matches" in offload("--url", url, "verify").stdout
    assert offload_json("--url", url, "verify") == {"ok": True, "problems": []}
    with sqlite3.connect(tmp_path / "cli.db") as conn:
        (data,) = conn.execute("SELECT data FROM chunks WHERE sha256 = ? AND seq = 0", (ref["sha256"],)).fetchone()
        tampered = bytes(data).replace(b"typing", b"TYPING", 1)
        assert tampered != bytes(data)
        conn.execute("UPDATE chunks SET data = ? WHERE sha256 = ? AND seq = 0", (tampered, ref["sha256"]))
    result = offload("--url", url, "verify", ok=False)
    assert result.exit_code == 1 and "MISMATCH" in result.stdout and ref["artifact_id"] in result.stdout
    report = json.loads(offload("--url", url, "verify", "--json", ok=False).stdout)
    assert report["ok"] is False and report["problems"][0]["artifacts"] == [ref["artifact_id"]]


def test_cat_of_content_missing_a_chunk_fails_instead_of_printing_part_of_it(url, tmp_path):
    data = "".join(f"line {i} of a big result\n" for i in range(200_000))  # ~5 MB: 5 chunks
    ref = offload_json("--url", url, "put", "-", "--tool", "cat", input=data)
    with sqlite3.connect(tmp_path / "cli.db") as conn:
        conn.execute("DELETE FROM chunks WHERE sha256 = ? AND seq = 2", (ref["sha256"],))
    result = offload("--url", url, "cat", ref["artifact_id"], ok=False)
    assert result.exit_code != 0 and "could not be read whole" in result.stderr, result.output[-500:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [["ls"], ["cat", "art_aaaaaaaaaaaaaaaa"], ["show", "art_aaaaaaaaaaaaaaaa"],
                                     ["verify"], ["gc"], ["stats"], ["extracts"], ["rm", "art_aaaaaaaaaaaaaaaa"]])
@pytest.mark.parametrize("name", ["typo/store.db", "typo.db", "typo.duckdb"])
def test_a_command_on_a_store_that_is_not_there_says_so_and_creates_nothing(tmp_path, command, name):
    """A mistyped --url left an empty store (and its folders) behind, and `ls` printed an empty listing."""
    missing = tmp_path / "stores" / name
    for url in (str(missing), f"{'duckdb' if name.endswith('.duckdb') else 'sqlite'}:///{missing}"):
        result = offload("--url", url, *command, ok=False)
        assert result.exit_code == 2 and f"there is no store at {missing}" in result.stderr
        assert "offload db upgrade" in result.stderr and result.stdout == ""
    assert not (tmp_path / "stores").exists()
    offload("--url", str(missing), "db", "upgrade")  # creating one is asked for by name
    assert missing.exists() and "No artifacts" in offload("--url", str(missing), "ls").stdout


def test_a_command_that_needs_a_store_leaves_an_empty_file_as_it_is(tmp_path):
    """`ls` on an empty file made it a 589,824-byte SQLite store, owner-only."""
    empty = tmp_path / "notes.txt"
    empty.write_bytes(b"")
    empty.chmod(0o644)
    for url in (str(empty), f"duckdb:///{empty}"):
        result = offload("--url", url, "ls", ok=False)
        assert result.exit_code == 2 and f"there is no store at {empty} (an empty file)" in result.stderr
    assert empty.read_bytes() == b"" and stat.S_IMODE(empty.stat().st_mode) == 0o644


def test_an_empty_id_is_no_id_for_extracts_and_rerun(url):
    """`rerun --extract ""` re-ran the whole log, and `extracts --artifact ""` listed all of it."""
    ref = json.loads(offload("--url", url, "put", "-", "--tool", "t", "--json", input="x\n" * 9000).stdout)
    offload("--url", url, "slice", ref["artifact_id"])
    for args, says in ((["rerun", "--extract", ""], "No extract ''"), (["rerun", "--artifact", ""], "No artifact ''"),
                       (["extracts", "--artifact", ""], "No artifact ''")):
        result = offload("--url", url, *args, ok=False)
        assert result.exit_code == 1 and says in result.stderr and result.stdout == ""
    assert "1 unchanged" in offload("--url", url, "rerun").stdout


def test_a_tool_name_with_control_characters_stays_on_its_row(url):
    """A tool named "a\\nb" split its `ls` row in two, and an ESC in it coloured the terminal."""
    offload("--url", url, "put", "-", "--tool", "a\nb\x1b[31m", input="x\n")
    listed = offload("--url", url, "ls").stdout.splitlines()
    assert len(listed) == 2 and "a\\nb\\x1b[31m" in listed[1] and "\x1b" not in "".join(listed)
    shown = offload("--url", url, "show", listed[1].split()[0]).stdout
    assert "         tool: a\\nb\\x1b[31m\n" in shown
    assert "a\\nb\\x1b[31m" in offload("--url", url, "stats").stdout
    assert json.loads(offload("--url", url, "ls", "--json").stdout)["items"][0]["tool"] == "a\nb\x1b[31m"


def test_db_upgrade_is_idempotent(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = offload("--url", url, "db", "upgrade").stdout
    assert "→" in first and "empty" in first
    second = offload("--url", url, "db", "upgrade").stdout
    assert "already at" in second and first.split("→")[1].strip() in second
    ref = offload_json("--url", url, "put", str(STDLIB / "abc.py"), "--tool", "cat")
    assert "already at" in offload("--url", url, "db", "upgrade").stdout
    assert offload("--url", url, "cat", ref["artifact_id"]).stdout_bytes == (STDLIB / "abc.py").read_bytes()


# -- errors: a clear message, a non-zero exit, nothing changed -------------------------------------------


def test_unknown_ids_fail_clearly_and_change_nothing(url, tmp_path):
    kept = offload_json("--url", url, "put", str(STDLIB / "typing.py"), "--tool", "cat")["artifact_id"]
    before = store_rows(tmp_path / "cli.db")
    for args in (["cat", "art_doesnotexist"], ["show", "art_doesnotexist"], ["show", "art_doesnotexist", "--json"],
                 ["rm", "art_doesnotexist"], ["rm", kept, "art_doesnotexist"]):
        result = offload("--url", url, *args, ok=False)
        assert result.exit_code == 1, args
        assert "No artifact 'art_doesnotexist'" in result.stderr and "offload ls" in result.stderr
        assert "Traceback" not in result.output and result.stdout == ""
        # of several ids, the message says none was changed (it said only which one was unknown)
        assert ("None of the 2 artifacts was changed." in result.stderr) is (args[0] == "rm" and len(args) == 3), args
    assert store_rows(tmp_path / "cli.db") == before  # `rm kept unknown` deleted nothing

    done = offload_process("--url", url, "cat", "art_doesnotexist")  # a real process, a real exit code
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().startswith("error: No artifact 'art_doesnotexist'")
    assert b"Traceback" not in done.stderr


def test_a_read_of_another_programs_database_is_one_clear_line_and_changes_nothing(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.close()
    before = path.read_bytes(), stat.S_IMODE(path.stat().st_mode)
    result = offload("--url", str(path), "ls", ok=False)
    assert result.exit_code == 2 and result.stderr == (
        f"error: {path} is not an offload store: it is another program's database (tables: users). Point --url "
        f"(or OFFLOAD_URL) at an offload store or a new file; {path} was left as it is.\n")
    assert (path.read_bytes(), stat.S_IMODE(path.stat().st_mode)) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("app")] == ["app.db"]


def test_put_of_an_unreadable_file_fails_clearly(url, tmp_path):
    for path in (tmp_path / "missing.txt", tmp_path):
        result = offload("--url", url, "put", str(path), "--tool", "cat", ok=False)
        assert result.exit_code == 2 and result.stderr.startswith(f"error: cannot read {path}")
        assert "Traceback" not in result.output


def test_put_needs_a_tool_name_and_says_too_large_only_of_what_was(url, tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("hello\n")
    for name in ("", "  "):
        refused = offload("--url", url, "put", str(small), "--tool", name, ok=False)
        assert refused.exit_code == 2 and "--tool must name the tool" in refused.stderr
    assert "there is no store" in offload("--url", url, "ls", ok=False).stderr  # refused before it was made
    for data in ("hello\n", ""):  # stored because put always stores, not because they were too large
        text = offload("--url", url, "put", "-", "--tool", "read", input=data).stdout
        assert text.startswith("[offload] The result of `read` was stored whole as art_") and "too large" not in text
    big = offload("--url", url, "put", "-", "--tool", "read", input="many words here\n" * 20_000).stdout
    assert big.startswith("[offload] The result of `read` was too large for the context and was stored whole")
    # within read's limit of 8,000 tokens, beyond the reference's ~800: its preview is cut, but the tool
    # call would have passed it through, so it was not too large for the context
    middling = offload("--url", url, "put", "-", "--tool", "read", input="many words here\n" * 600).stdout
    assert "Preview — partial" in middling and "too large" not in middling
    assert "too large for the context" in offload("--url", url, "put", "-", "--tool", "glob",
                                                  input="many words here\n" * 600).stdout  # glob: 2,000 tokens


def test_put_fails_clearly_when_the_store_cannot_take_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    result = offload("--url", f"sqlite:///{blocker / 'store.db'}", "put", str(STDLIB / "abc.py"), "--tool", "cat",
                     ok=False)
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
    assert "Traceback" not in result.output


def test_import_of_what_is_not_an_archive_fails_clearly(url, tmp_path):
    (tmp_path / "notes.txt").write_text("not an archive\n")
    for path, message in ((tmp_path / "notes.txt", "is not an offload archive: it is not a tar file"),
                          (tmp_path / "missing.tar", "No such file or directory"),
                          (tmp_path, "Is a directory")):
        done = offload_process("--url", url, "import", str(path))
        assert done.returncode == 2, (path, done.stderr)
        assert message in done.stderr.decode() and b"Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--http"]])
@pytest.mark.parametrize("port", ["65536", "-5"])
def test_a_port_out_of_range_is_refused_before_anything_listens(url, command, port):
    result = offload("--url", url, *command, "--port", port, ok=False)
    assert result.exit_code == 2 and "Invalid value for '--port'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args, closed, says", [
    (["put", "-", "--tool", "x"], "stdin", "standard input is closed; pipe the content in"),
    (["mcp"], "stdin", "standard input is closed; over stdio the MCP client's messages"),
    (["proxy", "--", "true"], "stdin", "standard input is closed; the MCP client's messages"),
    (["ls", "--json"], "stdout", "standard output is closed"),
    (["cat", "art_aaaaaaaaaaaaaaaa"], "stdout", "standard output is closed"),
    (["put", "-", "--tool", "x", "--json"], "stdout", "standard output is closed"),
])
def test_a_closed_standard_stream_is_a_clear_error(url, tmp_path, args, closed, says):
    """`offload put - <&-` and `offload ls --json >&-` gave AttributeError tracebacks (put --json stored
    first); a closed stream is said so, exit 2, and nothing is stored."""
    redirect = "<&-" if closed == "stdin" else ">&-"  # the descriptor closed, as the shell leaves it
    done = subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", *CLI, "--url", url, *args],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if closed == "stdin" else None,
                          stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 2 and says in done.stderr.decode() and "Traceback" not in done.stderr.decode()
    assert not (tmp_path / "cli.db").exists() or store_rows(tmp_path / "cli.db") == []


def test_a_damaged_store_file_is_one_clear_line_and_verify_reports_it(tmp_path):
    """Pages of a SQLite store overwritten: show, cat and stats printed a traceback ending in the SQL
    that met "database disk image is malformed"; verify crashed. Now one line, exit 2; verify exit 1."""
    path = tmp_path / "damaged.db"
    url = f"sqlite:///{path}"
    data = json.dumps([{"id": i, "name": "n" * 50} for i in range(60_000)]).encode()
    artifact_id = json.loads(offload_process("--url", url, "put", "-", "--tool", "api", "--json",
                                             input=data).stdout)["artifact_id"]
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with path.open("r+b") as f:
        for offset in range(131_072, path.stat().st_size, 196_608):
            f.seek(offset)
            f.write(b"\xde\xad\xbe\xef" * 2048)
    for args in (["show", artifact_id], ["cat", artifact_id], ["stats"]):
        done = offload_process("--url", url, *args)
        err = done.stderr.decode()
        assert done.returncode == 2 and "Traceback" not in err and "[SQL:" not in err, err[-2000:]
        assert "database disk image is malformed" in err and len(err.splitlines()) == 1
    done = offload_process("--url", url, "verify")
    assert done.returncode == 1 and "Traceback" not in done.stderr.decode()
    assert "MISMATCH" in done.stdout.decode() and artifact_id in done.stdout.decode()


def test_db_upgrade_fails_in_one_line_within_the_busy_timeout_and_never_shows_the_password(
        tmp_path, monkeypatch, pg_database):
    """It printed a 140-line traceback for a file holding another program's `artifacts` table, one after 31 s
    for a locked store despite OFFLOAD_BUSY_TIMEOUT=2, and the PostgreSQL password in clear."""
    import sqlalchemy as sa

    from tests.conftest import pg_schema_url

    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE artifacts (x INTEGER)")
    result = offload("--url", str(foreign), "db", "upgrade", ok=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {foreign} is not an offload store: it has tables named like offload's (artifacts) but no offload "
        f"schema revision: offload did not make them. Point --url (or OFFLOAD_URL) at an offload store or a new "
        f"file; {foreign} was left as it is."]

    monkeypatch.setenv("OFFLOAD_BUSY_TIMEOUT", "1")
    locked = tmp_path / "locked.db"
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    result = offload("--url", str(locked), "db", "upgrade", ok=False)
    assert time.monotonic() - started < 10
    holder.execute("ROLLBACK")
    holder.close()
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "database is locked" in result.stderr and "Traceback" not in result.output

    # the test server trusts its clients: the password is ignored, and the URL still holds it
    secret = sa.engine.make_url(pg_schema_url(pg_database)).set(password="s3cretpw")
    for _ in range(2):
        result = offload("--url", secret.render_as_string(hide_password=False), "db", "upgrade")
        assert "s3cretpw" not in result.output and "postgres:***@" in result.stdout
