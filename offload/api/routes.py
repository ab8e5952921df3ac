"""The JSON API: thin handlers over Offloader methods, in the paths and shapes DESIGN.md fixes."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal, Optional

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ExtractNotFound, InvalidArgument, TooLarge
from .app import error_response, offloader_for
from .params import PLAIN_DIGITS, BodyInt, QueryInt, documented_guard, is_plain_integer

router = APIRouter(prefix="/api", dependencies=[Depends(documented_guard)])


class ErrorBody(BaseModel):
    error: str
    message: str
    status: int


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in ((401, "No or unknown token"), (403, "Token scoped to another namespace, or foreign Host"),
                       (404, "Unknown artifact"), (410, "Expired or deleted artifact"),
                       (422, "Invalid argument or query"))
}
# FastAPI answers a JSON body whose bytes are not text (latin-1, say) with a 400 before the route runs
JSON_BODY_ERRORS = {**ERRORS, 400: {"model": ErrorBody, "description": "The JSON body is not text: its bytes are "
                                    "not UTF-8 (nor UTF-16 or UTF-32, which are recognised too)"}}


class QueryBody(BaseModel):
    """Exactly one of jmespath, grep or sql. A field of another name is refused: a misspelt `offest`
    ignored would answer another query than the one meant."""

    model_config = ConfigDict(extra="forbid")

    jmespath: Optional[str] = None
    grep: Optional[str] = None
    sql: Optional[str] = None
    offset: BodyInt = 0
    limit: Optional[BodyInt] = None  # checked by the tools: -1 and 0 each get their own message
    context: BodyInt = Field(0, ge=0, le=50)
    session: Optional[str] = None


def _when(value: Optional[str], name: str) -> Optional[dt.datetime]:
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed.astimezone(dt.timezone.utc).replace(tzinfo=None) if parsed.tzinfo else parsed
    except (ValueError, OverflowError) as exc:  # OverflowError: 0001-01-01T00:00+01:00 is before year 1 in UTC
        raise InvalidArgument(f"{name} must be an ISO 8601 date or time between the years 1 and 9999, "
                              "e.g. 2026-12-01T10:00:00Z") from exc


@router.get("/artifacts", responses=ERRORS, summary="List artifacts, newest first")
def list_artifacts(request: Request, limit: Annotated[int, Query(ge=1, le=500), PLAIN_DIGITS] = 50,
                   cursor: Optional[str] = None, tool: Optional[str] = None, session: Optional[str] = None,
                   kind: Optional[str] = None, since: Optional[str] = None, until: Optional[str] = None,
                   text: Optional[str] = None):
    rows, next_cursor = offloader_for(request).list(
        limit=limit, cursor=cursor, tool=tool, session=session, kind=kind, since=_when(since, "since"),
        until=_when(until, "until"), text=text)
    return {"items": rows, "next_cursor": next_cursor}


_BYTES = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
# the body is read as a stream, so FastAPI cannot see it: declared here for clients generated from the spec
_ANY_BODY = {"requestBody": {"required": True, "description": "The tool result, stored byte for byte",
                             "content": _BYTES}}


@router.post("/artifacts", status_code=201, responses={**ERRORS, 413: {"model": ErrorBody}},
             summary="Store the request body as an artifact; returns the reference a model would get",
             openapi_extra=_ANY_BODY)
async def store_artifact(request: Request, tool: str = Query(..., min_length=1, max_length=200),
                         session: Optional[str] = Query(None, max_length=200)):
    limit = request.app.state.config.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and is_plain_integer(declared) and int(declared) > limit:
        raise TooLarge(f"the body is {int(declared):,} bytes; this server accepts up to {limit:,}")
    parts, size = [], 0
    async for block in request.stream():
        size += len(block)
        if size > limit:
            raise TooLarge(f"the body exceeds {limit:,} bytes, the most this server accepts")
        parts.append(block)
    off = offloader_for(request)
    from starlette.concurrency import run_in_threadpool

    ref = await run_in_threadpool(off.put, b"".join(parts), tool=tool, session=session)
    return {**ref.to_dict(), "text": ref.render()}


@router.get("/artifacts/{artifact_id}", responses=ERRORS, summary="An artifact's metadata")
def get_artifact(request: Request, artifact_id: str):
    return offloader_for(request).get(artifact_id)


@router.delete("/artifacts/{artifact_id}", status_code=204, responses=ERRORS, summary="Delete an artifact")
def delete_artifact(request: Request, artifact_id: str):
    offloader_for(request).delete(artifact_id)
    return Response(status_code=204)


@router.get("/artifacts/{artifact_id}/reference", responses=ERRORS,
            summary="The reference exactly as the model saw it (its dict, and `text`)")
def get_reference(request: Request, artifact_id: str):
    return offloader_for(request).reference(artifact_id)


_RAW = {**ERRORS, 200: {"description": "The stored bytes, as their detected content type", "content": _BYTES},
        206: {"description": "The bytes of the Range asked for", "content": _BYTES},
        416: {"description": "A Range past the end (Content-Range: bytes */size)"}}
_RANGE = {"parameters": [{"name": "Range", "in": "header", "required": False, "schema": {"type": "string"},
                          "description": "One range of bytes, as RFC 9110 writes it: bytes=0-99, bytes=100-, bytes=-50"}]}


@router.head("/artifacts/{artifact_id}/raw", include_in_schema=False)
@router.get("/artifacts/{artifact_id}/raw", responses=_RAW, openapi_extra=_RANGE,
            summary="The stored bytes, streamed chunk by chunk (a single `Range: bytes=` too; HEAD sizes them)")
def get_raw(request: Request, artifact_id: str):
    off = offloader_for(request)
    meta = off.get(artifact_id)
    size = meta["bytes"]
    headers = {"Accept-Ranges": "bytes", "Content-Disposition": f'attachment; filename="{artifact_id}"'}
    span = _byte_range(request.headers.get("range"), size)
    if span is None:  # no Range, or one this server does not serve (several ranges): the whole
        start, end, status = 0, size, 200
    elif span == "unsatisfiable":
        response = error_response(416, "range_not_satisfiable",
                                  f"The range {request.headers['range']!r} is outside the {size:,} bytes of {artifact_id}.")
        response.headers.update({**headers, "Content-Range": f"bytes */{size}"})
        return response
    else:
        (start, end), status = span, 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    headers["Content-Length"] = str(end - start)
    if request.method == "HEAD":
        return Response(status_code=status, headers=headers, media_type=meta["content_type"])
    body = off.iter_raw(artifact_id) if status == 200 else off.iter_raw(artifact_id, start, end)
    return StreamingResponse(body, status_code=status, media_type=meta["content_type"], headers=headers)


def _byte_range(header: str | None, size: int):
    """(start, end) of a single `bytes=a-b`, `bytes=a-` or `bytes=-n` range; "unsatisfiable"; or None
    (no header, or a form served as the whole, which RFC 9110 allows)."""
    match = re.fullmatch(r"bytes=\s*(\d*)\s*-\s*(\d*)\s*", header or "", re.ASCII)
    if match is None or not any(match.groups()):
        return None
    first, last = match.groups()
    if not first:  # the last n bytes
        n = int(last)
        return (max(size - n, 0), size) if n > 0 and size else "unsatisfiable"
    start = int(first)
    if last and int(last) < start:  # an invalid range (RFC 9110 14.1.1), not an unsatisfiable one
        return None
    if start >= size:
        return "unsatisfiable"
    end = min(int(last) + 1, size) if last else size
    return start, end


@router.get("/artifacts/{artifact_id}/slice", responses=ERRORS, summary="A bounded page (fetch_slice)")
def get_slice(request: Request, artifact_id: str, offset: QueryInt = 0, limit: Optional[QueryInt] = None,
              unit: Literal["lines", "chars", "bytes", "items"] = "lines", path: Optional[str] = None,
              session: Optional[str] = None):
    return offloader_for(request).fetch_slice(artifact_id, offset=offset, limit=limit, unit=unit, path=path,
                                              session=session, logged=not getattr(request.state, "head", False))


@router.post("/artifacts/{artifact_id}/query", responses=JSON_BODY_ERRORS,
             summary="JMESPath, grep or SQL (query_artifact)")
def post_query(request: Request, artifact_id: str, body: QueryBody):
    return offloader_for(request).query_artifact(
        artifact_id, jmespath=body.jmespath, grep=body.grep, sql=body.sql, offset=body.offset, limit=body.limit,
        context=body.context, session=body.session)


@router.put("/artifacts/{artifact_id}/pin", responses=ERRORS, summary="Pin: kept through TTL and quota")
def pin(request: Request, artifact_id: str):
    off = offloader_for(request)
    off.pin(artifact_id, True)
    return off.get(artifact_id)


@router.delete("/artifacts/{artifact_id}/pin", responses=ERRORS, summary="Unpin")
def unpin(request: Request, artifact_id: str):
    off = offloader_for(request)
    off.pin(artifact_id, False)
    return off.get(artifact_id)


@router.get("/extracts", responses=ERRORS, summary="The extract log: every slice and query")
def list_extracts(request: Request, artifact_id: Optional[str] = None, since: Optional[str] = None,
                  until: Optional[str] = None, limit: Annotated[int, Query(ge=1, le=5000), PLAIN_DIGITS] = 200,
                  cursor: Optional[str] = None):
    off = offloader_for(request)
    rows, next_cursor = off.extracts_page(
        limit=limit, cursor=cursor, artifact_id=artifact_id, since=_when(since, "since"), until=_when(until, "until"))
    if artifact_id is not None and not rows:
        off.get(artifact_id)  # an id no artifact has: 404, as the CLI's exit 1, not an empty log
    return {"items": rows, "next_cursor": next_cursor}


@router.post("/extracts/{extract_id}/rerun", responses=ERRORS, summary="Re-execute one logged extract")
def rerun_extract(request: Request, extract_id: str):
    results = offloader_for(request).rerun(extract_id=extract_id)
    if not results:
        raise ExtractNotFound(extract_id)
    return {"results": results}


@router.get("/stats", responses=ERRORS, summary="What offload kept out of the context")
def stats(request: Request, top: Annotated[int, Query(ge=1, le=10_000), PLAIN_DIGITS] = 100):
    """Totals, and per tool and per session the `top` groups that kept out most; the rest summed."""
    return offloader_for(request).stats(top)
