"""The `offload` command: thin wrappers over Offloader methods, people-readable by default, --json for scripts."""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Optional

import typer
import typer.core

from .cli_store import NEED_A_STORE, State
from .errors import ExtractNotFound, OffloadError
from .jsontext import dumps
from .offloader import Offloader


class _Commands(typer.core.TyperGroup):
    """Every command's OffloadError becomes one clear line on stderr and an exit code (1: not found or
    expired, 2: anything else), inside the command line's own context, so it holds however the app is
    run (the `offload` script, `main()`, or a test runner)."""

    def invoke(self, ctx):
        if sys.stdout is None:  # `offload ls >&-`: what a command prints had nowhere to go (a traceback)
            typer.echo("error: standard output is closed; offload writes its results there (redirect it to a "
                       "file, or to /dev/null to discard them)", err=True)
            raise typer.Exit(2)
        try:
            return super().invoke(ctx)
        except OffloadError as exc:
            _fail(exc)
        except BrokenPipeError:  # `offload cat ID | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more at exit either
            raise typer.Exit(1) from None
        except OSError as exc:  # the machine said no (a path that cannot be a store, a full disk): no traceback
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)


app = typer.Typer(help="Keep oversized tool results out of an LLM's context without losing them.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, cls=_Commands)
db_app = typer.Typer(help="Store maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")


state = State()


@app.callback()
def _main(ctx: typer.Context,
          url: Optional[str] = typer.Option(None, "--url", envvar="OFFLOAD_URL",
                                            help="Store URL or file; default: nearest .offload/, else per-user."),
          namespace: Optional[str] = typer.Option(None, "--namespace", "-n", envvar="OFFLOAD_NAMESPACE",
                                                  help="Namespace (tenant) to act in.")) -> None:
    state.url, state.namespace, state._off = url, namespace, None
    state.existing = ctx.invoked_subcommand in NEED_A_STORE


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _cell(value: Any) -> str:
    """A value as one line of a table: control characters as their escapes (`\\n`, `\\x1b`), so that a
    tool named "a\\nb" or holding a colour code neither splits its row nor colours the terminal."""
    text = str(value)
    return _CONTROL.sub(lambda found: repr(found.group())[1:-1], text) if _CONTROL.search(text) else text


def _print_json(data: Any) -> None:
    sys.stdout.write(dumps(data, indent=True).decode() + "\n")


def _stdin(need: str = "pipe the content in, or name a file") -> Any:
    """Standard input's bytes stream; a clear exit when it is closed (`<&-`: a traceback before)."""
    if sys.stdin is None:
        typer.echo(f"error: standard input is closed; {need}", err=True)
        raise typer.Exit(2)
    return sys.stdin.buffer


def _fail(exc: OffloadError, then: str | None = None) -> None:
    typer.echo(f"error: {exc.model_message()}", err=True)
    if then:
        typer.echo(then, err=True)
    raise typer.Exit(1 if exc.status in (404, 410) else 2)


def main() -> None:
    try:
        app()
    except OffloadError as exc:  # raised outside any command (errors inside one are handled by _Commands)
        typer.echo(f"error: {exc.model_message()}", err=True)
        sys.exit(1 if exc.status in (404, 410) else 2)


# -- setting up ---------------------------------------------------------------------------------


@app.command()
def init(path: Path = typer.Argument(Path("."), help="Project folder (default: here).")) -> None:
    """Create a project store in PATH/.offload/ (ignored by git). Example: offload init"""
    from .store.engines import PROJECT_DIR, STORE_FILE, file_url, init_project

    existed = (path.resolve() / PROJECT_DIR / STORE_FILE).exists()
    folder = init_project(path.resolve())
    with Offloader(file_url(folder / STORE_FILE)) as off:
        off.store  # create and migrate now (an existing one: migrated, its artifacts kept)
    typer.echo(f"An offload store is in {folder} already; its artifacts are kept" if existed
               else f"Initialized an offload store in {folder}")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Migrate the store's schema to the latest version. Example: offload db upgrade"""
    import sqlalchemy as sa

    from .settings import load_settings
    from .store.engines import make_engine, resolve_url, upgrade

    settings = load_settings(**({"url": state.url} if state.url else {}))  # the store every command opens
    url = resolve_url(settings.url)
    shown = sa.engine.make_url(url).render_as_string(hide_password=True)
    engine = make_engine(url, busy_timeout=settings.busy_timeout)
    try:
        before, after = upgrade(engine)
    finally:
        engine.dispose()
    typer.echo(f"{shown}: {before or 'empty'} → {after}" if before != after else f"{shown}: already at {after}")


# -- storing and reading ------------------------------------------------------------------------


@app.command()
def put(file: str = typer.Argument(..., help="File to store, or - for standard input."),
        tool: str = typer.Option(..., "--tool", "-t", help="Tool name the content came from (sets its budget)."),
        session: Optional[str] = typer.Option(None, help="Conversation id to tag it with."),
        as_json: bool = typer.Option(False, "--json", help="Print the reference as JSON.")) -> None:
    """Store a file whatever its size and print the reference a model would get.

    Example: grep -rn TODO . | offload put - --tool grep
    """
    if not tool.strip():  # as the HTTP API: the name picks the budget and is what the model reads
        typer.echo("error: --tool must name the tool the content came from (e.g. --tool grep); it sets the "
                   "budget and appears in the reference", err=True)
        raise typer.Exit(2)
    try:
        data = _stdin().read() if file == "-" else _read_with_progress(Path(file))
    except OSError as exc:
        typer.echo(f"error: cannot read {file}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2)
    if len(data) >= _BIG_INPUT and sys.stderr.isatty():
        typer.echo(f"storing {len(data):,} bytes…", err=True)
    ref = state.off.put(data, tool=tool, session=session, args={"file": file})
    ref.within_limit = state.off.fits(tool, data)  # put stores what the tool call would pass through too
    _print_json(ref.to_dict()) if as_json else typer.echo(ref.render())


_BIG_INPUT = 16 << 20  # inputs from this size on get a progress bar on a terminal


def _read_with_progress(path: Path) -> bytes:
    size = path.stat().st_size
    if size < _BIG_INPUT or not sys.stderr.isatty():
        return path.read_bytes()
    parts = []
    with path.open("rb") as f, _progress_bar(size, "reading") as bar:
        while block := f.read(4 << 20):
            parts.append(block)
            bar.update(len(block))
    return b"".join(parts)


def _options(**values: Any) -> str:
    """` --name value` for each option given, quoted for a shell: a printed command that continues a listing."""
    return "".join(f" --{name} {shlex.quote(str(value))}" for name, value in values.items() if value is not None)


@app.command()
def cat(artifact_id: str) -> None:
    """Write an artifact's exact stored bytes to standard output. Example: offload cat art_… > out.txt"""
    out = sys.stdout.buffer
    for block in state.off.iter_raw(artifact_id):
        out.write(block)
    out.flush()


@app.command()
def show(artifact_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show an artifact's metadata and the reference the model saw. Example: offload show art_…"""
    meta = state.off.get(artifact_id)
    ref = state.off.reference(artifact_id)
    if as_json:
        return _print_json({**meta, "reference": ref})
    # token figures are estimates unless a real tokenizer counted them (the reference says which)
    label = ("" if ref.get("tokens_exact") else " (estimated from a sample)" if ref.get("tokens_sampled")
             else " (estimate)")
    for key in ("id", "tool", "kind", "content_type", "bytes", "lines", "chars", "items", "tokens",
                "shown_tokens", "session", "namespace", "pinned", "created_at", "expires_at", "sha256"):
        if meta.get(key) is not None:
            note = label if key == "tokens" else " (estimate)" if key == "shown_tokens" and label else ""
            typer.echo(f"{key:>13}: {_cell(meta[key])}{note}")
    if meta.get("args"):
        typer.echo(f"{'args':>13}: {dumps(meta['args']).decode()}")
    if ref.get("preview"):
        typer.echo("\npreview the model saw:\n" + ref["preview"])


@app.command("ls")
def ls(limit: int = typer.Option(50, help="Rows per page."),
       cursor: Optional[str] = typer.Option(None, help="next_cursor from a previous page."),
       tool: Optional[str] = None, session: Optional[str] = None, kind: Optional[str] = None,
       text: Optional[str] = typer.Option(None, help="Text to find in tool, args, session or id."),
       as_json: bool = typer.Option(False, "--json")) -> None:
    """List stored artifacts, newest first. Example: offload ls --tool grep --json"""
    rows, next_cursor = state.off.list(limit=limit, cursor=cursor, tool=tool, session=session, kind=kind, text=text)
    if as_json:
        return _print_json({"items": rows, "next_cursor": next_cursor})
    filters = {"tool": tool, "session": session, "kind": kind, "text": text}
    if not rows:
        typer.echo("No artifacts match." if cursor or any(v is not None for v in filters.values())
                   else "No artifacts stored.")
        return
    typer.echo(f"{'ID':<22} {'CREATED':<20} {'TOOL':<16} {'KIND':<7} {'BYTES':>13} {'~TOKENS':>11}")
    for r in rows:
        pin = " pinned" if r["pinned"] else ""
        typer.echo(f"{r['id']:<22} {r['created_at'][:19]:<20} {_cell(r['tool'])[:16]:<16} {r['kind']:<7} "
                   f"{r['bytes']:>13,} {r['tokens']:>11,}{pin}")
    if next_cursor:  # the same listing's next page: the cursor holds where, not what
        typer.echo(f"more: offload ls{_options(limit=limit, **filters)} --cursor {next_cursor}")


@app.command()
def rm(artifact_ids: list[str] = typer.Argument(..., help="Ids to delete.")) -> None:
    """Delete artifacts (content shared with other artifacts stays). Example: offload rm art_…"""
    _check_all_exist(artifact_ids)
    for artifact_id in artifact_ids:
        state.off.delete(artifact_id)
        typer.echo(f"deleted {artifact_id}")


def _check_all_exist(artifact_ids: list[str]) -> None:
    """All or nothing: an unknown id fails before any artifact is changed, and says so; one given twice is
    done once."""
    artifact_ids[:] = dict.fromkeys(artifact_ids)
    for artifact_id in artifact_ids:
        try:
            state.off.get(artifact_id)
        except OffloadError as exc:
            _fail(exc, f"None of the {len(artifact_ids)} artifacts was changed." if len(artifact_ids) > 1 else None)


@app.command()
def gc(as_json: bool = typer.Option(False, "--json")) -> None:
    """Remove expired artifacts, then the least recently used until under quota. Example: offload gc"""
    report = state.off.gc().to_dict()
    if as_json:
        return _print_json(report)
    typer.echo(f"expired {report['expired']}, evicted {report['evicted']}, removed {report['contents_removed']} "
               f"contents ({report['bytes_freed']:,} bytes); store now holds {report['total_bytes']:,} bytes")


@app.command()
def verify(as_json: bool = typer.Option(False, "--json")) -> None:
    """Re-hash all content, check item indexes; exit 1 if any is damaged or missing. Example: offload verify"""
    problems = state.off.verify()
    if as_json:
        _print_json({"ok": not problems, "problems": problems})
    elif not problems:
        typer.echo("All stored content matches its sha256.")
    else:
        for p in problems:
            users = ", ".join(p["artifacts"]) or "no artifact"
            if p.get("problem") == "missing":
                typer.echo(f"MISSING content {p['sha256'][:16]}… used by {users}: its bytes are not in the store")
            elif p.get("problem") == "items":
                typer.echo(f"DAMAGED item index of content {p['sha256'][:16]}… used by {users}: {p['why']}")
            else:
                typer.echo(f"MISMATCH content {p['sha256'][:16]}… ({p['bytes']:,} bytes stored as "
                           f"{p['actual_bytes']:,}) used by {users}")
    if problems:
        raise typer.Exit(1)


# -- the companion tools ------------------------------------------------------------------------


def _since(value: str | None):
    """ISO date/time, or a relative age like 30m, 2h, 7d."""
    import datetime as dt
    import re

    if value is None:
        return None
    try:
        match = re.fullmatch(r"(\d+)\s*([smhd])", value.strip())
        if match:
            seconds = int(match[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
            return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(seconds=seconds)
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed.astimezone(dt.timezone.utc).replace(tzinfo=None) if parsed.tzinfo else parsed
    except (ValueError, OverflowError):  # OverflowError: an age or a date past the years 1-9999
        raise typer.BadParameter(f"{value!r}: use an ISO date (2026-12-01, 2026-12-01T10:00) or an age (30m, 2h, 7d) "
                                 "within the years 1-9999") from None


@app.command("slice")
def slice_(artifact_id: str,
           offset: int = typer.Option(0, help="0-based start; negative counts from the end (-40: the last 40)."),
           limit: Optional[int] = typer.Option(None, help="How many units (default: as many as fit the budget)."),
           unit: str = typer.Option("lines", help="lines, chars, bytes or items."),
           path: Optional[str] = typer.Option(None, help="JMESPath of the array to page (unit items)."),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Print a bounded page of an artifact. Example: offload slice art_… --offset -40"""
    page = state.off.fetch_slice(artifact_id, offset=offset, limit=limit, unit=unit, path=path)
    if as_json:
        return _print_json(page)
    typer.echo(page["content"])
    span = (f"{page['unit']} {page['offset']:,}–{page['offset'] + page['returned'] - 1:,}" if page["returned"]
            else f"no {page['unit']} at offset {page['offset']:,}")
    typer.echo(f"— {span} of {page['total']:,}" + (f"; {page['cut']}" if page.get("cut") else ""), err=True)
    if page.get("note"):
        typer.echo(f"— {page['note']}", err=True)
    if page["next"]:
        typer.echo(f"— next: {_slice_command(page['next'])}", err=True)


def _slice_command(call: dict[str, Any]) -> str:
    """The command line of a `next` call, built from all of its arguments so the hint cannot drift."""
    options = [f"--{key} {shlex.quote(str(value))}" for key, value in call.items() if key != "artifact_id"]
    return " ".join(["offload slice", call["artifact_id"], *options])


@app.command()
def query(artifact_id: Optional[str] = typer.Argument(None, help="Artifact to query (omit with --all)."),
          jmespath: Optional[str] = typer.Option(None, "--jmespath", "-j", help="JMESPath over JSON / NDJSON rows."),
          grep: Optional[str] = typer.Option(None, "--grep", "-g", help="Regular expression over lines."),
          sql: Optional[str] = typer.Option(None, "--sql", "-s", help="DuckDB SQL over the table `artifact`."),
          offset: int = 0, limit: Optional[int] = None,
          context: int = typer.Option(0, help="Lines of context around grep matches."),
          all_: bool = typer.Option(False, "--all", help="Run over every matching artifact (JSON lines)."),
          tool: Optional[str] = typer.Option(None, help="With --all: only artifacts of this tool."),
          since: Optional[str] = typer.Option(None, help="With --all: stored since (ISO date or 30m/2h/7d)."),
          as_json: bool = typer.Option(False, "--json")) -> None:
    """Extract from an artifact with JMESPath, grep or SQL.

    Example: offload query art_… --jmespath "items[?status=='error'].id"
    Batch:   offload query --all --tool api --since 1d --jmespath "length(items)"
    """
    kwargs = dict(jmespath=jmespath, grep=grep, sql=sql, offset=offset, limit=limit, context=context)
    if all_:
        if artifact_id is not None:  # it was ignored: every artifact was queried
            raise typer.BadParameter(f"give an artifact id ({artifact_id}) or --all, not both")
        if sum(expression is not None for expression in (jmespath, grep, sql)) != 1:  # once, not per artifact
            raise typer.BadParameter("give exactly one of --jmespath, --grep or --sql")
        return _query_all(tool, _since(since), kwargs)
    if tool is not None or since is not None:
        raise typer.BadParameter("--tool and --since choose the artifacts of --all; with an artifact id, omit them")
    if artifact_id is None:
        raise typer.BadParameter("give an artifact id, or --all")
    result = state.off.query_artifact(artifact_id, **kwargs)
    if as_json:
        return _print_json(result)
    if "result" in result:
        value = result["result"]
        if isinstance(value, list) and result["kind"] == "grep":
            typer.echo("\n".join(value))
        else:
            typer.echo(dumps(value, indent=True).decode())
        typer.echo(f"— {result['count']:,} result(s)" + (f"; next: --offset {result['next_offset']}"
                                                       if result["next_offset"] is not None else ""), err=True)
    else:
        typer.echo(result["text"])


def _query_all(tool: str | None, since, kwargs: dict) -> None:
    cursor, tried, answered = None, 0, 0
    while True:
        rows, cursor = state.off.list(tool=tool, since=since, limit=200, cursor=cursor)
        for row in rows:
            tried += 1
            try:
                out = state.off.query_artifact(row["id"], **kwargs)
                answered += 1
                line = {"artifact_id": row["id"], "tool": row["tool"], "ok": True, **{
                    k: out.get(k) for k in ("result", "count", "next_offset")}}
                if "result" not in out:
                    line["derived_artifact_id"] = out.get("artifact_id")
            except OffloadError as exc:
                line = {"artifact_id": row["id"], "tool": row["tool"], "ok": False, "error": exc.model_message()}
            sys.stdout.write(dumps(line).decode() + "\n")
        if cursor is None:
            if not tried:
                typer.echo("No artifacts match.", err=True)
            if tried and not answered:  # an expression no artifact takes (a bad regex): not a success
                typer.echo(f"error: the query failed on all {tried:,} artifacts (see each line's error)", err=True)
                raise typer.Exit(2)
            return


@app.command()
def extracts(artifact: Optional[str] = typer.Option(None, "--artifact", help="Only extracts of this artifact."),
             since: Optional[str] = None,
             limit: Optional[int] = typer.Option(None, help="Rows per page (default: all of them)."),
             cursor: Optional[str] = typer.Option(None, help="next_cursor from a previous page."),
             as_json: bool = typer.Option(False, "--json")) -> None:
    """List the extract log, oldest first: every slice and query, with its result hash.

    Example: offload extracts --since 1d
    """
    if limit is None:
        rows, next_cursor = state.off.extracts(artifact_id=artifact, since=_since(since), cursor=cursor), None
    else:
        rows, next_cursor = state.off.extracts_page(limit, cursor, artifact_id=artifact, since=_since(since))
    if artifact is not None and not rows:
        state.off.get(artifact)  # an id no artifact has: "not found", exit 1, not an empty log
    if as_json:
        return _print_json({"items": rows, "next_cursor": next_cursor})
    for r in rows:
        typer.echo(f"{r['id']}  {r['created_at'][:19]}  {r['artifact_id']}  {r['op']:<8} "
                   f"{_cell(r['expression'] or '')[:60]:<60}  {r['result_bytes']:>10,} B  {r['duration_ms']:.1f} ms")
    if next_cursor:
        typer.echo(f"more: offload extracts{_options(artifact=artifact, since=since, limit=limit)} --cursor {next_cursor}")


@app.command()
def rerun(extract: Optional[str] = typer.Option(None, "--extract", help="Rerun this extract only."),
          artifact: Optional[str] = typer.Option(None, "--artifact", help="Rerun the extracts of this artifact."),
          since: Optional[str] = None, as_json: bool = typer.Option(False, "--json")) -> None:
    """Re-execute logged extracts offline and compare results; exit 1 if any changed or failed.

    Example: offload rerun --since 1d
    """
    results = state.off.rerun(extract_id=extract, artifact_id=artifact, since=_since(since))
    if extract is not None and not results:
        raise ExtractNotFound(extract)
    if artifact is not None and not results:
        state.off.get(artifact)  # an id no artifact has: "not found", exit 1, not "0 unchanged"
    if as_json:
        _print_json({"results": results})
    else:
        for r in results:
            typer.echo(f"{r['status']:<9} {r['extract_id']}  {r['artifact_id']}  {r['kind']:<8} "
                       f"{_cell(r['expression'] or '')[:50]}" + (f"  ({r['detail']})" if r["detail"] else ""))
        counts = {s: sum(r["status"] == s for r in results) for s in ("unchanged", "changed", "failed")}
        typer.echo(", ".join(f"{n} {s}" for s, n in counts.items()))
    if any(r["status"] != "unchanged" for r in results):
        raise typer.Exit(1)


@app.command()
def demo() -> None:
    """Offload two real oversized tool calls from this machine, then slice and query them. Example: offload demo"""
    from .demo import run

    run(state.off, typer.echo)


# -- attaching to agents ------------------------------------------------------------------------


@app.command("mcp")
def mcp_(http: bool = typer.Option(False, "--http", help="Serve streamable HTTP at /mcp instead of stdio."),
         host: str = typer.Option("127.0.0.1", help="With --http: address to bind; off loopback a token is required."),
         port: int = typer.Option(8765, min=1, max=65535, help="With --http: port to listen on."),
         token: Optional[str] = typer.Option(None, envvar="OFFLOAD_MCP_TOKEN",
                                             help="With --http: bearer token every request must carry."),
         allow_origin: list[str] = typer.Option([], "--allow-origin",
                                                help="With --http: a browser Origin to accept besides loopback.")) -> None:
    """Serve fetch_slice and query_artifact to MCP clients (stdio, or streamable HTTP with --http).

    Example: offload --url sqlite:///path/to/store.db mcp
    """
    from .adapters.mcp_server import serve

    if not http:
        _stdin("over stdio the MCP client's messages come in there (or serve --http)")
    serve(state.off, http=http, host=host, port=port, token=token, allowed_origins=allow_origin)


# -- browsing and moving the store --------------------------------------------------------------


@app.command()
def pin(artifact_ids: list[str] = typer.Argument(..., help="Ids to keep through TTL expiry and quota eviction.")) -> None:
    """Pin artifacts so gc keeps them. Example: offload pin art_…"""
    _check_all_exist(artifact_ids)
    for artifact_id in artifact_ids:
        state.off.pin(artifact_id, True)
        typer.echo(f"pinned {artifact_id}")


@app.command()
def unpin(artifact_ids: list[str] = typer.Argument(..., help="Ids to release.")) -> None:
    """Unpin artifacts (they expire and can be evicted again). Example: offload unpin art_…"""
    _check_all_exist(artifact_ids)
    for artifact_id in artifact_ids:
        state.off.pin(artifact_id, False)
        typer.echo(f"unpinned {artifact_id}")


@app.command()
def stats(as_json: bool = typer.Option(False, "--json")) -> None:
    """What offload kept out of the context, in total, per tool and per session. Example: offload stats"""
    data = state.off.stats()
    if as_json:
        return _print_json(data)
    typer.echo(f"{data['artifacts']:,} artifacts, {data['bytes']:,} bytes; ~{data['tokens_saved']:,} tokens kept out "
               f"of the context (estimate); {data['extracts']:,} extracts")
    for title, key in (("per tool", "by_tool"), ("per session", "by_session")):
        typer.echo(f"\n{title}:")
        for row in data[key][:20]:
            typer.echo(f"  {_cell(row['name'] or '-')[:30]:<30} {row['artifacts']:>7,} artifacts "
                       f"{row['bytes']:>15,} B  ~{row['tokens_saved']:>13,} tokens saved")


def _progress_bar(total: int, label: str):
    return typer.progressbar(length=total, label=label, file=sys.stderr, show_pos=False, show_percent=True)


@app.command("export")
def export_(path: Path = typer.Argument(..., help="Archive file to write (a tar)."),
            as_json: bool = typer.Option(False, "--json")) -> None:
    """Write this namespace's artifacts, content and extract log to a portable archive.

    Example: offload export backup.tar && offload --url postgresql://… import backup.tar
    """
    total = state.off.stats()["bytes"]
    with _progress_bar(total, "exporting") as bar:
        manifest = state.off.export_archive(path, progress=bar.update)
    _print_json(manifest) if as_json else typer.echo(
        f"exported {manifest['artifacts']:,} artifacts, {manifest['contents']:,} contents "
        f"({manifest['bytes']:,} bytes) and {manifest['extracts']:,} extracts to {path}")


@app.command("import")
def import_(path: Path = typer.Argument(..., help="Archive written by export."),
            as_json: bool = typer.Option(False, "--json")) -> None:
    """Load an archive into this store and namespace; ids already present are skipped. Example: offload import backup.tar"""
    with _progress_bar(path.stat().st_size, "importing") as bar:
        result = state.off.import_archive(path, progress=bar.update)
    done = result["imported"]
    if as_json:
        return _print_json(result)
    typer.echo(f"imported {done['artifacts']:,} artifacts, {done['contents']:,} contents and {done['extracts']:,} "
               f"extracts ({done['skipped']:,} already present)")
    if done["skipped_elsewhere"]:
        held = ", ".join(f"{count:,} in namespace {name!r}" for name, count in done["skipped_elsewhere"].items())
        typer.echo(f"note: {held} of this store, not copied: an artifact id is the store's, so an archive moves a "
                   "namespace to another store, not within one", err=True)


@app.command()
def serve(host: str = typer.Option("127.0.0.1", help="Address to bind; off loopback a token is required."),
          port: int = typer.Option(8765, min=1, max=65535, help="Port to listen on."),
          token: list[str] = typer.Option([], "--token", help="Bearer token (TOKEN or TOKEN=NAMESPACE to scope it).")
          ) -> None:
    """Serve the HTTP API (/api, OpenAPI at /docs) and the web page (/). Example: offload serve --port 8765"""
    from .api.server import serve as run

    tokens = {t.split("=", 1)[0]: (t.split("=", 1)[1] if "=" in t else None) for t in token} or None
    run(state.off, host=host, port=port, tokens=tokens)


@app.command("proxy")
def proxy(command: Optional[list[str]] = typer.Argument(None, help="The upstream MCP server's command, after --."),
          upstream_url: Optional[str] = typer.Option(None, "--upstream-url",
                                                     help="A streamable-HTTP MCP server to front instead of a command."),
          header: list[str] = typer.Option([], "--header", help="With --upstream-url: 'Name: value' (repeatable)."),
          limit: list[str] = typer.Option([], "--limit", help="TOOL=TOKENS: an upstream tool's budget; TOOL may be "
                                                              "a name, a budget key or a glob like 'git_*'."),
          alias: list[str] = typer.Option([], "--alias", help="PATTERN=KEY: budget tools matching PATTERN (a name "
                                                              "or glob) like KEY (read, shell, grep, glob, …)."),
          timeout: float = typer.Option(120.0, help="Seconds an upstream request may take before the client gets a "
                                                    "timeout error (progress restarts the clock; 0: no limit)."),
          session: Optional[str] = typer.Option(None, help="Session id for stored results (default: one per run).")
          ) -> None:
    """Put offload in front of an MCP server: big tool results become references; adds fetch_slice, query_artifact.

    Example: offload proxy --limit git_show=2000 -- uvx mcp-server-git --repository .
    """
    from .adapters.mcp_proxy import budget_settings, parse_headers, serve

    _stdin("the MCP client's messages come in there: run the proxy as the client's server command")
    off = Offloader(state.url, namespace=state.namespace, **budget_settings(state.off.settings, limit, alias))
    raise typer.Exit(serve(off, command or [], upstream_url=upstream_url, headers=parse_headers(header),
                           timeout=timeout, session=session))
