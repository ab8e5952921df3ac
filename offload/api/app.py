"""The HTTP app: one FastAPI application over an Offloader, with its guards.

Every route calls the same Offloader methods as the tools and the CLI (no second code path). The guards:
on loopback no token is needed, but Host and Origin must be local (against DNS rebinding); off loopback
the server does not start without a token; a token may be scoped to a namespace and then sees only it.
Every error, ours or the framework's, leaves in one JSON shape with its status.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import OffloadError
from ..jsontext import dumps
from ..offloader import Offloader

_UNPARSED_BODY = "There was an error parsing the body"  # fastapi.routing's detail of that 400
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
}
# FastAPI's /docs page loads Swagger UI from a CDN and runs an inline script: relaxed there only
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
            "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; img-src 'self' data: https://fastapi.tiangolo.com")

LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}


def is_loopback(host: str) -> bool:
    if host in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ApiConfig:
    """How the server guards itself. tokens: token → namespace it is scoped to (None: any namespace)."""

    tokens: dict[str, str | None] = field(default_factory=dict)
    loopback: bool = True  # bound to a loopback address: check Host/Origin against DNS rebinding
    max_upload_bytes: int = 256 * 1024 * 1024

    def scope_of(self, token: str | None) -> tuple[bool, str | None]:
        """(known, namespace scope) for a presented token, compared in constant time."""
        if token is None:
            return False, None
        for known, scope in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return True, scope
        return False, None


class ExactJSONResponse(JSONResponse):
    """Stored values as JSON exactly (integers beyond 64 bits; lone surrogates as escapes, which the
    default response could not encode, failing the request): see offload/jsontext.py."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    # exact JSON: a message may quote what the client sent, a lone surrogate too (a 500 before)
    return ExactJSONResponse({"error": code, "message": message, "status": status}, status_code=status,
                             headers={**SECURITY_HEADERS, **(headers or {})})


def _unauthorized(request: Request, message: str) -> JSONResponse | RedirectResponse:
    """401 with its challenge (RFC 9110); a browser asking for a page is sent to the login page instead."""
    if request.method == "GET" and not request.url.path.startswith("/api/") and \
            "text/html" in request.headers.get("accept", ""):
        return RedirectResponse("/login", status_code=303, headers=SECURITY_HEADERS)
    return error_response(401, "unauthorized", message, {"WWW-Authenticate": 'Bearer realm="offload"'})


def create_app(off: Offloader, config: ApiConfig | None = None) -> FastAPI:
    """The API and the web page over `off` (its namespace is the default for requests)."""
    from .routes import router
    from .web import mount_static, web_router

    config = config or ApiConfig()
    app = FastAPI(title="offload", version="0.1.0", default_response_class=ExactJSONResponse,
                  description="Browse what agents stored, what the model saw, and what it saved.")
    app.state.off = off
    app.state.config = config

    @app.exception_handler(OffloadError)
    async def _offload_error(_request: Request, exc: OffloadError):
        return error_response(exc.status, exc.code, exc.model_message())

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        if [e.get("type") for e in exc.errors()] == ["json_invalid"]:  # its loc is ("body", position)
            at = tuple(exc.errors()[0].get("loc", ()))[1:2]
            return error_response(422, "invalid_argument", "The body is not valid JSON"
                                  + (f" (at character {at[0]:,})" if at and isinstance(at[0], int) else "")
                                  + ".")
        parts = ["{}: {}".format(".".join(str(p) for p in e.get("loc", ())), e.get("msg")) for e in exc.errors()]
        message = "; ".join(parts) or "invalid request"
        kind = request.headers.get("content-type", "")
        if any(tuple(e.get("loc", ()))[:1] == ("body",) for e in exc.errors()) and \
                not kind.split(";")[0].strip().lower().endswith("json"):
            # FastAPI reads a body as JSON only when it says it is: else a valid object is "not a dictionary"
            message += f" (the body was sent as {kind or 'no content type'}: send Content-Type: application/json)"
        return error_response(422, "invalid_argument", message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException):
        code = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
                413: "too_large"}.get(exc.status_code, "http_error")
        detail = str(exc.detail)
        if detail == _UNPARSED_BODY:  # FastAPI's words for a body its JSON decoder could not even read
            detail = "The body could not be read: it must be JSON text in UTF-8 (bytes that are not UTF-8 were sent)."
        return error_response(exc.status_code, code, detail, exc.headers)  # Allow on a 405

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception):
        return error_response(500, "internal_error", f"{type(exc).__name__}: the server failed; nothing was changed")

    @app.middleware("http")
    async def guard(request: Request, call_next):
        problem = _check_request(request, config)
        if problem is not None:
            return problem
        # HEAD wherever GET is (RFC 9110), answered as GET without the body: the routes said 405 but
        # for the raw bytes, which size themselves without reading them
        head = request.method == "HEAD" and not request.url.path.endswith("/raw")
        if head:
            request.scope["method"] = "GET"
            request.state.head = True  # for the routes: a HEAD reads no page into the extract log
        response = await call_next(request)
        if head:
            response = Response(status_code=response.status_code, headers=dict(response.headers))
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.url.path in ("/docs", "/redoc"):
            response.headers["Content-Security-Policy"] = DOCS_CSP
        if request.url.path.startswith("/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    app.include_router(router)
    app.include_router(web_router)
    mount_static(app)
    return app


def _check_request(request: Request, config: ApiConfig) -> JSONResponse | None:
    """Host/Origin against DNS rebinding (loopback), then the token and its namespace scope."""
    if config.loopback:
        host = _hostname("//" + (request.headers.get("host") or ""))
        if host is None:
            return error_response(400, "bad_request", f"The Host header {request.headers.get('host')!r} is not a "
                                  "host name (a loopback server must be named localhost or 127.0.0.1).")
        if host and not is_loopback(host):
            return error_response(403, "forbidden", f"Host {host!r} is not this machine: requests to a loopback "
                                  "server must name localhost or 127.0.0.1 (DNS rebinding protection).")
        origin = request.headers.get("origin")
        if origin == "null":  # a sandboxed frame or a file: page of any site; it may read, not change
            if request.method not in ("GET", "HEAD", "OPTIONS"):
                return error_response(403, "forbidden", "Origin 'null' (a sandboxed frame or a local file) may "
                                      "not change this server's store.")
        elif origin and not is_loopback(_hostname(origin) or ""):
            return error_response(403, "forbidden", f"Origin {origin!r} may not call this server.")
    namespace = request.headers.get("x-offload-namespace")
    if namespace:  # HTTP headers are read as Latin-1: "é工" sent as UTF-8 landed in namespace "Ã©å·¥"
        try:
            namespace = namespace.encode("latin-1").decode("utf-8")
        except UnicodeError:
            return error_response(400, "bad_request", "The X-Offload-Namespace header is not UTF-8: send the "
                                  "namespace's UTF-8 bytes, or give it as ?namespace= (percent-encoded).")
    namespace = namespace or request.query_params.get("namespace")
    request.state.namespace = namespace
    if not config.tokens:
        return None
    token = None
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        token = auth[7:].strip()
    token = token or request.cookies.get("offload_token")
    if request.url.path == "/login" or request.url.path.startswith("/static/"):  # the login page and its style
        return None
    if token is None:
        return _unauthorized(request, "A token is required: send `Authorization: Bearer <token>`, or sign in "
                             "at /login.")
    known, scope = config.scope_of(token)
    if not known:
        return _unauthorized(request, "That token is not valid for this server.")
    if scope is not None:
        if namespace is not None and namespace != scope:
            return error_response(403, "forbidden", f"This token is scoped to namespace {scope!r}.")
        request.state.namespace = scope
    return None


def _hostname(url: str) -> str | None:
    """The host of `url` ("" when it names none), or None when it is malformed ("[::1", "http://[x]")."""
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return None


def offloader_for(request: Request) -> Offloader:
    """The request's Offloader: the server's, bound to the namespace the token or request names."""
    off: Offloader = request.app.state.off
    namespace = getattr(request.state, "namespace", None)
    return off if namespace is None else off.for_namespace(namespace)
