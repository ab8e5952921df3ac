"""`offload proxy`: offload in front of any MCP server, with no code and no change to the client.

The client starts `offload proxy -- <the server's command>` (or `--upstream-url URL`) where it started the
server. The proxy relays JSON-RPC both ways, replaces each tool result over its budget with a reference,
and adds fetch_slice and query_artifact; everything else passes through unchanged. The parts are in
`offload.adapters.proxy` (relay, upstreams, results).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import signal
import sys
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import InvalidArgument
from ..settings import MIN_LIMIT, too_small
from .mcp_server import INSTRUCTIONS  # the same words as `offload mcp`
from .proxy import HttpUpstream, Relay, StdioUpstream, StdoutWriter, serve_stdio

if TYPE_CHECKING:
    from ..offloader import Offloader
    from ..settings import Settings

DEFAULT_TIMEOUT = 120.0



def budget_settings(base: "Settings", limits: Iterable[str] = (), aliases: Iterable[str] = ()) -> dict[str, Any]:
    """Settings for `--limit TOOL=TOKENS` and `--alias PATTERN=KEY`, merged over those already configured.

    A --limit name may be a glob (`git_*=2000`): it becomes an alias of itself, so every tool it matches
    gets that budget.
    """
    merged_limits = dict(base.limits)
    merged_aliases = dict(base.aliases)
    for name, value in _pairs(limits, "--limit", "TOOL=TOKENS"):
        try:
            tokens = int(value)
        except ValueError:
            raise InvalidArgument(f"--limit {name}={value}: the budget must be a whole number of tokens") from None
        if tokens < MIN_LIMIT:
            raise InvalidArgument(f"--limit {name}={value}: {too_small(MIN_LIMIT)}")
        merged_limits[name] = tokens
        if any(ch in name for ch in "*?["):
            merged_aliases[name] = name
    for pattern, key in _pairs(aliases, "--alias", "PATTERN=KEY"):
        merged_aliases[pattern] = key.lower()
    return {"limits": merged_limits, "aliases": merged_aliases}


def _pairs(values: Iterable[str], option: str, form: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise InvalidArgument(f"{option} {value!r}: expected {form}")
        pairs.append((name.strip().lower(), rest.strip()))
    return pairs


def parse_headers(values: Iterable[str]) -> dict[str, str]:
    headers = {}
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip():
            raise InvalidArgument(f"--header {value!r}: expected 'Name: value'")
        headers[name.strip()] = rest.strip()
    return headers


def serve(off: "Offloader", command: list[str], *, upstream_url: str | None = None,
          headers: dict[str, str] | None = None, timeout: float | None = DEFAULT_TIMEOUT,
          session: str | None = None) -> int:
    """The body of `offload proxy`: relay our stdin/stdout to the upstream until the client closes stdin."""
    if bool(command) == bool(upstream_url):
        raise InvalidArgument("give the upstream MCP server either as a command after -- "
                              "(offload proxy -- mcp-server-git) or with --upstream-url, not both")
    if upstream_url and not upstream_url.startswith(("http://", "https://")):
        raise InvalidArgument(f"--upstream-url {upstream_url!r}: expected an http:// or https:// URL")
    if timeout is not None and not (0 <= timeout < math.inf):  # nan passed `< 0` and timed every request out
        raise InvalidArgument(f"--timeout must be 0 (no timeout) or a number of seconds, not {timeout}")
    real_stdout = sys.stdout
    out = real_stdout.buffer
    sys.stdout = sys.stderr  # stdout carries JSON-RPC only: a stray print() must not corrupt it
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    upstream = (HttpUpstream(upstream_url, headers=headers, timeout=timeout or 120.0) if upstream_url
                else StdioUpstream(command))
    writer = StdoutWriter(out)
    relay = Relay(off, upstream, writer, timeout=timeout or None, instructions=INSTRUCTIONS,
                  session=session or f"proxy-{secrets.token_hex(4)}")
    try:
        asyncio.run(_main(relay))
    except (OSError, ImportError) as exc:  # the upstream could not be started at all
        print(f"offload proxy: could not start the upstream MCP server ({upstream.label}): {exc}",
              file=sys.stderr)
        return 2
    finally:
        writer.close()
        sys.stdout = real_stdout
    return 0


async def _main(relay: Relay) -> None:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, task.cancel)  # so the upstream is stopped, not orphaned
    with contextlib.suppress(asyncio.CancelledError):
        await serve_stdio(relay)
