"""The one exception type of mnn_engine and its table of stable error codes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorKind:
    """What an error code means and how the HTTP server reports it."""

    http_status: int
    openai_type: str
    meaning: str


#: Every error code mnn_engine raises. Codes are stable: clients may match on them.
ERROR_CODES: dict[str, ErrorKind] = {
    "invalid_argument": ErrorKind(400, "invalid_request_error", "An argument is out of range or of the wrong type."),
    "empty_prompt": ErrorKind(400, "invalid_request_error", "The prompt has no tokens."),
    "context_length_exceeded": ErrorKind(
        400, "invalid_request_error", "The prompt does not fit in the model's context."
    ),
    "model_not_found": ErrorKind(404, "invalid_request_error", "No model at that path or with that ID."),
    "invalid_model": ErrorKind(422, "invalid_request_error", "The model directory is incomplete or inconsistent."),
    "wrong_model_kind": ErrorKind(
        400, "invalid_request_error",
        "The loaded model does not do that: an embedding model cannot generate text, a chat model cannot embed."),
    "model_load_failed": ErrorKind(500, "server_error", "MNN could not load the model."),
    "model_not_loaded": ErrorKind(503, "server_error", "The operation needs a loaded model."),
    "model_exists": ErrorKind(409, "invalid_request_error", "A model with that ID is already in the store."),
    "model_in_use": ErrorKind(409, "invalid_request_error", "The model is loaded; unload it first."),
    "backend_unavailable": ErrorKind(400, "invalid_request_error", "That backend is not compiled in or not usable."),
    "server_running": ErrorKind(409, "invalid_request_error", "Stop the server first."),
    "server_not_running": ErrorKind(409, "invalid_request_error", "The server is not running."),
    "server_stopping": ErrorKind(503, "server_error", "The server is stopping."),
    "server_busy": ErrorKind(503, "server_error", "The server has no room for another such request now."),
    "port_in_use": ErrorKind(409, "invalid_request_error", "The address is already in use."),
    "unauthorized": ErrorKind(401, "authentication_error", "Missing or wrong API key."),
    "forbidden": ErrorKind(403, "permission_error",
                           "The request comes from a web page or host name this server does not serve."),
    "not_found": ErrorKind(404, "invalid_request_error", "No such route."),
    "response_not_found": ErrorKind(
        404, "invalid_request_error", "No stored response with that ID (never stored, deleted, or evicted)."),
    "method_not_allowed": ErrorKind(405, "invalid_request_error", "The route does not take that method."),
    "payload_too_large": ErrorKind(413, "invalid_request_error", "The request body is too large."),
    "unsupported_media_type": ErrorKind(415, "invalid_request_error", "The request body must be JSON."),
    "busy": ErrorKind(429, "rate_limit_error", "A generation is already running."),
    "generation_cancelled": ErrorKind(503, "server_error", "The generation was cancelled on the server."),
    "generation_failed": ErrorKind(500, "server_error", "The engine failed during generation."),
    "pull_failed": ErrorKind(502, "server_error", "Downloading the model from its source failed."),
    "pull_unauthorized": ErrorKind(401, "authentication_error", "The model's source refused access."),
    "pull_corrupt": ErrorKind(502, "server_error", "A downloaded file does not match its source's hash."),
    "pull_refused": ErrorKind(403, "permission_error", "The pull would fetch a URL this server does not allow."),
    "pull_cancelled": ErrorKind(503, "server_error", "The pull was stopped before it finished."),
    "pull_busy": ErrorKind(409, "invalid_request_error", "Another pull of that model is running."),
    "invalid_manifest": ErrorKind(422, "invalid_request_error", "The model manifest is malformed."),
    "engine_too_old": ErrorKind(422, "invalid_request_error", "The model needs a newer mnn-engine or MNN."),
    "disk_full": ErrorKind(507, "server_error", "Not enough disk space for the model."),
    "structured_output_unavailable": ErrorKind(
        400, "invalid_request_error", "Structured output needs the optional grammar engine (mnn-engine[structured])."
    ),
    "dependency_missing": ErrorKind(
        500, "server_error", "A Python package mnn-engine needs is not installed (the message says how to finish)."
    ),
    "internal_error": ErrorKind(500, "server_error", "An unexpected failure inside mnn_engine."),
}


class MnnEngineError(Exception):
    """An error with a stable machine-readable ``code`` (see ``ERROR_CODES``).

    ``param`` names the offending argument or file when there is one.
    """

    def __init__(self, code: str, message: str, *, param: str | None = None) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown mnn_engine error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param

    @property
    def kind(self) -> ErrorKind:
        return ERROR_CODES[self.code]

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def __repr__(self) -> str:
        return f"MnnEngineError({self.code!r}, {self.message!r}, param={self.param!r})"

