"""calls.jsonl: one line per request sent (or answered from a replay record).

It is what makes cost accounting, debugging and exact replay possible, so it records the full
messages and the full response text. It never records a key: only the endpoint (without credentials) and the model;
replies are redacted before they are written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from amaris_cli.jsonio import JsonlAppender


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt_tokens: int = 0
    completion_tokens: int = 0


class CallRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ts: str
    agent: str
    step: int | None
    context: str = ""
    request_hash: str
    model: str
    base_url: str | None
    messages: list[dict[str, Any]]
    params: dict[str, Any]
    response: str | None
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None  # "length": cut at the token limit (an invalid answer, also on replay)
    latency_s: float
    attempts: int
    error: str | None = None
    source: Literal["model", "replay"] = "model"


class CallLog:
    def __init__(self, path: Path | None) -> None:
        self._appender = JsonlAppender(path) if path is not None else None

    def write(self, record: CallRecord) -> None:
        if self._appender is not None:
            self._appender.append(record.model_dump(mode="json"))

    def close(self) -> None:
        if self._appender is not None:
            self._appender.close()
