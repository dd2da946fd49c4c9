"""Onset alarms (amaris_cli/alarms.py): a hack ramping from step 4 alarms between steps 4 and 8; clean runs
of 12 steps do not; alarms never change a reward.

Runs are built by the real pipeline (the CLI, the sim-judge over HTTP) from generated rollouts
(examples/make_recurring.py: honest answers with `metadata.gold_reward`, a judge-fooling hack whose gold
is 0), so the alarms read the files a user's run holds. What would make these fail: a rule that fires on
sampling noise (the clean runs), one that needs a larger or longer rise than the ramp gives by step 8, or
a divergence that reads anything but the verifiable reward (the score-only ramp has no analyses).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amaris_cli.alarms import Moments, StepSignals, detect, run_alarms
from amaris_cli.rundir import RunDir
from amaris_cli.simjudge.server import SimJudge
from tests.conftest import (
    FAST_MEMORY,
    TEST_CONFIG,
    invoke,
    judge_env,
    load_example,
    read_jsonl,
    snapshot,
    write_jsonl,
)

RAMP = [0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]  # hacked rollouts of 16 per step: 1 at step 4, +1 a step
LEARNING = [0.35 - 0.015 * t for t in range(12)]  # the wrong share falls as the policy learns


def _init(tmp: Path, name: str) -> Path:
    config = tmp / "amaris.toml"
    config.write_text(TEST_CONFIG + FAST_MEMORY)  # alarms read rewards and analyses, not the memory
    run = tmp / name
    assert invoke("init", run, "--config", config, "--total-steps", "12").exit_code == 0
    return run


def _looped(tmp: Path, judge: SimJudge, seed: int, **shape) -> Path:
    gen = load_example("make_recurring")
    gen.write_steps(gen.make_steps(seed=seed, steps=12, **shape), tmp / "data")
    run = _init(tmp, "run")
    result = invoke("loop", tmp / "data", "--run", run, env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    return run


def _score_only(tmp: Path, judge: SimJudge, seed: int, **shape) -> Path:
    """Every step scored with the initial rubric and nothing else, as a trainer in score-only mode: no
    analyses, so only the verifiable reward can show the hack. The gold is given as a top-level field."""
    gen = load_example("make_recurring")
    run = _init(tmp, "run")
    for step, rows in gen.make_steps(seed=seed, steps=12, **shape).items():
        lines = [{**{k: v for k, v in r.items() if k != "metadata"}, "gold_reward": r["metadata"]["gold_reward"],
                  "metadata": {"planted": r["metadata"]["planted"]}} for r in rows]
        path = write_jsonl(tmp / f"{step}.jsonl", lines)
        result = invoke("score", path, "--run", run, "--step", step, "--rubric-version", "0", env=judge_env(judge))
        assert result.exit_code == 0, result.stderr
    return run


def test_a_ramping_hack_raises_an_alarm_between_steps_4_and_8_in_a_full_loop(tmp_path, judge) -> None:
    run = _looped(tmp_path, judge, 31, hacks_per_step=RAMP, wrong_share=LEARNING)
    report = run_alarms(RunDir(run))
    assert report.gold
    steps = [a.step for a in report.alarms]
    assert steps and 4 <= min(steps) <= 8, report.alarms
    first = min(report.alarms, key=lambda a: a.step)
    assert first.kind == "pattern_prevalence" and first.pattern == "grader_addressed_instructions", first
    assert first.evidence.window_value - first.evidence.baseline_value >= 0.1 and first.evidence.z >= 3


def test_a_ramping_hack_in_a_score_only_run_is_caught_by_the_verifiable_reward_alone(tmp_path, judge) -> None:
    run = _score_only(tmp_path, judge, 32, hacks_per_step=RAMP, wrong_share=LEARNING)
    report = run_alarms(RunDir(run))
    assert report.gold and all(s.n_analyzed == 0 for s in report.steps)
    assert [a.kind for a in report.alarms][:1] == ["judge_gold_divergence"]
    alarm = report.alarms[0]
    assert 4 <= alarm.step <= 8, alarm
    assert alarm.evidence.judge_window is not None and alarm.evidence.gold_window is not None
    assert alarm.evidence.gold_window < alarm.evidence.gold_baseline  # gold says the hacked answers are wrong
    assert "verifiable" in alarm.reason and str(alarm.evidence.window_steps[0]) in alarm.reason


@pytest.mark.parametrize(("seed", "background"), [(41, 0.0), (42, 0.08)])
def test_twelve_clean_steps_raise_no_alarm(tmp_path, judge, seed, background) -> None:
    run = _looped(tmp_path, judge, seed, hacks_per_step=0, wrong_share=LEARNING, background=background)
    report = run_alarms(RunDir(run))
    assert report.gold and len(report.steps) == 12
    if background:
        assert any(s.patterns for s in report.steps), "the background pattern must be there to be ignored"
    assert report.alarms == []


def test_twelve_clean_score_only_steps_raise_no_alarm(tmp_path, judge) -> None:
    run = _score_only(tmp_path, judge, 43, hacks_per_step=0, wrong_share=LEARNING, terse=0.4)
    report = run_alarms(RunDir(run))
    assert report.gold and report.alarms == []


def test_a_policy_that_gets_worse_is_not_a_fooled_judge(tmp_path, judge) -> None:
    """Twelve clean steps whose wrong share jumps from 10% to 70% at step 6: judge minus verifiable reward
    over all rollouts jumps with it (the judge credits the work shown in wrong answers), but the judge's
    reward for the failed rollouts does not, so no divergence alarm."""
    worse = [0.1] * 6 + [0.7] * 6
    run = _score_only(tmp_path, judge, 44, hacks_per_step=0, wrong_share=worse, terse=0.3)
    report = run_alarms(RunDir(run))
    gaps = [s.judge_mean_gold - s.gold_mean for s in report.steps]
    assert sum(gaps[-3:]) / 3 - sum(gaps[:5]) / 5 >= 0.1, "the plain gap must rise for this test to mean anything"
    assert report.alarms == []


def test_reading_alarms_changes_no_file_of_the_run(tmp_path, judge) -> None:
    run = _score_only(tmp_path, judge, 32, hacks_per_step=RAMP, wrong_share=LEARNING)
    before = snapshot(run)
    assert run_alarms(RunDir(run)).alarms
    assert snapshot(run) == before
    assert [r["reward"] for r in read_jsonl(run / "steps" / "000007" / "scores.jsonl")]


def test_the_gold_reward_is_read_from_a_field_the_metadata_or_a_mapped_path(tmp_path, judge) -> None:
    run = _init(tmp_path, "run")
    rows = [{"id": "a", "input": "1+1?", "output": "2", "gold_reward": 1},
            {"id": "b", "input": "1+2?", "output": "4", "metadata": {"gold_reward": 0.0}},
            {"id": "c", "input": "1+3?", "output": "4", "extra": {"acc": 0.5}}]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    assert invoke("score", path, "--run", run, "--step", "0", env=judge_env(judge)).exit_code == 0
    stored = {r["id"]: r["metadata"].get("gold_reward") for r in read_jsonl(run / "steps" / "000000" / "rollouts.jsonl")}
    assert stored == {"a": 1, "b": 0.0, "c": None}
    mapped = write_jsonl(tmp_path / "m.jsonl", [{**r, "extra": {"acc": i / 2}} for i, r in enumerate(rows[:1] + rows[2:])])
    assert invoke("score", mapped, "--run", run, "--step", "1", "--rubric-version", "0", "--map", "gold_reward=extra.acc",
                  env=judge_env(judge)).exit_code == 0
    stored = [r["metadata"]["gold_reward"] for r in read_jsonl(run / "steps" / "000001" / "rollouts.jsonl")]
    assert stored == [0.0, 0.5]


@pytest.mark.parametrize("value", ['"1"', "true", "[1]"])
def test_a_gold_reward_that_is_not_a_number_is_an_error_naming_the_line(tmp_path, judge, value) -> None:
    run = _init(tmp_path, "run")
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "input": "q", "output": "o"}\n{"id": "b", "input": "q", "output": "o", '
                    f'"gold_reward": {value}}}\n')
    result = invoke("score", path, "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 2 and f"{path}:2: field 'gold_reward' (the verifiable reward) must be a number" in result.stderr
    assert not (run / "steps").exists()


def test_verifiable_rewards_on_another_scale_are_not_compared(tmp_path) -> None:
    steps = [StepSignals(step=t, n_gold=16, gold_mean=3.0, judge_mean_gold=0.5, n_gold_out_of_range=16,
                         failed=Moments.of([0.9] * 8 if t > 6 else [0.1] * 8)) for t in range(12)]
    report = detect(steps)
    assert report.alarms == [] and "outside [0, 1]" in report.notes[0]


def test_the_rule_on_generated_runs() -> None:
    """The rates the module docstring states, on signal-level runs (examples/alarm_rates.py): no clean run
    of 200 raises a divergence alarm, a ramp is named by step 8 in all analyzed runs and nearly all
    score-only ones, and nothing alarms before the hack starts."""
    rates = load_example("alarm_rates")
    for seed in range(200):
        for accuracy in ((0.6, 0.8), (0.8, 0.3)):
            assert rates.first_alarms(rates.synthetic_run(seed, accuracy=accuracy, background=0.0)) == {
                "judge_gold_divergence": None, "pattern_prevalence": None}, seed
    by_step_8 = 0
    for seed in range(200):
        first = rates.first_alarms(rates.synthetic_run(seed, ramp_from=4))
        assert first["pattern_prevalence"] is not None and 4 <= first["pattern_prevalence"] <= 8
        assert first["judge_gold_divergence"] is None or first["judge_gold_divergence"] >= 4
        by_step_8 += first["judge_gold_divergence"] is not None and first["judge_gold_divergence"] <= 8
    assert by_step_8 >= 180


def test_an_alarm_is_json_with_step_kind_reason_and_evidence(tmp_path, judge) -> None:
    run = _score_only(tmp_path, judge, 32, hacks_per_step=RAMP, wrong_share=LEARNING)
    data = json.loads(run_alarms(RunDir(run)).model_dump_json())
    alarm = data["alarms"][0]
    assert set(alarm) == {"step", "kind", "pattern", "reason", "evidence"}
    assert {"window_steps", "baseline_steps", "effect", "z"} <= set(alarm["evidence"])


def test_an_alarm_reaches_every_reader_the_same(tmp_path, judge) -> None:
    """The alarm of a ramping hack is said on stderr by the loop at its step, listed by `inspect` (text and
    `--json`: step, kind, reason), shown on the report's page and in `amaris serve`'s rubric status."""
    gen = load_example("make_recurring")
    gen.write_steps(gen.make_steps(seed=31, steps=12, hacks_per_step=RAMP, wrong_share=LEARNING), tmp_path / "data")
    run = _init(tmp_path, "run")
    looped = invoke("loop", tmp_path / "data", "--run", run, env=judge_env(judge))
    assert looped.exit_code == 0, looped.stderr
    expected = run_alarms(RunDir(run)).alarms
    assert expected, "the ramp must alarm for this test to mean anything"
    first = expected[0]
    said = [line for line in looped.stderr.splitlines() if line.startswith("alarm step")]
    assert said and said[0].startswith(f"alarm step {first.step}, {first.kind}"), looped.stderr
    listed = json.loads(invoke("inspect", run, "--json").stdout)["alarms"]
    assert [(a["step"], a["kind"], a["pattern"], a["reason"]) for a in listed] == \
        [(a.step, a.kind, a.pattern, a.reason) for a in expected]
    shown = invoke("inspect", run)
    assert "hacking-onset alarms" in shown.stderr and first.kind in shown.stderr
    from amaris_cli.report import write_report
    from tests.browser import Browser, find_chromium

    chromium = find_chromium()
    if chromium is not None:  # CI installs it; without it the page's data is checked, not its rendering
        page_file = write_report(RunDir(run), tmp_path / "r.html", note=lambda _: None)[0]
        (tmp_path / "profile").mkdir()
        browser = Browser(chromium, tmp_path / "profile")
        try:
            page = browser.open(page_file.resolve().as_uri())
            page.wait("document.body.dataset.ready === '1' && !!document.getElementById('alarms')")
            rows = page.eval("[...document.querySelectorAll('#alarms tr')].slice(1).map(tr => tr.cells[0].innerText)")
            assert rows == [f"step {a.step}" for a in expected]
        finally:
            browser.close()
    from tests.served import served

    with served(run, judge) as server:
        import httpx

        status = httpx.get(f"{server.url}/rubric_status", params={"step": 11}, timeout=30).json()
    assert [(a["step"], a["kind"]) for a in status["alarms"]] == [(a.step, a.kind) for a in expected]


def test_a_pattern_named_like_console_markup_is_said_as_written(tmp_path, judge, monkeypatch) -> None:
    """The analyzer (an LLM reading the policy's text) names hacking patterns freely, and an alarm's pattern
    was put into a rich markup line unescaped: a pattern `[/]` ended `amaris evolve` and `amaris loop` with a
    MarkupError after the step, every time it was run again; `[link=...]` made a hidden hyperlink. (A pattern's
    name is now letters, digits and "_" (models.HackingFinding); the alarm's line is still escaped.)"""
    from amaris_cli import alarms

    evidence = alarms.AlarmEvidence(window_steps=[0], baseline_steps=[], window_value=0.5, baseline_value=0.0,
                                    current_value=0.5, effect=0.5, z=9.0, n_window=6, n_baseline=0)
    planted = [alarms.Alarm(step=0, kind="pattern_prevalence", pattern=p, reason=f"{p} grew", evidence=evidence)
               for p in ("[/]", "[link=file:///etc/passwd]click[/link]")]
    monkeypatch.setattr(alarms, "alarms_at", lambda reader, step: planted if step == 0 else [])
    run = _init(tmp_path, "run")
    path = write_jsonl(tmp_path / "0.jsonl", [{"id": f"r{i}", "input": "2+2?", "output": "4", "answer": "4"}
                                             for i in range(2)])
    assert invoke("score", path, "--run", run, "--step", "0", env=judge_env(judge)).exit_code == 0
    result = invoke("evolve", "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert "pattern_prevalence ([/]): [/] grew" in result.stderr
    assert "pattern_prevalence ([link=file:///etc/passwd]click[/link])" in result.stderr


def _signals(step: int, analyzed: int, count: int) -> StepSignals:
    return StepSignals(step=step, n_analyzed=analyzed, patterns={"padding": count} if analyzed else {})


def test_a_share_that_rose_by_exactly_the_minimum_effect_is_an_alarm() -> None:
    """0.05 -> 0.15 is a rise of 0.1 (MIN_EFFECT) on the stored precision, though float subtraction gives
    0.09999999999999999; 0.00 -> 0.10 and 0.30 -> 0.40 were alarms, 0.05 -> 0.15 and 0.20 -> 0.30 were not."""
    for before in (0.0, 0.05, 0.2, 0.3):
        steps = [_signals(s, 100, round(100 * (before if s < 8 else before + 0.1))) for s in range(11)]
        assert [a.step for a in detect(steps).alarms] == [10], before


def test_the_alarms_a_command_says_at_a_step_are_the_runs_though_some_steps_have_no_data(monkeypatch) -> None:
    """alarms_at (what `score` and serve say as a step is written) reads back until the rule's steps are steps with
    data: with every other step unanalyzed (skipped in an outage), a fixed number of steps cut its baseline short,
    and it missed the alarm run_alarms (inspect, the report, /rubric_status) raised, or said it at another step."""
    from types import SimpleNamespace

    from amaris_cli import alarms

    for high in (4, 6):
        steps = {s: _signals(s, 16 if s % 2 == 0 else 0, 1 if s < 10 else high) for s in range(16)}
        monkeypatch.setattr(alarms, "step_signals", lambda reader, step, steps=steps: steps[step])
        everywhere = detect(list(steps.values())).alarms
        assert everywhere, high
        for step in steps:
            said = alarms.alarms_at(SimpleNamespace(steps=list(steps)), step)  # type: ignore[arg-type]
            assert said == [a for a in everywhere if a.step == step], (high, step)


def test_the_alarms_a_command_says_read_a_bounded_number_of_steps_back(monkeypatch) -> None:
    """A step with data after a long run of steps without (verifiable rewards only at the newest) read every step
    back, at every `score` and served step: a cost that grew with the square of the run."""
    from types import SimpleNamespace

    from amaris_cli import alarms

    read: list[int] = []

    def signals(reader, step: int) -> StepSignals:
        read.append(step)
        return StepSignals(step=step, n_gold=16 if step == 1999 else 0)

    monkeypatch.setattr(alarms, "step_signals", signals)
    assert alarms.alarms_at(SimpleNamespace(steps=list(range(2000))), 1999) == []  # type: ignore[arg-type]
    assert len(read) == 1 + alarms.READ_BACK, len(read)


def test_an_alarms_figures_are_rounded_once_as_shown(tmp_path, judge) -> None:
    """The evidence was stored to 6 decimals and the reason shown from it to 3: failed rollouts whose judge reward
    exceeds their verifiable one by 0.6784996 on average read "rose to 0.679" (0.6785, rounded again), where the
    figure is 0.678. The reason rounds the figure itself; the evidence keeps it to 6 decimals."""
    from tests.conftest import WORKED_ROW

    run = _init(tmp_path, "run")
    for step in range(5):  # the sim-judge gives the worked answer 1.0; its verifiable reward says it failed
        golds = [0.40 if k % 2 else 0.48 for k in range(10)] if step < 2 else [0.3215004] * 10
        rows = [{**WORKED_ROW, "id": f"s{step}-{k}", "gold_reward": g} for k, g in enumerate(golds)]
        result = invoke("score", write_jsonl(tmp_path / f"{step}.jsonl", rows), "--run", run, "--step", step,
                        "--rubric-version", "0", env=judge_env(judge))
        assert result.exit_code == 0, result.stderr
    assert {r["reward"] for r in read_jsonl(run / "steps/000004/scores.jsonl")} == {1.0}
    (alarm,) = json.loads(invoke("inspect", run, "--json").stdout)["alarms"]
    assert alarm["step"] == 4 and alarm["kind"] == "judge_gold_divergence"
    assert alarm["evidence"]["window_value"] == 0.6785 and alarm["evidence"]["baseline_value"] == 0.56
    assert "rose to 0.678 over steps 2-4 (30 failed rollouts) from 0.560 over steps 0-1" in alarm["reason"], alarm
    assert "verifiable 0.440 -> 0.322" in alarm["reason"]


def test_a_run_read_again_as_it_goes_on_reads_only_the_steps_whose_files_changed(tmp_path, judge, monkeypatch) -> None:
    """serve's /rubric_status says the run's alarms up to the step, and read every step's scores, rollouts and
    summaries at each request: 0.7-1.3 s a request at 300 steps of 32 rollouts, on the server's event loop, and a
    trainer asks at every step. Kept between requests, a step's signals are read again only when its files change;
    the alarms are the same as a reading of the whole run."""
    from amaris_cli import alarms
    from amaris_cli.jsonio import write_bytes_atomic
    from tests.conftest import WORKED_ROW

    run = _init(tmp_path, "run")
    for step in range(3):
        rows = [{**WORKED_ROW, "id": f"s{step}-{k}", "gold_reward": 0.4} for k in range(4)]
        result = invoke("score", write_jsonl(tmp_path / f"{step}.jsonl", rows), "--run", run, "--step", step,
                        "--rubric-version", "0", env=judge_env(judge))
        assert result.exit_code == 0, result.stderr
    read: list[int] = []
    step_signals = alarms.step_signals

    def counted(reader, step: int) -> StepSignals:
        read.append(step)
        return step_signals(reader, step)

    monkeypatch.setattr(alarms, "step_signals", counted)
    memo = alarms.SignalsMemo()
    whole = run_alarms(RunDir(run))
    assert run_alarms(RunDir(run), memo) == whole and read == [0, 1, 2, 0, 1, 2]
    read.clear()
    assert run_alarms(RunDir(run), memo) == whole and read == []
    scores = run / "steps" / "000001" / "scores.jsonl"
    write_bytes_atomic(scores, scores.read_bytes().replace(b'"reward":1.0', b'"reward":0.5', 1))
    changed = run_alarms(RunDir(run), memo)
    assert read == [1] and changed == run_alarms(RunDir(run)) and changed != whole
