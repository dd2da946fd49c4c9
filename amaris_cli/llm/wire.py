"""Reading a chat-completion body, and nothing else.

A 200 answer is not necessarily a completion: proxies and half-compatible servers send
`usage.prompt_tokens = "many"`, `choices` as an object or a number, `content` as a list, or an
error object with status 200. Each is a malformed body (`WireError`), which the client retries
like any transient fault. Only the shape of the body is checked here, so that an error in
amaris's own code is never mistaken for (and retried as) a bad answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from amaris_cli.terminal import one_line


class WireError(Exception):
    def __init__(self, message: str, kind: str = "malformed_body") -> None:
        super().__init__(message)
        self.kind = kind


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    content: StrictStr | None = None
    refusal: StrictStr | None = None


class _Choice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    message: _Message
    finish_reason: StrictStr | None = None


class _Usage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)


class _Completion(BaseModel):
    model_config = ConfigDict(extra="ignore")
    choices: list[_Choice]
    usage: _Usage | None = None


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


def read_completion(body: bytes) -> Completion:
    """The first choice's text, finish reason and token usage, or a WireError saying what is wrong."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise WireError(f"malformed response body (not JSON): {one_line(body[:120].decode('utf-8', 'replace'))!r}") from None
    if not isinstance(data, dict):
        raise WireError(f"malformed response body: a JSON {type(data).__name__}, not an object")
    if "choices" not in data and isinstance(data.get("error"), dict | str):
        error = data["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise WireError(f"the endpoint answered 200 with an error: {one_line(str(message), 300)}", "error_body")
    try:
        completion = _Completion.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}" for e in exc.errors()[:3])
        raise WireError(f"malformed response body: {problems}") from None
    if not completion.choices:
        raise WireError("the response had no choices", "empty_choices")
    choice = completion.choices[0]
    if choice.message.content is None:
        refusal = f" (refusal: {one_line(choice.message.refusal, 200)})" if choice.message.refusal else ""
        raise WireError(f"the response had no message content{refusal}", "empty_content")
    usage = completion.usage or _Usage()
    return Completion(text=choice.message.content, finish_reason=choice.finish_reason,
                      prompt_tokens=usage.prompt_tokens or 0, completion_tokens=usage.completion_tokens or 0)
