"""Answering requests from call logs instead of the model.

Every request amaris sends is named by its hash (llm/hashing.py). Two logs can answer one:

- the run's own calls.jsonl: a stage that recomputes a file because its inputs changed sends many
  requests that did not change; those are answered from the earlier line with the same hash, so only
  what changed costs a model call. Only answers amaris accepted are reused: a request whose earlier
  answer was invalid, or that failed, goes to the model again (that is how "re-run to retry" works).
- a replay's source log (`amaris replay SRC`): every recorded answer is reused, accepted or not, so
  the replay takes exactly the recorded path. `offline` makes a request the source lacks an error that
  names the step, the agent and what differs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amaris_cli.errors import AmarisError
from amaris_cli.llm.calllog import CallIndex, CallRecord
from amaris_cli.prompts import BLOCK_LABEL, BLOCK_TAG

# A block marker (prompts.py): its tag is a hash of the request's untrusted text, so any change of that text changes
# every tag, and the first differing character of two requests would always be the tag's.
_BLOCK = re.compile(rf"<<<BEGIN ({BLOCK_LABEL}) ({BLOCK_TAG}|TAG)>>>")


def _untagged(text: str) -> str:
    """The text with its block tags replaced by a placeholder, so two requests are compared by what differs."""
    for tag in {m.group(2) for m in _BLOCK.finditer(text)}:
        text = text.replace(tag, "TAG")
    return text


def _block_at(text: str, at: int) -> str:
    """Which data block of a prompt the character `at` is in ("" when it is in none)."""
    name = ""
    for m in _BLOCK.finditer(text):
        if m.start() > at:
            break
        end = text.find(f"<<<END {m.group(1)} ", m.end())
        name = m.group(1) if end == -1 or at < end else ""
    return f" (in block {name})" if name else ""


class OfflineMiss(AmarisError):
    exit_code = 5


@dataclass(frozen=True)
class Cached:
    record: CallRecord
    origin: str  # "cache" (this run's log) or "replay" (the source's)
    accepted: bool | None = None  # (replay) whether the source used the answer


class CallCache:
    def __init__(self, own_log: Path | None, source_log: Path | None = None, offline: bool = False) -> None:
        self.own = CallIndex(own_log) if own_log is not None else None
        self.source = CallIndex(source_log) if source_log is not None else None
        self.source_log = source_log
        self.offline = offline

    def lookup(self, request_hash: str, agent: str, step: int | None, context: str, model: str,
               messages: list[dict[str, Any]], params: dict[str, Any]) -> Cached | None:
        if self.source is not None:
            found = self.source.find(step, request_hash, accepted_only=False)
            if found is not None:
                return Cached(found, "replay", self.source.accepted(step, request_hash))
            if self.offline:
                raise OfflineMiss(
                    f"--offline: step {step}, agent {agent} ({context or 'no context'}): the request is not in "
                    f"{self.source_log}: "
                    f"{self.explain(agent, step, context, model, messages, params, request_hash)}; "
                    "run without --offline to call the model for it")
        if self.own is not None:
            found = self.own.find(step, request_hash, accepted_only=True)
            if found is not None:
                return Cached(found, "cache")
        return None

    def source_may_hold(self, step: int | None, context: str) -> bool:
        """Whether the replay's source recorded, or may have recorded, a request of `context` at `step`."""
        return self.source is not None and self.source.may_hold(step, context)

    def forget(self, step: int | None) -> None:
        """Release what is held in memory for a step (`amaris serve` runs for many steps)."""
        for index in (self.own, self.source):
            if index is not None:
                index.forget(step)

    def explain(self, agent: str, step: int | None, context: str, model: str, messages: list[dict[str, Any]],
                params: dict[str, Any], request_hash: str) -> str:
        assert self.source is not None
        if (damage := self.source.damage(step, request_hash)) is not None:
            return f"the source recorded this request, but {damage}"
        reason = self._differences(agent, step, context, model, messages, params)
        unreadable = self.source.unreadable()
        return reason if unreadable is None else f"{reason}; but {unreadable}"

    def _differences(self, agent: str, step: int | None, context: str, model: str, messages: list[dict[str, Any]],
                     params: dict[str, Any]) -> str:
        assert self.source is not None
        candidates = [r for r in self.source.records(step) if r.agent == agent and r.context == context]
        if not candidates:
            return f"the source recorded no {agent} request for this step and context"
        recorded = candidates[0]
        if recorded.model != model:
            return f"the model differs (recorded {recorded.model!r}, now {model!r})"
        if recorded.params != params:
            keys = sorted(k for k in set(recorded.params) | set(params) if recorded.params.get(k) != params.get(k))
            return f"sampling parameters differ: {', '.join(keys)}"
        old_messages = recorded.messages or []
        if len(old_messages) != len(messages):
            return f"the conversation has {len(messages)} messages, the record {len(old_messages)}"
        for index, (old, new) in enumerate(zip(old_messages, messages, strict=True)):
            a, b = str(old.get("content", "")), str(new.get("content", ""))
            untagged = a != b and _untagged(a) != _untagged(b)
            if untagged:
                a, b = _untagged(a), _untagged(b)
            if a != b:
                at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                aside = " (block tags set aside)" if untagged else ""
                return (f"message {index} ({new.get('role')}){_block_at(b, at)} differs from character {at}{aside}: "
                        f"recorded {a[max(0, at - 30):at + 50]!r}, now {b[max(0, at - 30):at + 50]!r}")
        return "the request differs from every recorded one"
