"""The daemon's ASGI app. `create_app` is the one factory both `ling-local serve` and the
tests use."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ling_local import __version__
from ling_local.config import Profile
from ling_local.engines import make_engine
from ling_local.engines.base import Engine, EngineState
from ling_local.errors import LingLocalError
from ling_local.metrics import Metrics
from ling_local.scheduler import Scheduler
from ling_local.server.fastpath import GenerationRoutes
from ling_local.server.openai_api import describe_validation_error, router
from ling_local.server.openapi import document_generation_routes
from ling_local.server.security import BodySizeLimit, SecurityMiddleware
from ling_local.server.state import DaemonState

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def _error(status: int, message: str, error_type: str, param: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"message": message, "type": error_type}
    if param is not None:
        body["param"] = param
    return JSONResponse({"error": body}, status_code=status)


def create_app(
    profile: Profile,
    *,
    token: str,
    engine: Engine | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    wait_for_engine: bool = False,
) -> Any:
    """Build the daemon. The engine starts in the background (``/health`` says when it is
    ready) unless `wait_for_engine`, which makes start-up block until it is."""
    engine = engine or make_engine(profile)
    metrics = Metrics()
    daemon = DaemonState(
        profile=profile,
        engine=engine,
        metrics=metrics,
        scheduler=Scheduler(engine, profile.scheduler, metrics),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def start() -> None:
            try:
                await engine.start()
                log.info("engine ready: %s (%s)", profile.served_model_name, engine.kind)
            except Exception as err:
                log.error("engine failed to start: %s", err)

        if wait_for_engine:
            await start()
            task = None
        else:
            task = asyncio.create_task(start())
        try:
            yield
        finally:
            if task is not None and not task.done():
                task.cancel()
            await engine.stop()

    app = FastAPI(
        title="ling-local",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.daemon = daemon
    app.include_router(router)
    document_generation_routes(app, daemon.requests)

    @app.get("/health")
    async def health() -> JSONResponse:
        h = engine.health()
        body = {
            "status": "ok" if h.state is EngineState.READY else h.state.value,
            "state": h.state.value,
            "engine": h.engine,
            "model": h.model,
            "profile": profile.name,
            "detail": h.detail,
            "running": daemon.scheduler.running,
            "queued": daemon.scheduler.queued,
            "engine_running": h.running,
            "decode": h.decode,
            "version": __version__,
        }
        return JSONResponse(body, status_code=200 if h.state is EngineState.READY else 503)

    @app.get("/metrics")
    async def metrics_route() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.exception_handler(LingLocalError)
    async def _ling_error(_: Request, err: LingLocalError) -> JSONResponse:
        return _error(err.status_code, err.message, err.error_type, getattr(err, "param", None))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, err: RequestValidationError) -> JSONResponse:
        message, param = describe_validation_error(err.errors())
        return _error(400, message, "invalid_request_error", param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        messages = {
            404: "no such route",
            405: "method not allowed",
            413: f"request body too large (limit {profile.limits.max_body_bytes} bytes)",
        }
        return _error(
            err.status_code,
            messages.get(err.status_code, str(err.detail)),
            "invalid_request_error" if err.status_code < 500 else "server_error",
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, err: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error(500, f"internal error: {type(err).__name__}", "server_error")

    # Outside FastAPI's own middleware stack, first to last: refuse foreign hosts and bad
    # tokens, then oversized bodies, then serve the two generation routes on plain ASGI.
    asgi = GenerationRoutes(app, daemon)
    asgi = BodySizeLimit(asgi, max_bytes=profile.limits.max_body_bytes)
    asgi = SecurityMiddleware(
        asgi, token=token, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins
    )
    return DaemonApp(app, asgi)


class DaemonApp:
    """The daemon as uvicorn and the tests see it: the middleware chain around FastAPI,
    with FastAPI's `state` (the DaemonState is `state.daemon`)."""

    def __init__(self, fastapi: FastAPI, asgi: Any) -> None:
        self.fastapi = fastapi
        self.state = fastapi.state
        self._asgi = asgi

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._asgi(scope, receive, send)
