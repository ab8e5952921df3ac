"""`offload serve`: run the API and web page with uvicorn, refusing unsafe setups before binding."""

from __future__ import annotations

from ..adapters.mcp_server import MIN_TOKEN_CHARS
from ..errors import InvalidArgument
from ..offloader import Offloader
from .app import ApiConfig, create_app, is_loopback


def build_config(host: str, tokens: dict[str, str | None] | None) -> ApiConfig:
    """The guard for this bind address: off loopback a token is mandatory, and any token is one (an unset
    variable in `--token "$TOKEN"` gave a public server nobody could use)."""
    short = [token for token in tokens or {} if len(token) < MIN_TOKEN_CHARS]
    if short:
        raise InvalidArgument(
            f"a token must be at least {MIN_TOKEN_CHARS} characters (got {len(short[0])}: an unset variable?); "
            "make one with python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    loopback = is_loopback(host)
    if not loopback and not tokens:
        raise InvalidArgument(
            f"Refusing to listen on {host}, which other machines can reach, without a token. Pass --token "
            "(or set OFFLOAD_API_TOKENS='{\"<token>\": null}'), or listen on 127.0.0.1.")
    return ApiConfig(tokens=dict(tokens or {}), loopback=loopback)


def serve(off: Offloader, host: str = "127.0.0.1", port: int = 8765,
          tokens: dict[str, str | None] | None = None) -> None:
    import uvicorn

    config = build_config(host, tokens if tokens is not None else off.settings.api_tokens)
    uvicorn.run(create_app(off, config), host=host, port=port, log_level="info", server_header=False)
