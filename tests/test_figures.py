"""Every figure is computed once (amaris_cli/figures.py) and shown the same by `score`, `inspect`, `compare`
and the report: a step whose mean reward is 0.3125 and whose hacking prevalence is 12.5% reads 0.313
and 13% in the terminal and on the page (Python's formatting said 0.312 and 12% where the page said
0.313 and 13%)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amaris_cli.figures import hacking_figures, reward_figures, shown_number, shown_percent
from amaris_cli.jsonio import write_json_atomic, write_jsonl_atomic
from amaris_cli.models import HackingCount, ScoreRecord, StepStats, SummaryAnswer, SummaryRecord, Verdict
from amaris_cli.report import write_report
from amaris_cli.rundir import RunDir
from amaris_cli.stages.common import store_rollouts
from tests.browser import Browser, find_chromium
from tests.conftest import invoke, new_run


@pytest.mark.parametrize(("value", "digits", "number", "percent"), [
    (0.3125, 3, "0.313", "31%"), (0.125, 2, "0.13", "13%"), (0.145, 2, "0.15", "15%"), (1.005, 2, "1.01", "101%"),
    (0.9995, 3, "1.000", "100%"), (0.0, 3, "0.000", "0%"), (None, 3, "-", "-"),
    (-0.0004, 3, "0.000", "0%"), (-0.25, 3, "-0.250", "-25%"),  # a value that rounds to zero has no sign (as in the report)
])
def test_figures_round_half_up_on_the_decimal_value(value: float | None, digits: int, number: str, percent: str) -> None:
    assert shown_number(value, digits) == number
    assert shown_percent(value) == percent


def test_reward_figures_count_failed_records_as_failed_never_as_a_reward() -> None:
    records = [ScoreRecord(rollout_id=f"r{i}", step=0, rubric_version=0, status="scored", reward=r)
               for i, r in enumerate((1.0, 0.25, 0.0))]
    records.append(ScoreRecord(rollout_id="f", step=0, rubric_version=0, status="failed", reward=0.5, error="x"))
    figures = reward_figures(records)
    assert (figures.n, figures.scored, figures.failed) == (4, 3, 1)
    assert figures.mean == round(1.25 / 3, 6) and sum(figures.histogram) == 3


def _tie_run(tmp_path: Path) -> Path:
    """A step of 16 rollouts: 5 with reward 1 and 11 with 0 (mean 0.3125), 2 of 16 analyzed rollouts named
    as padding (12.5%), written as the stages write them."""
    path = new_run(tmp_path)
    run = RunDir(path)
    from amaris_cli.models import Rollout

    rollouts = [Rollout(id=f"r{i}", input="q", output=f"o{i}", step=0) for i in range(16)]
    store_rollouts(run, 0, rollouts, {"path": "synthetic"})
    scores = [ScoreRecord(rollout_id=f"r{i}", step=0, rubric_version=0, status="scored", reward=1.0 if i < 5 else 0.0,
                          verdicts=[Verdict(criterion_id="correct-answer", score=1.0 if i < 5 else 0.0),
                                    Verdict(criterion_id="shows-reasoning", score=0.0)]) for i in range(16)]
    write_jsonl_atomic(run.step_dir(0) / "scores.jsonl", [s.model_dump(mode="json") for s in scores])
    from amaris_cli import artifacts

    artifacts.record(run, 0, artifacts.SCORES, {"rollouts": artifacts.freshness(run, 0, artifacts.ROLLOUTS).sha})
    hacking = [HackingCount(pattern="verbosity", count=2, prevalence=0.125, known=True)]
    stats = StepStats(step=0, n_rollouts=16, n_scored=16, n_failed=0, mean_reward=0.3125, std_reward=None, criteria=[])
    summary = SummaryRecord(step=0, n_rollouts=16, n_analyzed=16, chunks=1, stats=stats, hacking=hacking,
                            summary=SummaryAnswer(executive_summary="s", reward_hacking="r", rubric_meta_evaluation="m",
                                                  performance_advancement="p", memory_entry="e"))
    write_json_atomic(run.step_dir(0) / "summary.json", summary.model_dump(mode="json"))
    assert reward_figures(scores).mean == 0.3125 and hacking_figures([summary])[0].prevalence == 0.125
    return path


def test_inspect_and_the_report_show_the_same_digits(tmp_path: Path) -> None:
    path = _tie_run(tmp_path)
    shown = invoke("inspect", path)
    assert shown.exit_code == 0, shown.stderr
    row = next(line for line in shown.stderr.splitlines() if line.strip().startswith("0 "))
    assert "0.313" in row and "0.312" not in row, row
    assert "verbosity 13%" in shown.stderr, shown.stderr
    data = json.loads(invoke("inspect", path, "--json").stdout)
    assert data["steps"][0]["mean_reward"] == 0.3125 and len(data["steps"][0]["reward_histogram"]) == 10
    compared = json.loads(invoke("compare", path, "--json").stdout)
    assert compared["runs"][0]["mean_reward"]["0"] == 0.3125

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it in CI): "
                    "the terminal's digits were checked, not the page's")
    out = write_report(RunDir(path), tmp_path / "r.html", note=lambda _: None)[0]
    profile = tmp_path / "profile"
    profile.mkdir()
    browser = Browser(chromium, profile)
    try:
        page = browser.open(out.resolve().as_uri())
        page.wait("document.body.dataset.ready === '1' && !!document.querySelector('#steps-table tr + tr')")
        cells = page.eval("[...document.querySelectorAll('#steps-table tr')][1].innerText")
        assert "0.313" in cells and "verbosity 13%" in cells, cells
    finally:
        browser.close()


def test_serve_says_a_completed_steps_mean_as_inspect_shows_it() -> None:
    """A served step's mean of 0.3125 (5 of 16 rollouts at 1.0) is 0.313 in inspect and the report; the server's
    own line said 0.312 (Python's format rounds a binary half to even)."""
    from amaris_cli.serve.core import completed_line
    from amaris_cli.stages.common import StageOutcome

    line = completed_line(StageOutcome(stage="score", step=3, total=16, done=16, mean_reward=0.3125))
    assert line == f"step 3: complete (16 rollouts, mean reward {shown_number(0.3125)}); evolving in the background"
    assert shown_number(0.3125) == "0.313"


def test_inspect_shows_a_cost_half_up_on_its_value_not_its_float_noise() -> None:
    """A step's cost is the sum of its calls' costs: $0.04995 (an analyzer's calls at $1.25/$10 per 1M tokens) adds up
    to 0.049949999999999994, which `:.4f` showed as 0.0499; by the rule of every figure it is 0.0500 (and 0.0313 for an
    exact $0.03125, which `:.4f` rounds to even and the report's toFixed rounded up)."""
    from rich.console import Console

    from amaris_cli.inspect_view import usage_table

    def shown(cost: float) -> str:
        console = Console(width=120, record=True)
        console.print(usage_table("t", {"analyzer": {"model_calls": 2, "prompt_tokens": 0, "completion_tokens": 0,
                                                     "replayed": 0, "cost": cost}}, priced=True))
        return console.export_text()

    assert "0.0500" in shown(0.049949999999999994)
    assert "0.0313" in shown(0.03125)
