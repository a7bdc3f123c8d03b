"""The daemon: an ASGI app (FastAPI) served by uvicorn."""

from ling_local.server.app import create_app

__all__ = ["create_app"]
