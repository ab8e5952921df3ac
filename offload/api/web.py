"""The web page: server-rendered HTML over the same Offloader methods as the JSON API, plus a little script.

A page only ever shows bounded things: a listing page, a reference, a shape, one slice page. The artifact
view's script (static/artifact.js) pages, queries and reads the extract log through the JSON API. Every
value is escaped: Jinja autoescape here, textContent in the script; no inline script or style (see the CSP).
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import math
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, quote, urlencode

import jinja2
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from ..errors import ArtifactExpired, InvalidArgument, OffloadError
from ..jsontext import dumps
from ..reference import KIND_LABELS
from ..tools.pages import DEFAULT_LIMITS
from ..utf8 import carriable
from .app import offloader_for
from .params import is_plain_integer

HERE = Path(__file__).parent
PAGE_SIZE = 50  # artifacts per listing page
KINDS = tuple(KIND_LABELS)
TEXT_UNITS = ("lines", "chars", "bytes")
LOGIN_BODY_LIMIT = 4096

web_router = APIRouter(include_in_schema=False)


def mount_static(app: FastAPI) -> None:
    """Serve offload/api/static at /static (the page's only scripts and styles, as the CSP requires)."""
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")


# -- humanized numbers (the exact figure goes in a title attribute) ------------------------------

def human_bytes(n: int | None) -> str:
    if n is None:
        return "–"
    if n < 1000:
        return f"{n} B"
    exponent = min(int(math.log(n, 1000)), 4)
    value = n / 1000 ** exponent
    if round(value, 1) >= 1000 and exponent < 4:  # 999,950 bytes is "1.0 MB", not "1000.0 kB"
        exponent, value = exponent + 1, value / 1000
    return f"{value:.1f} {('B', 'kB', 'MB', 'GB', 'TB')[exponent]}"


def human_count(n: int | None) -> str:
    if n is None:
        return "–"
    if abs(n) < 10_000:
        return f"{n:,}"
    # 999,960 is "1.0M", not "1000.0k"
    size, suffix = next((s, x) for s, x in ((1e9, "B"), (1e6, "M"), (1e3, "k")) if abs(n) >= s * 0.9995)
    return f"{n / size:.1f}{suffix}"


def figure(value: Any) -> str:
    """A number from a shape (a min or max) with thousands separators; anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}" if abs(value) < 1e15 else f"{value:g}"


def exact(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"


def _parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.rstrip("Z"))


def human_time(value: str | None, now: dt.datetime | None = None) -> str:
    """'3 min ago', 'in 6 d', or a date for anything older than a month."""
    when = _parse_time(value)
    if when is None:
        return "–"
    now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    seconds = (now - when).total_seconds()
    ahead, seconds = seconds < 0, abs(seconds)
    if seconds > 30 * 86400:
        return when.strftime("%Y-%m-%d")
    size, unit = next(((size, unit) for size, unit in ((86400, "d"), (3600, "h"), (60, "min")) if seconds >= size),
                      (1, "s"))
    amount = f"{int(seconds // size)} {unit}"
    return f"in {amount}" if ahead else f"{amount} ago"


def exact_time(value: str | None) -> str:
    when = _parse_time(value)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC") if when else ""


def args_summary(args: Any, width: int = 90) -> str:
    """A tool call's arguments on one line: `pattern=require path=.`."""
    if not args:
        return ""
    if isinstance(args, dict):
        text = " ".join(f"{key}={value if isinstance(value, str) else dumps(value).decode()}"
                        for key, value in args.items() if value is not None)
    else:
        text = dumps(args).decode()
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def hexdump(data: bytes, start: int) -> str:
    """Offset, 16 bytes in hex, and their printable ASCII, per row (artifact.js draws the same)."""
    rows = []
    for at in range(0, len(data), 16):
        row = data[at:at + 16]
        hexes = " ".join(f"{b:02x}" for b in row)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        rows.append(f"{start + at:08x}  {hexes:<47}  {text}")
    return "\n".join(rows)


def page_label(page: dict[str, Any]) -> str:
    """'lines 200–399 of 60,000' (0-based, as every offset in offload); artifact.js draws the same."""
    unit, offset, returned, total = page["unit"], page["offset"], page["returned"], page["total"]
    if returned == 0 and page.get("cut"):
        return f"{unit[:-1]} {offset:,} (cut) of {total:,}"
    if returned == 0:
        return f"no {unit} at {offset:,} of {total:,}"
    return f"{unit} {offset:,}–{offset + returned - 1:,} of {total:,}"


_env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                          trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
_env.filters.update(bytes=human_bytes, count=human_count, exact=exact, figure=figure, ago=human_time, when=exact_time,
                    args=args_summary)
_env.globals.update(KIND_LABELS=KIND_LABELS, page_label=page_label)


# -- rendering ------------------------------------------------------------------------------------

def _href_for(request: Request) -> Callable[..., str]:
    """Links that keep the namespace the page was asked for (a scoped token needs none: it is the scope)."""
    namespace = request.query_params.get("namespace")

    def href(target: str, /, **params: Any) -> str:
        kept = {k: v for k, v in params.items() if v not in (None, "")}
        if namespace:
            kept["namespace"] = namespace
        return target + ("?" + urlencode(kept) if kept else "")

    return href


def _render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    context.update(request=request, href=_href_for(request), namespace=request.query_params.get("namespace") or "",
                   scope=getattr(request.state, "namespace", None))
    # a stored text may hold a lone surrogate (a JSON escape such as "\\ud800"), which UTF-8 cannot
    # carry: shown as that escape (the page failed with a 500)
    return HTMLResponse(carriable(_env.get_template(name).render(context)), status_code=status)


def _error_page(request: Request, exc: OffloadError) -> HTMLResponse:
    titles = {404: "Not found", 410: "Gone", 422: "Not understood"}
    return _render(request, "error.html", status=exc.status, title=titles.get(exc.status, "Something went wrong"),
                   message=exc.model_message(), code=exc.status, expired=isinstance(exc, ArtifactExpired))


def html_errors(handler: Callable[..., HTMLResponse]) -> Callable[..., HTMLResponse]:
    """Offload's errors become a friendly page with their status (404 unknown, 410 expired, 422 bad input)."""

    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> HTMLResponse:
        try:
            return handler(*args, **kwargs)
        except OffloadError as exc:
            return _error_page(kwargs["request"], exc)

    return wrapper


# -- pages ----------------------------------------------------------------------------------------

GROUPS_SHOWN = 50  # tools and sessions a page lists (the filters' choices, the stats tables); the rest summed


@web_router.get("/", response_class=HTMLResponse)
@html_errors
def artifact_list(request: Request, tool: str | None = None, session: str | None = None, kind: str | None = None,
                  text: str | None = None, cursor: str | None = None) -> HTMLResponse:
    off = offloader_for(request)
    filters = {"tool": tool or None, "session": session or None, "kind": kind or None, "text": text or None}
    rows, next_cursor = off.list(limit=PAGE_SIZE, cursor=cursor or None, **filters)
    stats = off.stats(GROUPS_SHOWN)
    return _render(request, "list.html", rows=rows, next_cursor=next_cursor, filters=filters, paged=bool(cursor),
                   stats=stats, kinds=KINDS, tools=[g["name"] for g in stats["by_tool"]],
                   sessions=[g["name"] for g in stats["by_session"] if g["name"]])


@web_router.get("/stats", response_class=HTMLResponse)
@html_errors
def stats_page(request: Request) -> HTMLResponse:
    stats = offloader_for(request).stats(GROUPS_SHOWN)
    return _render(request, "stats.html", stats=stats,
                   top_tool=max((g["tokens_saved"] for g in stats["by_tool"]), default=0),
                   top_session=max((g["tokens_saved"] for g in stats["by_session"]), default=0))


@web_router.get("/artifacts/{artifact_id}", response_class=HTMLResponse)
@html_errors
def artifact_view(request: Request, artifact_id: str, unit: str | None = None, offset: str = "0",
                  limit: str | None = None, path: str | None = None) -> HTMLResponse:
    off = offloader_for(request)
    meta = off.get(artifact_id)
    ref = off.reference(artifact_id)
    units = _units(meta)
    unit = unit if unit in ("lines", "chars", "bytes", "items") else units[0]
    page, page_error = None, None
    try:  # one bounded page (fetch_slice cuts it to its token budget), never the whole artifact
        # offset and limit come in as text, so that a mistyped one is said on the page, not in JSON
        offset, limit = _integer("offset", offset), _integer("limit", limit or None)
        page = off.fetch_slice(artifact_id, offset=offset, limit=limit, unit=unit, path=path or None,
                               logged=not getattr(request.state, "head", False))  # a HEAD reads no page
    except InvalidArgument as exc:
        page_error = exc.model_message()
    request_args = {"unit": unit, "offset": offset, **({"limit": limit} if limit is not None else {}),
                    **({"path": path} if path else {})}
    return _render(request, "artifact.html", meta=meta, ref=ref, units=units, unit=unit, page=page,
                   page_error=page_error, page_lines=_page_lines(page), page_hex=_page_hex(page),
                   links=_pager_links(_href_for(request), artifact_id, unit, page, path or None,
                                      limit if isinstance(limit, int) else None),
                   request_json=dumps(request_args).decode(),  # for the script, in data- attributes
                   next_json=dumps(page["next"] if page else None).decode(),
                   query_ops=_query_ops(meta["kind"]), hints=_hints(ref), saved=meta["tokens"] - meta["shown_tokens"])


def _integer(name: str, text: str | None) -> Any:
    """A page argument from the address as an integer (None when absent), in plain decimal digits as the
    JSON API takes it (int() took "1_0" and "+10" as 10)."""
    if text is None:
        return None
    if not is_plain_integer(text):
        raise InvalidArgument(f"{name} must be a whole number (got {text!r}) in plain decimal digits, such as 10; "
                              "a negative offset counts from the end.")
    return int(text)


def _units(meta: dict[str, Any]) -> tuple[str, ...]:
    """The units this artifact pages in, the most natural first."""
    if meta["kind"] == "binary":
        return ("bytes",)
    if meta.get("items") is not None:
        return ("items", *TEXT_UNITS)
    return TEXT_UNITS


def _query_ops(kind: str) -> tuple[str, ...]:
    """Query languages that apply to this kind, the most useful first."""
    if kind in ("json", "ndjson"):
        return ("jmespath", "sql", "grep")
    if kind == "csv":
        return ("sql", "grep")
    if kind == "binary":
        return ()
    return ("grep",)


def _hints(ref: dict[str, Any]) -> list[dict[str, str]]:
    results = ref.get("hint_results") or {}
    return [{"expression": h, "result": results.get(h) or ""} for h in ref.get("hints") or []]


def _pager_links(href: Callable[..., str], artifact_id: str, unit: str, page: dict[str, Any] | None,
                 within: str | None, limit: int | None) -> dict:
    """Plain links for the pager, so paging works without the script (which keeps them current). Each
    pages the array the page is of (`within`, a JMESPath), `limit` at a time: without it, End of a
    filtered array's pages went to the end of the main array."""
    path = "/artifacts/" + quote(artifact_id, safe="")
    size = (page or {}).get("returned") or DEFAULT_LIMITS[unit]
    offset = (page or {}).get("offset", 0)
    following = (page or {}).get("next")
    return {
        "start": href(path, unit=unit, offset=0, limit=limit, path=within),
        "prev": href(path, unit=unit, offset=max(offset - size, 0), limit=limit, path=within),
        "next": href(path, unit=following["unit"], offset=following["offset"], limit=following.get("limit"),
                     path=following.get("path"))  # a path carries the way back from a cut line or item
        if following else None,
        "end": href(path, unit=unit, offset=-size, limit=limit, path=within),
    }


def _page_lines(page: dict[str, Any] | None) -> list[tuple[int, str]] | None:
    """(line number, text) rows for a page of lines; a line cut by the budget keeps its own number."""
    if page is None or page["unit"] != "lines" or page.get("encoding") == "base64":
        return None
    return list(enumerate(page["content"].split("\n"), start=page["offset"])) if page["content"] else []


def _page_hex(page: dict[str, Any] | None) -> str | None:
    if page is None or page.get("encoding") != "base64":
        return None
    return hexdump(base64.b64decode(page["content"]), page["offset"])


# -- signing in with a token (a browser cannot send the Authorization header by itself) ----------

@web_router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    if not request.app.state.config.tokens:
        return RedirectResponse("/", status_code=303)
    return _render(request, "login.html", failed=False)


@web_router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> HTMLResponse:
    config = request.app.state.config
    if not config.tokens:
        return RedirectResponse("/", status_code=303)
    body = b""
    async for block in request.stream():
        body += block
        if len(body) > LOGIN_BODY_LIMIT:
            return _render(request, "login.html", status=413, failed=True)
    token = (parse_qs(body.decode("utf-8", errors="replace")).get("token") or [""])[0].strip()
    known, _scope = config.scope_of(token or None)
    if not known:
        return _render(request, "login.html", status=401, failed=True)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie("offload_token", token, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
    return response
