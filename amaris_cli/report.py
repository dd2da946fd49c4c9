"""`amaris report`: a self-contained HTML report with plots (embedded as PNG, no network needed to
view it), and the same plots as PNG files next to it.

Plots: reward per step (mean and spread), per-criterion pass rate over steps, rubric size and
edits per update, reward-hacking prevalence over steps. matplotlib is an optional extra
(`pip install 'amaris[report]'`): the report is the only part of amaris that needs it.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from amaris_cli.errors import AmarisError
from amaris_cli.inspection import inspect_run
from amaris_cli.jsonio import write_bytes_atomic
from amaris_cli.records import load_summary, load_update, step_numbers
from amaris_cli.rundir import RunDir


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AmarisError("amaris report needs matplotlib: pip install 'amaris[report]' (or pip install matplotlib)") from None
    return plt


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def plots(run: RunDir) -> dict[str, tuple[str, bytes]]:
    """{file stem: (title, PNG bytes)}"""
    plt = _pyplot()
    data = inspect_run(run)
    steps = [s["step"] for s in data["steps"]]
    out: dict[str, tuple[str, bytes]] = {}

    fig, ax = plt.subplots(figsize=(7, 3.2))
    means = [s["mean_reward"] if s["mean_reward"] is not None else float("nan") for s in data["steps"]]
    spreads = [s["std_reward"] or 0.0 for s in data["steps"]]
    ax.plot(steps, means, marker="o", label="mean reward")
    ax.fill_between(steps, [m - s for m, s in zip(means, spreads, strict=True)],
                    [m + s for m, s in zip(means, spreads, strict=True)], alpha=0.2, label="± spread")
    ax.set_xlabel("step"), ax.set_ylabel("reward"), ax.set_ylim(0, 1), ax.legend(loc="best")
    out["reward"] = ("Reward per step", _png(fig))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.6))
    series: dict[str, dict[int, float]] = {}
    for step in step_numbers(run):
        summary = load_summary(run, step)
        if summary is None:
            continue
        for c in summary.stats.criteria:
            if c.mean is not None:
                series.setdefault(c.criterion_id, {})[step] = c.mean
    for cid, points in sorted(series.items()):
        xs = sorted(points)
        ax.plot(xs, [points[x] for x in xs], marker=".", label=cid[:40])
    ax.set_xlabel("step"), ax.set_ylabel("mean verdict (pass rate)"), ax.set_ylim(-0.02, 1.02)
    if series:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1, 0.5))
    out["criteria"] = ("Per-criterion pass rate over steps", _png(fig))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.2))
    versions = run.rubric_versions()
    ax.step(versions, [len(run.load_rubric(v).criteria) for v in versions], where="post", label="criteria in rubric version")
    updates = [(s, load_update(run, s)) for s in step_numbers(run)]
    edits = [(s, len(u.applied)) for s, u in updates if u is not None]
    if edits:
        ax.bar([s + 1 for s, _ in edits], [n for _, n in edits], alpha=0.3, label="edits applied by the update")
    ax.set_xlabel("rubric version (= step it first scores)"), ax.legend(loc="best")
    out["rubric"] = ("Rubric size and changes", _png(fig))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.4))
    hacking: dict[str, dict[int, float]] = {}
    for s in data["steps"]:
        for h in s["hacking"]:
            hacking.setdefault(h["pattern"], {})[s["step"]] = h["prevalence"]
    for pattern, points in sorted(hacking.items()):
        ax.plot(steps, [points.get(x, 0.0) for x in steps], marker=".", label=pattern)
    ax.set_xlabel("step"), ax.set_ylabel("share of rollouts"), ax.set_ylim(0, 1)
    if hacking:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1, 0.5))
    out["hacking"] = ("Reward-hacking patterns over steps", _png(fig))
    plt.close(fig)
    return out


def _reward(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def write_report(run: RunDir, out: Path) -> list[Path]:
    """Write OUT (HTML) and OUT's stem + '-PLOT.png' files; returns the paths written."""
    run.require()
    figures = plots(run)
    data = inspect_run(run)
    written = []
    for stem, (_, png) in figures.items():
        path = out.with_name(f"{out.stem}-{stem}.png")
        write_bytes_atomic(path, png)
        written.append(path)
    rows = "".join(
        f"<tr><td>{s['step']}</td><td>v{s['rubric_version']}</td><td>{s['rollouts']}</td><td>{s['failed']}</td>"
        f"<td>{_reward(s['mean_reward'])}</td>"
        f"<td>{html.escape(s['strategy'] or '-')}</td>"
        f"<td>{html.escape('; '.join(m['op'] + ' ' + m.get('id', '') for m in s['applied']) or '-')}</td></tr>"
        for s in data["steps"])
    images = "".join(
        f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' src='data:image/png;base64,"
        f"{base64.b64encode(png).decode()}'>" for title, png in figures.values())
    totals = data["totals"]
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>amaris report: {html.escape(str(run.path))}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}
img{{max-width:100%}}</style></head><body>
<h1>amaris report</h1><p>Run <code>{html.escape(str(run.path))}</code>, amaris {html.escape(data['version'])};
{len(data['steps'])} steps; {totals['prompt_tokens']} prompt and {totals['completion_tokens']} completion tokens
{f"(${totals['cost']:.4f})" if totals['priced_models'] else ''}.</p>
<table><tr><th>step</th><th>rubric</th><th>rollouts</th><th>failed</th><th>mean reward</th><th>update</th><th>edits</th></tr>
{rows}</table>{images}</body></html>
"""
    write_bytes_atomic(out, page.encode())
    return [out, *written]
