"""Which store a CLI command acts on, and the refusal of a store file that is not there: commands that
read or change what a store holds must not create one (a mistyped --url left an empty store behind)."""

from __future__ import annotations

import typer

from .offloader import Offloader

# Commands that only read or change what a store holds: on a store file that is not there, they say so
# instead of creating an empty one (a mistyped --url left a new store behind, and `ls` printed "No
# artifacts yet" for it).
NEED_A_STORE = {"cat", "show", "ls", "rm", "gc", "verify", "slice", "query", "extracts", "rerun", "pin", "unpin",
                "stats", "export"}


class State:
    url: str | None = None
    namespace: str | None = None
    existing: bool = False  # the command needs the store to be there already (`NEED_A_STORE`)
    _off: Offloader | None = None

    @property
    def off(self) -> Offloader:
        if self._off is None:
            if self.existing and self.url:
                refuse_missing(self.url)
            self._off = Offloader(self.url, namespace=self.namespace)
        return self._off


def refuse_missing(url: str) -> None:
    """Exit with what to do when `url` (given, not the default location) names a store file that is absent."""
    from sqlalchemy.engine import make_url

    from .store.engines import database_file, resolve_url

    try:
        path = database_file(make_url(resolve_url(url)))
    except Exception:  # noqa: BLE001 - a URL that does not parse: opening it says why
        return
    if path is not None and (not path.exists() or path.is_file() and path.stat().st_size == 0):
        empty = " (an empty file)" if path.exists() else ""
        typer.echo(f"error: there is no store at {path}{empty}. Check --url (or OFFLOAD_URL); `offload db upgrade` "
                   "creates an empty store there, `offload put` one holding its result.", err=True)
        raise typer.Exit(2)
