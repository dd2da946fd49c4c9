"""Printing for the CLI: rich on stderr for people, JSON on stdout for scripts."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from rich import box
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


def distinct_names(paths: list[str]) -> list[str]:
    """Each path's last parts, as few as tell it from the others: two runs named `demo` in different directories
    are `a/demo` and `b/demo`, not two columns called `demo`."""
    parts = [Path(p).parts or (p,) for p in paths]
    for depth in range(1, max((len(x) for x in parts), default=1) + 1):
        names = [str(Path(*x[-depth:])) for x in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]  # the same path given twice: shown as given


def plain_table(title: str, caption: str | None = None) -> Table:
    """The style of every table a person reads: no outer box, so it fits 80 columns wherever it can."""
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, caption=caption, caption_justify="left",
                 title_style="bold", caption_style="dim", pad_edge=False, show_edge=False)


def add_column(table: Table, header: str, numeric: bool = False, ratio: int | None = None) -> None:
    # min_width keeps short columns whole (no "st…"); fold wraps a value too long for its column, never cuts it.
    table.add_column(header, justify="right" if numeric else "left", overflow="fold", ratio=ratio,
                     min_width=max((len(w) for w in header.split()), default=0))


def usage_table(usage: dict[str, Any]) -> Table:
    """A command's own calls, in the words `inspect` uses for a run's. Retries, re-asks and failures are columns
    only when there were some: nine columns do not fit 80, and they are zero in a run that went well."""
    faults: dict[str, int] = {}
    for u in usage.values():
        for kind, n in u.faults.items():
            faults[kind] = faults.get(kind, 0) + n
    caption = ("calls: requests sent to a model; from record: answered from a recorded run, which spent no tokens; "
               "tokens in/out: prompt/completion tokens spent (the endpoint's usage)")
    if faults:
        caption += "; faults seen: " + ", ".join(f"{k} {n}" for k, n in sorted(faults.items()))
    columns = [("calls", "requests"), ("tokens in", "prompt_tokens"), ("tokens out", "completion_tokens"),
               ("from record", "replayed")]
    columns += [(header, name) for header, name in (("retries", "retries"), ("re-asks", "reasks"), ("failed", "failures"))
                if any(getattr(u, name) for u in usage.values())]
    table = plain_table("LLM calls by agent", caption)
    add_column(table, "agent")
    for header, _ in columns:
        add_column(table, header, numeric=True)
    for agent, u in sorted(usage.items()):
        table.add_row(agent, *(str(getattr(u, name)) for _, name in columns))
    return table


def usage_json(usage: dict[str, Any]) -> dict[str, Any]:
    return {a: {"requests": u.requests, "replayed": u.replayed, "retries": u.retries, "reasks": u.reasks,
                "failures": u.failures, "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "faults": dict(u.faults)} for a, u in sorted(usage.items())}
