"""`inspect` shows what a run holds, with tokens turned into cost when prices are configured."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, TEST_CONFIG, clean_env, invoke, judge_env, new_run, steps_read


def test_inspect_reports_steps_updates_hacking_memory_and_cost(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + '\n[prices.judge-model]\nprompt = 1.0\ncompletion = 4.0\n')
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim)).exit_code == 0
    data = json.loads(invoke("inspect", run, "--json").stdout)
    assert [s["step"] for s in data["steps"]] == [0, 1, 2]
    assert all(s["rollouts"] == 16 and sum(s["reward_histogram"]) == 16 for s in data["steps"])
    assert {s["strategy"] for s in data["steps"]} <= {"MAINTENANCE", "CORRECTIVE", "ADVANCEMENT"}
    assert any(h["pattern"] == "grader_addressed_instructions" for s in data["steps"] for h in s["hacking"])
    assert data["memory_entries"] == {"analysis": 48, "summary": 3, "update": 3}
    # each step's one update, its edits once (a reader that counted the global update twice doubled them)
    for s in data["steps"]:
        update = json.loads((run / "steps" / f"{s['step']:06d}" / "update.json").read_text())
        assert s["updates"] == 1 and s["strategies"] == {update["strategy"]: 1}
        assert [m["op"] for m in s["applied"]] == [m["op"] for m in update["applied"]]
    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    prompt = sum(c["usage"]["prompt_tokens"] for c in calls)
    completion = sum(c["usage"]["completion_tokens"] for c in calls)
    assert data["totals"]["prompt_tokens"] == prompt
    # the judge's scale check belongs to no step: its own key, not "None"
    assert data["usage"]["run"]["scorer"]["calls"] == sum(c["step"] is None for c in calls) == 1
    assert set(data["usage"]) == {"0", "1", "2", "run"}
    assert abs(data["totals"]["cost"] - (prompt * 1.0 + completion * 4.0) / 1e6) < 1e-6
    detail = json.loads(invoke("inspect", run, "--step", "1", "--json").stdout)["detail"]
    assert detail["criteria"] and detail["rubric"][0]["anchor"] is True and detail["retrieval"]["static"]
    assert set(detail["usage"]) >= {"scorer", "analyzer", "updater"}
    shown = invoke("inspect", run, "--step", "1")
    assert shown.exit_code == 0 and "tokens and cost by agent" in shown.stderr and "criteria" in shown.stderr
    # The step alone: its rows of the overview, not the other steps' nor the run's totals (it printed them first).
    assert "step 1 of 3 steps" in " ".join(shown.stderr.split()) and "memory entries" not in shown.stderr
    rows = [line.split()[0] for line in shown.stderr.splitlines() if re.match(r"\s+\d+\s+(v\d|updated|evolved)", line)]
    assert rows == ["1", "1"], shown.stderr


def test_inspect_reads_at_80_columns_and_a_missing_step_is_an_error(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim)).exit_code == 0
    # A real process with COLUMNS=80 and stderr not a terminal, as when a person pipes or a script reads it.
    env = clean_env(COLUMNS="80")
    shown = subprocess.run([sys.executable, "-m", "amaris_cli", "inspect", str(run), "--step", "2"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    text = shown.stderr
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text and "..." not in text, "nothing is cut"
    for header in ("step", "rubric", "rollouts", "failed", "mean", "sd", "distribution", "update", "edits", "hacking",
                   "criterion", "kind", "weight", "rate", "spread", "at 1", "at 0", "calls", "tokens in", "tokens out"):
        assert re.search(rf"(^|\s){re.escape(header)}(\s|$)", text, re.M), header
    for explained in ("sd: mean reward and its standard deviation", "failed: rollouts the judge could not score",
                      "rate: mean verdict", "prevalence of a pitfall (higher = worse)", "at 1 / at 0:", "* anchor"):
        assert explained in " ".join(text.split()), explained
    flowing = " ".join(text.split())  # wrapped cells joined: whole criterion texts and pattern names are there
    rubric = json.loads((run / "rubrics" / "step-000002.json").read_text())
    for c in rubric["anchors"] + rubric["adaptive"]:
        assert all(word in flowing for word in c["text"].split()), c["text"]
    assert "grader_addressed_instructions" in text
    update = json.loads((run / "steps" / "000002" / "update.json").read_text())
    assert update["strategy"] in text and " ".join(update["rationale"].split()) in flowing

    missing = invoke("inspect", run, "--step", "9")
    assert missing.exit_code == 2
    assert "step 9 does not exist" in missing.stderr and "steps 0-2" in missing.stderr
    assert "vNone" not in missing.stderr + missing.stdout
    assert invoke("inspect", run, "--step", "9", "--json").exit_code == 2


def test_loop_and_compare_read_at_80_columns_with_nothing_cut_and_runs_told_apart(tmp_path: Path, sim) -> None:
    """Found by a new-user walkthrough, with stderr not a terminal: `loop`'s step lines were wrapped mid-sentence,
    its calls table cut agent names ("meta_summar…") and its last column, and `compare` named two runs called
    `run` in different directories `run` both, and cut its table of runs."""
    runs = [tmp_path / "a" / "run", tmp_path / "b" / "run"]
    env = clean_env(COLUMNS="80", **judge_env(sim))
    for run in runs:
        run.parent.mkdir()
        assert invoke("init", run, "--config", write_config(tmp_path)).exit_code == 0
        looped = subprocess.run([sys.executable, "-m", "amaris_cli", "loop", str(EXAMPLES / "math"), "--run", str(run),
                                 "--steps", "0:1"], env=env, capture_output=True, text=True, timeout=300)
        assert looped.returncode == 0, looped.stderr
        lines = looped.stderr.splitlines()
        steps = [line for line in lines if line.startswith("step ")]
        assert len(steps) == 2 and all(line.rstrip().endswith("s") and " tokens, " in line for line in steps), lines
        table = lines[lines.index(next(line for line in lines if line.startswith("LLM calls by agent"))):]
        assert max(len(line) for line in table) <= 80 and "…" not in looped.stderr
        for agent in ("meta_summarizer", "query_generator", "summarizer", "analyzer", "scorer", "updater"):
            assert any(line.split()[:1] == [agent] for line in table), agent
        assert re.search(r"agent\s+calls\s+tokens in\s+tokens out\s+from record", looped.stderr)  # as inspect's
    shown = subprocess.run([sys.executable, "-m", "amaris_cli", "compare", *map(str, runs)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert max(len(line) for line in shown.stderr.splitlines()) <= 80 and "…" not in shown.stderr
    assert re.search(r"step\s+a/run\s+b/run\s+comparable", shown.stderr), shown.stderr
    assert re.search(r"calls sent to a model\s+\d+\s+\d+", shown.stderr) and "tokens spent" in shown.stderr


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    return config


def test_tokens_count_only_calls_sent_to_a_model(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    source, replayed = tmp_path / "run", tmp_path / "replayed"
    assert invoke("init", source, "--config", config).exit_code == 0
    assert invoke("loop", EXAMPLES / "math", "--run", source, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    result = invoke("replay", source, "--out", replayed, "--offline", "--json", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    # The replay's own figures agree: it printed the record's tokens as its own (found by a new-user walkthrough).
    usage = json.loads(result.stdout)["usage"].values()
    assert sum(u["replayed"] for u in usage) > 0 and sum(u["requests"] for u in usage) == 0
    assert sum(u["prompt_tokens"] + u["completion_tokens"] for u in usage) == 0
    original = json.loads(invoke("inspect", source, "--json").stdout)["totals"]
    again = json.loads(invoke("inspect", replayed, "--json").stdout)["totals"]
    assert original["model_calls"] > 0 and original["recorded_calls"] == 0 and original["prompt_tokens"] > 0
    assert again["model_calls"] == 0 and again["recorded_calls"] == original["model_calls"]
    assert again["prompt_tokens"] == 0 and again["completion_tokens"] == 0, "a replayed call spent no tokens"


def by_hand(scores: list[dict]) -> dict[str, tuple[float, float, float, float]]:
    """Per criterion: mean verdict, population standard deviation, share at 1 and share at 0."""
    verdicts: dict[str, list[float]] = {}
    for s in scores:
        if s["status"] == "scored":
            for v in s["verdicts"]:
                verdicts.setdefault(v["criterion_id"], []).append(v["score"])
    out = {}
    for cid, vs in verdicts.items():
        mean = sum(vs) / len(vs)
        out[cid] = (mean, (sum((v - mean) ** 2 for v in vs) / len(vs)) ** 0.5,
                    sum(v == 1 for v in vs) / len(vs), sum(v == 0 for v in vs) / len(vs))
    return out


def shown_stats(detail: dict) -> dict[str, tuple[float, float, float, float]]:
    return {c["criterion_id"]: (c["mean"], c["spread"], c["saturation_top"], c["saturation_bottom"])
            for c in detail["criteria"]}


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for cid, values in want.items():
        assert all(abs(g - w) < 1e-6 for g, w in zip(got[cid], values, strict=True)), (cid, got[cid], values)


def test_a_scored_step_without_a_summary_shows_its_criteria_from_the_scores(tmp_path: Path, sim) -> None:
    """The current step of an online or served run is scored, not summarized: its verdicts are there."""
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    assert invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0",
                  env=judge_env(sim)).exit_code == 0
    scores_file = run / "steps" / "000000" / "scores.jsonl"
    scores = [json.loads(line) for line in scores_file.read_text().splitlines()]
    detail = json.loads(invoke("inspect", run, "--step", "0", "--json").stdout)["detail"]
    assert detail["criteria_from"] == "scores" and detail["criteria_why"] == "no summary yet"
    expected = by_hand(scores)
    assert {m for m, _, _, _ in expected.values()} != {0.0}, "the example verdicts vary"
    assert_close(shown_stats(detail), expected)
    shown = invoke("inspect", run, "--step", "0").stderr
    flowing = " ".join(shown.split())
    assert "statistics computed from the scores: no summary yet" in flowing
    row = next(line for line in shown.splitlines() if line.strip().startswith("* The final answer"))
    mean, spread, top, bottom = expected["correct-answer"]
    assert row.split()[-4:] == [f"{mean:.2f}", f"{spread:.2f}", f"{top:.2f}", f"{bottom:.2f}"], row

    # Summarized: the numbers come from stats.json, and are the same.
    looped = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim))
    assert looped.exit_code == 0 and "\n1 step; updates 0:" in looped.stderr, looped.stderr
    overview = " ".join(invoke("inspect", run).stderr.split())
    assert ": 1 step, rubric versions" in overview and "16 analyses, 1 summary, 1 update" in overview, overview
    detail = json.loads(invoke("inspect", run, "--step", "0", "--json").stdout)["detail"]
    assert detail["criteria_from"] == "stats.json" and detail["criteria_why"] is None
    stats = json.loads((run / "steps" / "000000" / "stats.json").read_text())
    assert detail["criteria"] == stats["criteria"]
    assert_close(shown_stats(detail), expected)
    assert "computed from the scores" not in " ".join(invoke("inspect", run, "--step", "0").stderr.split())

    # The scores change after the summary (here by hand): stats.json is stale, the scores are read again.
    flipped = [dict(s, verdicts=[dict(v, score=1.0) if v["criterion_id"] == "correct-answer" else v
                                 for v in s["verdicts"]]) for s in scores]
    scores_file.write_text("".join(json.dumps(s) + "\n" for s in flipped))
    detail = json.loads(invoke("inspect", run, "--step", "0", "--json").stdout)["detail"]
    assert detail["criteria_from"] == "scores" and detail["criteria_why"] == "stats.json is stale"
    assert shown_stats(detail)["correct-answer"] == (1.0, 0.0, 1.0, 0.0)
    # The overview says so too: the step is stale, not the "updated" step it was.
    assert detail["state"] == "stale" and "scores.jsonl" in detail["stale"], detail
    assert [s["state"] for s in json.loads(invoke("inspect", run, "--json").stdout)["steps"]] == ["stale"]
    rows = [line.split()[:2] for line in invoke("inspect", run).stderr.splitlines()]
    assert ["0", "stale"] in rows, rows  # the update table's row of step 0
    assert_close(shown_stats(detail), by_hand(flipped))


# --- red team -----------------------------------------------------------------------------------------------
# `inspect`'s criterion statistics computed from a step's files (stepstats.py): a run file edited by hand into
# a record amaris cannot read is an error naming the file and line, never a traceback.


@pytest.fixture
def scored_run(tmp_path: Path, sim) -> Path:
    run = new_run(tmp_path)
    result = invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    return run


@pytest.mark.parametrize(("name", "edit"), [
    ("rollouts.jsonl", {"input": 5}),
    ("rollouts.jsonl", {"surprise": 1}),
    ("scores.jsonl", {"reward": "high"}),
    ("scores.jsonl", {"status": "great"}),
])
def test_a_hand_edited_record_is_an_error_naming_file_and_line(scored_run: Path, name: str, edit: dict) -> None:
    path = scored_run / "steps/000000" / name
    lines = path.read_text().splitlines()
    lines[3] = json.dumps({**json.loads(lines[3]), **edit})
    path.write_text("\n".join(lines) + "\n")
    result = invoke("inspect", scored_run, "--step", "0")
    assert result.exit_code != 0
    assert "Traceback" not in result.stdout + result.stderr
    message = " ".join(result.stderr.split())
    assert f"{path}:4:" in message, message
    assert next(iter(edit)) in message, message


def test_inspect_and_the_report_read_each_steps_analyses_once_and_hold_one_steps(tmp_path: Path, sim,
                                                                                   monkeypatch) -> None:
    """The run reader kept every step's analyses for the whole command, to count the analyzed ones twice (the
    overview, the memory's entries): 40 MB of a 150 MB `inspect` at 300 steps of 32 rollouts, growing with the run.
    It keeps the count, and the records of the step it reads (the report shows them beside its figures)."""
    from amaris_cli import artifacts
    from amaris_cli.inspection import inspect_run
    from amaris_cli.reader import RunReader
    from amaris_cli.report.collect import collect
    from amaris_cli.rundir import RunDir

    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim)).exit_code == 0
    loads = steps_read(monkeypatch, artifacts, "load_analyses")
    inspected = inspect_run(RunDir(run))
    assert sorted(loads) == [0, 1, 2] and inspected["memory_entries"]["analysis"] == 48
    loads.clear()
    collect(RunDir(run))
    assert sorted(loads) == [0, 1, 2]
    reader = RunReader(RunDir(run))
    assert [reader.overview(s).analyzed for s in reader.steps] == [16, 16, 16]
    assert reader.memory_entries()["analysis"] == 48 and reader.analyses.cache_info().currsize == 1


def test_inspect_of_one_step_reads_that_step_alone(tmp_path: Path, sim, monkeypatch) -> None:
    """`inspect --step N` built every step's overview, the alarms and the run's flip rates, and printed one step's
    rows: 6 s of 9 at 300 steps of 32 rollouts. It reads the steps it prints; `--json` keeps the whole run."""
    from amaris_cli import artifacts

    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim)).exit_code == 0
    scores, analyses = steps_read(monkeypatch, artifacts, "load_scores"), steps_read(monkeypatch, artifacts, "load_analyses")
    shown = invoke("inspect", run, "--step", "1")
    assert shown.exit_code == 0 and "step 1 of 3 steps" in " ".join(shown.stderr.split()), shown.stderr
    assert set(scores) == {1} and set(analyses) == {1}
    scores.clear()
    assert [s["step"] for s in json.loads(invoke("inspect", run, "--step", "1", "--json").stdout)["steps"]] == [0, 1, 2]
    assert set(scores) == {0, 1, 2}
