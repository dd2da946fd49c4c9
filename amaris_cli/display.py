"""Printing for the CLI: rich on stderr for people, JSON on stdout for scripts."""

from __future__ import annotations

import sys
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

err = Console(stderr=True, highlight=False, markup=False)  # text is data; styled lines opt in


def emit_json(obj: Any) -> None:
    sys.stdout.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")
    sys.stdout.flush()


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def usage_table(usage: dict[str, Any]) -> Table:
    table = Table(title="LLM calls by agent (tokens from the endpoint's usage)", title_justify="left")
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
