"""Printing for the CLI: rich on stderr for people, JSON on stdout for scripts."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import orjson
from rich.console import Console
from rich.segment import Segment
from rich.table import Table

from amaris_cli.terminal import json_terminal_safe, terminal_safe


class SafeConsole(Console):
    """A console that shows control characters in what it prints (a judge's reason, an endpoint's error page,
    a rollout id) as visible escapes, never raw: an ANSI escape or a carriage return in untrusted text could
    otherwise rewrite the terminal. Its own styling is added after this, so colours still work."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            [s if s.control else Segment(terminal_safe(s.text), s.style, s.control) for s in buffer])


# Text is data: styled lines opt in to markup, and no `:name:` in a rollout becomes an emoji.
err = SafeConsole(stderr=True, highlight=False, markup=False, emoji=False)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json_terminal_safe(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()) + "\n")
    sys.stdout.flush()


def count(n: int, one: str, many: str | None = None) -> str:
    """`1 step`, `2 steps` (`many` when the plural is not one + s: `analysis`, `analyses`)."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def fmt(value: float | None, digits: int = 3) -> str:
    from amaris_cli.figures import shown_number  # one rounding rule for every figure a person reads

    return shown_number(value, digits)


def usage_table(usage: dict[str, Any]) -> Table:
    table = Table(title="LLM calls by agent (tokens spent, from the endpoint's usage; a call answered from a record "
                  "spent none)", title_justify="left")
    for col in ("agent", "req", "replay", "retry", "reask", "fail", "faults", "prompt", "compl"):
        table.add_column(col, justify="right" if col != "agent" else "left")
    for agent, u in sorted(usage.items()):
        table.add_row(agent, str(u.requests), str(u.replayed), str(u.retries), str(u.reasks), str(u.failures),
                      str(sum(u.faults.values())), str(u.prompt_tokens), str(u.completion_tokens))
    faults: dict[str, int] = {}
    for u in usage.values():
        for kind, n in u.faults.items():
            faults[kind] = faults.get(kind, 0) + n
    if faults:
        table.caption = "faults seen: " + ", ".join(f"{k} {n}" for k, n in sorted(faults.items()))
        table.caption_justify = "left"
    return table


def usage_json(usage: dict[str, Any]) -> dict[str, Any]:
    return {a: {"requests": u.requests, "replayed": u.replayed, "retries": u.retries, "reasks": u.reasks,
                "failures": u.failures, "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "faults": dict(u.faults)} for a, u in sorted(usage.items())}
