"""``/openapi.json`` for the two generation routes, which `fastpath` serves on plain ASGI
in front of FastAPI (so FastAPI's own generator never sees them): their request bodies are
the daemon's real request models, limits and defaults included."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from ling_local.server.schemas import RequestModels

__all__ = ["document_generation_routes"]

_REF = "#/components/schemas/{model}"

_ERROR = {
    "title": "ErrorResponse",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string"},
            },
        }
    },
}

_ERRORS = {
    "400": "the request is invalid (the message names the field)",
    "401": "missing or wrong bearer token",
    "403": "Host or Origin not allowed",
    "413": "the body is over limits.max_body_bytes",
    "429": "too many requests waiting",
    "503": "the engine is not ready",
}


def _operation(name: str, summary: str, model: str, chunk: str) -> dict[str, Any]:
    error = {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")}}}
    return {
        "post": {
            "operationId": name,
            "summary": summary,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": _REF.format(model=model)}}},
            },
            "responses": {
                "200": {
                    "description": f"the answer (JSON), or with stream=true {chunk} events "
                    "ending in `data: [DONE]` (an error event comes before it on failure)",
                    "content": {"application/json": {}, "text/event-stream": {}},
                },
                **{code: {"description": why, "content": error} for code, why in _ERRORS.items()},
            },
            "security": [{"bearer": []}],
        }
    }


def document_generation_routes(app: FastAPI, models: RequestModels) -> None:
    """Make ``app.openapi()`` describe POST /v1/completions and /v1/chat/completions."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for model in (models.completion, models.chat):
            body = model.model_json_schema(ref_template=_REF)
            schemas.update(body.pop("$defs", {}))
            schemas[model.__name__] = body
        schemas["ErrorResponse"] = _ERROR
        components.setdefault("securitySchemes", {})["bearer"] = {
            "type": "http",
            "scheme": "bearer",
        }
        paths = schema.setdefault("paths", {})
        paths["/v1/completions"] = _operation(
            "createCompletion",
            "Complete a prompt (suffix: fill in the middle)",
            models.completion.__name__,
            "text_completion",
        )
        paths["/v1/chat/completions"] = _operation(
            "createChatCompletion",
            "Answer a conversation",
            models.chat.__name__,
            "chat.completion.chunk",
        )
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
