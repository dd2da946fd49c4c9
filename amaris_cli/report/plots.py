"""The report's plots as PNG files, from the same collected data as the HTML page.

matplotlib is the optional `report` extra (`pip install 'amaris[report]'`); without it the HTML
report is still written, only these files are skipped.
"""

from __future__ import annotations

import io
import math
from typing import Any

from amaris_cli.report.collect import Overview

MAX_PANELS = 24  # panels of one PNG: criteria (those measured most recently), hacking patterns (the most prevalent)


def pyplot() -> Any | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def _latest_text(overview: Overview, criterion_id: str) -> tuple[str, str]:
    for rubric in reversed(overview.rubrics):
        for c in rubric.criteria:
            if c.id == criterion_id:
                return c.text, c.kind
    return criterion_id, "reward"


def _grid(plt: Any, n: int, cols: int = 3) -> tuple[Any, list[Any]]:
    rows = max(1, math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.3 * rows), sharex=True, sharey=True, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _whole_steps(ax: Any) -> None:
    """Ticks at whole steps (or versions) only: a run of a few steps had ticks at 0.25, 0.5, ..."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _wrap(text: str, width: int = 42, lines: int = 2) -> str:
    words, out, line = text.split(), [], ""
    for w in words:
        if len(line) + len(w) + 1 > width and line:
            out.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    out.append(line)
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: width - 3] + "..."
    return "\n".join(out)


def plots(overview: Overview) -> dict[str, bytes] | None:
    """{file stem: PNG bytes}, or None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    # Titles hold criterion texts and the analyzer's pattern names (untrusted): text, never mathtext, which
    # would render "$5 and $6" as a formula and raise on "$\frac$", losing every plot of the run.
    with plt.rc_context({"text.parse_math": False}):
        return _draw(plt, overview)


def _draw(plt: Any, overview: Overview) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    steps = [s.step for s in overview.steps]

    fig, ax = plt.subplots(figsize=(7, 3.2))
    # A step every rollout of which failed has no mean: a gap in the line and the band (as the HTML draws it), never
    # a line straight across it.
    means = [math.nan if s.mean is None else s.mean for s in overview.steps]
    spreads = [s.std or 0.0 for s in overview.steps]
    ax.fill_between(steps, [max(0.0, m - sd) if not math.isnan(m) else math.nan for m, sd in zip(means, spreads, strict=True)],
                    [min(1.0, m + sd) if not math.isnan(m) else math.nan for m, sd in zip(means, spreads, strict=True)],
                    alpha=0.2, label="± 1 sd (clipped to [0, 1])")
    # a step with a mean between two without (or the only one) has no band to fill: its spread as a bar, as the HTML does
    alone = [i for i, m in enumerate(means) if not math.isnan(m) and (i == 0 or math.isnan(means[i - 1]))
             and (i == len(means) - 1 or math.isnan(means[i + 1]))]
    if alone:
        ax.vlines([steps[i] for i in alone], [max(0.0, means[i] - spreads[i]) for i in alone],
                  [min(1.0, means[i] + spreads[i]) for i in alone], linewidth=8, alpha=0.2, color="tab:blue")
    ax.plot(steps, means, marker="o", label="mean reward")
    ax.set_xlabel("step"), ax.set_ylabel("reward"), ax.set_ylim(0, 1)
    _whole_steps(ax)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8, frameon=False)
    out["reward"] = _png(fig)
    plt.close(fig)

    series: dict[str, dict[int, float]] = {}
    for s in overview.steps:
        for c in s.criteria:
            series.setdefault(c.id, {})[s.step] = c.mean
    # One panel per criterion id the run ever measured: a long run's updates gather hundreds (see the hacking plot
    # below for what that costs). The criteria measured most recently are drawn; the HTML report has every one.
    recent = sorted(series, key=lambda cid: (-max(series[cid]), cid))[:MAX_PANELS]
    ordered = sorted(recent, key=lambda cid: (_latest_text(overview, cid)[1] == "pitfall", cid))
    fig, axes = _grid(plt, max(1, len(ordered)))
    for ax, cid in zip(axes, ordered, strict=False):
        text, kind = _latest_text(overview, cid)
        points = series[cid]
        color = "tab:red" if kind == "pitfall" else "tab:blue"
        # a gap where the criterion was not in the rubric that scored a step (as the HTML draws it), not a line
        # through values nobody measured
        ax.plot(steps, [points.get(x, math.nan) for x in steps], marker="o", color=color)
        ax.set_title(_wrap(("PITFALL prevalence: " if kind == "pitfall" else "pass rate: ") + text), fontsize=7.5)
        ax.set_ylim(-0.03, 1.03)
        _whole_steps(ax)
    fig.supxlabel("step")
    left_out = len(series) - len(ordered)
    fig.suptitle("Criteria over steps: pass rate (reward criteria, higher = better), prevalence (pitfalls, higher = worse)"
                 + (f"\n(the {len(ordered)} measured most recently; {left_out} more in the HTML report)" if left_out else ""),
                 fontsize=9)
    fig.tight_layout()
    out["criteria"] = _png(fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.2))
    lineage = [r for r in overview.rubrics if r.instance is None]
    versions = [r.version for r in lineage]
    rewards = [sum(c.kind == "reward" for c in r.criteria) for r in lineage]
    pitfalls = [sum(c.kind == "pitfall" for c in r.criteria) for r in lineage]
    ax.bar(versions, rewards, color="tab:blue", label="reward criteria")
    ax.bar(versions, pitfalls, bottom=rewards, color="tab:red", label="pitfalls")
    for r, total in zip(lineage, [a + b for a, b in zip(rewards, pitfalls, strict=True)], strict=True):
        if r.diff is not None:
            ax.annotate(f"+{len(r.diff.added)} -{len(r.diff.removed)} ~{len({c.id for c in r.diff.changed})}",
                        (r.version, total), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    ax.set_ylim(0, max([a + b for a, b in zip(rewards, pitfalls, strict=True)], default=1) * 1.18)
    ax.set_xlabel("rubric version (written by the update of the step before)"), ax.set_ylabel("criteria")
    _whole_steps(ax)
    ax.legend(loc="upper left", fontsize=8)
    out["rubric"] = _png(fig)
    plt.close(fig)

    hacking: dict[str, dict[int, float]] = {}
    for s in overview.steps:
        for h in s.hacking:
            hacking.setdefault(h.pattern, {})[s.step] = h.prevalence
    # The analyzer names patterns freely (a rollout can ask it for many, and a long run gathers many), one panel
    # each: 160 names took `report` a minute, and from about 780 the figure is taller than matplotlib's 2^16 pixels
    # (253 per row of 3). The most prevalent are drawn; the HTML report has every one.
    ranked = sorted(hacking, key=lambda p: (-sum(hacking[p].values()), p))
    names = ranked[:MAX_PANELS]
    # A share exists only where rollouts were analyzed and counted (the step summarized): a step scored but not yet
    # analyzed, or summarized with none analyzed, is a gap (the HTML's "n/a"), never a share of 0.
    counted = {s.step for s in overview.steps if s.summarized and s.analyzed > 0}
    fig, axes = _grid(plt, max(1, len(names)))
    for ax, name in zip(axes, names, strict=False):
        ax.plot(steps, [hacking[name].get(x, 0.0) if x in counted else math.nan for x in steps], marker="o",
                color="tab:red")
        ax.set_title(name, fontsize=8)
        ax.set_ylim(-0.03, 1.03)
        _whole_steps(ax)
    fig.supxlabel("step")
    left_out = len(ranked) - len(names)
    fig.suptitle("Reward-hacking patterns: share of analyzed rollouts"
                 + (f" (the {len(names)} most prevalent; {left_out} more in the HTML report)" if left_out else ""),
                 fontsize=9)
    fig.tight_layout()
    out["hacking"] = _png(fig)
    plt.close(fig)
    return out
