"""The `offload` command: thin wrappers over Offloader methods, people-readable by default, --json for scripts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import orjson
import typer

from .errors import OffloadError
from .offloader import Offloader

app = typer.Typer(help="Keep oversized tool results out of an LLM's context without losing them.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
db_app = typer.Typer(help="Store maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")


class State:
    url: str | None = None
    namespace: str | None = None
    _off: Offloader | None = None

    @property
    def off(self) -> Offloader:
        if self._off is None:
            self._off = Offloader(self.url, namespace=self.namespace)
        return self._off


state = State()


@app.callback()
def _main(url: Optional[str] = typer.Option(None, "--url", envvar="OFFLOAD_URL",
                                            help="Store URL or file; default: nearest .offload/, else per-user."),
          namespace: Optional[str] = typer.Option(None, "--namespace", "-n", envvar="OFFLOAD_NAMESPACE",
                                                  help="Namespace (tenant) to act in.")) -> None:
    state.url, state.namespace, state._off = url, namespace, None


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, default=str, option=orjson.OPT_INDENT_2).decode() + "\n")


def _fail(exc: OffloadError) -> None:
    typer.echo(f"error: {exc.model_message()}", err=True)
    raise typer.Exit(1 if exc.status in (404, 410) else 2)


def main() -> None:
    try:
        app()
    except OffloadError as exc:
        _fail(exc)


# -- setting up ---------------------------------------------------------------------------------


@app.command()
def init(path: Path = typer.Argument(Path("."), help="Project folder (default: here).")) -> None:
    """Create a project store in PATH/.offload/ (ignored by git). Example: offload init"""
    from .store.engines import STORE_FILE, init_project

    folder = init_project(path.resolve())
    Offloader(f"sqlite:///{folder / STORE_FILE}").store  # create and migrate now
    typer.echo(f"Initialized an offload store in {folder}")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Migrate the store's schema to the latest version. Example: offload db upgrade"""
    from .store.engines import make_engine, resolve_url, upgrade

    url = resolve_url(state.url)
    engine = make_engine(url)
    before, after = upgrade(engine)
    engine.dispose()
    typer.echo(f"{url}: {before or 'empty'} → {after}" if before != after else f"{url}: already at {after}")


# -- storing and reading ------------------------------------------------------------------------


@app.command()
def put(file: str = typer.Argument(..., help="File to store, or - for standard input."),
        tool: str = typer.Option(..., "--tool", "-t", help="Tool name the content came from (sets its budget)."),
        session: Optional[str] = typer.Option(None, help="Conversation id to tag it with."),
        as_json: bool = typer.Option(False, "--json", help="Print the reference as JSON.")) -> None:
    """Store a file whatever its size and print the reference a model would get.

    Example: grep -rn TODO . | offload put - --tool grep
    """
    data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    ref = state.off.put(data, tool=tool, session=session, args={"file": file})
    _print_json(ref.to_dict()) if as_json else typer.echo(ref.render())


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
    for key in ("id", "tool", "kind", "content_type", "bytes", "lines", "chars", "items", "tokens",
                "shown_tokens", "session", "namespace", "pinned", "created_at", "expires_at", "sha256"):
        if meta.get(key) is not None:
            typer.echo(f"{key:>13}: {meta[key]}")
    if meta.get("args"):
        typer.echo(f"{'args':>13}: {orjson.dumps(meta['args']).decode()}")
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
    if not rows:
        typer.echo("No artifacts stored.")
        return
    typer.echo(f"{'ID':<22} {'CREATED':<20} {'TOOL':<16} {'KIND':<7} {'BYTES':>13} {'TOKENS':>11}")
    for r in rows:
        pin = " pinned" if r["pinned"] else ""
        typer.echo(f"{r['id']:<22} {r['created_at'][:19]:<20} {r['tool'][:16]:<16} {r['kind']:<7} "
                   f"{r['bytes']:>13,} {r['tokens']:>11,}{pin}")
    if next_cursor:
        typer.echo(f"more: offload ls --cursor {next_cursor}")


@app.command()
def rm(artifact_ids: list[str] = typer.Argument(..., help="Ids to delete.")) -> None:
    """Delete artifacts (content shared with other artifacts stays). Example: offload rm art_…"""
    for artifact_id in artifact_ids:
        state.off.delete(artifact_id)
        typer.echo(f"deleted {artifact_id}")


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
    """Re-hash all stored content; exit 1 if any no longer matches. Example: offload verify"""
    problems = state.off.verify()
    if as_json:
        _print_json({"ok": not problems, "problems": problems})
    elif not problems:
        typer.echo("All stored content matches its sha256.")
    else:
        for p in problems:
            typer.echo(f"MISMATCH content {p['sha256'][:16]}… ({p['bytes']:,} bytes stored as "
                       f"{p['actual_bytes']:,}) used by {', '.join(p['artifacts']) or 'no artifact'}")
    if problems:
        raise typer.Exit(1)
