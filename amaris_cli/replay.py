"""Exact, cheap replay of a recorded run.

Every request amaris sends is named by its hash (see llm/hashing.py). A replay answers each
request whose hash the source's calls.jsonl already holds with the recorded response: no model
call, no cost. Because prompts render deterministically (content-derived block tags, sorted JSON)
and outputs are written in input order, a replay with unchanged settings reproduces every step
and rubric file byte for byte. Changed settings (an ablation) change some requests: only those
go to the model, from the first point where their inputs differ. `--offline` makes such a miss
an error that names the step, the agent and what differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amaris_cli.errors import AmarisError
from amaris_cli.jsonio import iter_jsonl, repair_torn_tail
from amaris_cli.llm.calllog import CallRecord, Usage


class OfflineMiss(AmarisError):
    exit_code = 5


@dataclass(frozen=True)
class Recorded:
    response: str
    usage: Usage
    finish_reason: str | None = None


class ReplayCache:
    def __init__(self, calls_path: Path, offline: bool = False) -> None:
        self.offline = offline
        self.path = calls_path
        self._answers: dict[str, Recorded] = {}
        self._by_context: dict[tuple[str, int | None, str], list[CallRecord]] = {}
        repair_torn_tail(calls_path)
        for row in iter_jsonl(calls_path):
            record = CallRecord.model_validate(row)
            if record.response is None:
                continue  # a failed call answers nothing
            self._answers.setdefault(record.request_hash, Recorded(record.response, record.usage, record.finish_reason))
            self._by_context.setdefault((record.agent, record.step, record.context), []).append(record)

    def __len__(self) -> int:
        return len(self._answers)

    def lookup(self, request_hash: str, agent: str, step: int | None, context: str,
               model: str = "", messages: list[dict[str, Any]] | None = None,
               params: dict[str, Any] | None = None) -> Recorded | None:
        found = self._answers.get(request_hash)
        if found is None and self.offline:
            raise OfflineMiss(
                f"--offline: step {step}, agent {agent} ({context or 'no context'}): the request is not in "
                f"{self.path}: {self.explain(agent, step, context, model, messages or [], params or {})}; "
                "nothing was written (run without --offline to call the model for it)"
            )
        return found

    def explain(self, agent: str, step: int | None, context: str, model: str, messages: list[dict[str, Any]],
                params: dict[str, Any]) -> str:
        candidates = self._by_context.get((agent, step, context), [])
        if not candidates:
            return f"the source recorded no {agent} request for this step and context"
        recorded = candidates[0]
        if recorded.model != model:
            return f"the model differs (recorded {recorded.model!r}, now {model!r})"
        if recorded.params != params:
            keys = sorted(k for k in set(recorded.params) | set(params) if recorded.params.get(k) != params.get(k))
            return f"sampling parameters differ: {', '.join(keys)}"
        if len(recorded.messages) != len(messages):
            return f"the conversation has {len(messages)} messages, the record {len(recorded.messages)}"
        for index, (old, new) in enumerate(zip(recorded.messages, messages, strict=True)):
            a, b = str(old.get("content", "")), str(new.get("content", ""))
            if a != b:
                at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                return (f"message {index} ({new.get('role')}) differs from character {at}: "
                        f"recorded {a[max(0, at - 30):at + 50]!r}, now {b[max(0, at - 30):at + 50]!r}")
        return "the request differs from every recorded one"
