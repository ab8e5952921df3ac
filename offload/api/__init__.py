"""HTTP API and web page over the artifact store (needs the `server` extra: fastapi, uvicorn, jinja2)."""

from .app import ApiConfig, create_app, is_loopback

__all__ = ["ApiConfig", "create_app", "is_loopback"]
