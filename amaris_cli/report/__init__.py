"""`amaris report`: one self-contained, offline HTML file in which every step, rollout, verdict and
reason, rubric version and diff, update and retrieval hit of a run is a click away; and the plots
as PNG files next to it (when matplotlib, the `report` extra, is installed).

collect.py reads the run, page.py writes the HTML (its script and style are in assets/), plots.py
draws the PNGs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from amaris_cli.jsonio import write_bytes_atomic
from amaris_cli.report.collect import TEXT_LIMIT, collect
from amaris_cli.report.page import render_page
from amaris_cli.report.plots import plots
from amaris_cli.rundir import RunDir


def _note(message: str) -> None:
    from amaris_cli.display import err

    err.print(message, style="dim")


def write_report(run: RunDir, out: Path, text_limit: int = TEXT_LIMIT,
                 note: Callable[[str], None] = _note) -> list[Path]:
    """Write OUT (HTML) and, with matplotlib, OUT's stem + '-PLOT.png'; returns the paths written."""
    run.require()
    overview, blocks = collect(run, text_limit)
    write_bytes_atomic(out, render_page(overview, blocks))
    written = [out]
    figures = plots(overview)
    if figures is None:
        note("PNG plots skipped: they need matplotlib (pip install 'amaris[report]'); the HTML report has the same plots")
        return written
    for stem, png in figures.items():
        path = out.with_name(f"{out.stem}-{stem}.png")
        write_bytes_atomic(path, png)
        written.append(path)
    return written
