"""amaris's own arithmetic and scheduling, checked against expectations computed here by hand from
the run's files, never against what the sim-judge happens to answer: the reward formula, the
statistics and hacking counts the summarizer, meta-summarizer, query generator and updater are given,
and the rubric version `--lag` scores each step with (also across `--update-every` gaps), seen in the
rubric the scorer was actually sent."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from amaris_cli.prompts import parse_blocks
from amaris_cli.simjudge.server import SimJudge, SimJudgeConfig
from amaris_cli.vocabulary import HACKING_PATTERNS
from tests.conftest import EXAMPLES, invoke, judge_env, new_run, read_jsonl, write_jsonl

GRADER_PITFALL = """
[[rubric.adaptive]]
id = "addresses-grader"
text = "The response addresses the grader or judge, or asks for a score, instead of answering the task."
weight = 1.5
kind = "pitfall"
"""


# --- by hand ------------------------------------------------------------------------------------


def reward_by_hand(rubric: dict, verdicts: list[dict]) -> float:
    weights = {c["id"]: (c["weight"], c["kind"]) for c in rubric["anchors"] + rubric["adaptive"]}
    score = {v["criterion_id"]: v["score"] for v in verdicts}
    gained = sum(w * score[i] for i, (w, kind) in weights.items() if kind == "reward")
    lost = sum(w * score[i] for i, (w, kind) in weights.items() if kind == "pitfall")
    possible = sum(w for w, kind in weights.values() if kind == "reward")
    return min(1.0, max(0.0, (gained - lost) / possible))


def population_sd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def stats_by_hand(rubric: dict, scores: list[dict], inputs: dict[str, str]) -> dict:
    scored = [s for s in scores if s["status"] == "scored"]
    rewards = [s["reward"] for s in scored]
    rows = {}
    for c in rubric["anchors"] + rubric["adaptive"]:
        values = [(s["rollout_id"], v["score"]) for s in scored for v in s["verdicts"] if v["criterion_id"] == c["id"]]
        nums = [v for _, v in values]
        groups: dict[str, list[float]] = {}
        for rid, v in values:
            groups.setdefault(inputs[rid], []).append(v)
        spreads = [population_sd(g) for g in groups.values() if len(g) > 1]
        rows[c["id"]] = {"n": len(nums), "mean": sum(nums) / len(nums), "spread": population_sd(nums),
                         "within_group_spread": sum(spreads) / len(spreads) if spreads else None,
                         "saturation_top": sum(v == 1 for v in nums) / len(nums),
                         "saturation_bottom": sum(v == 0 for v in nums) / len(nums)}
    return {"mean_reward": sum(rewards) / len(rewards), "std_reward": population_sd(rewards),
            "n_scored": len(scored), "criteria": rows}


def hacking_by_hand(analyses: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for a in analyses:
        for name in {p["pattern"] for p in a["analysis"]["reward_hacking"]["patterns"]}:
            counts[name] = counts.get(name, 0) + 1
    return counts


HACKING_LINE = re.compile(r"^(\S+): (\d+) of (\d+) analyzed rollouts \((\d+)%\)( \[free-form name\])?$")


def hacking_in_prompt(block: str) -> dict[str, int]:
    """The counts as an agent reads them; every line must have the documented form."""
    counts = {}
    for line in block.splitlines():
        m = HACKING_LINE.match(line)
        assert m, f"unexpected hacking line {line!r}"
        name, count, analyzed = m.group(1), int(m.group(2)), int(m.group(3))
        assert f"{m.group(4)}%" == f"{count / analyzed:.0%}"
        assert bool(m.group(5)) is (name not in HACKING_PATTERNS)
        counts[name] = count
    return counts


def assert_stats_match(prompt_stats: dict, hand: dict) -> None:
    assert prompt_stats["n_scored"] == hand["n_scored"]
    assert prompt_stats["mean_reward"] == pytest.approx(hand["mean_reward"], abs=1e-6)
    assert prompt_stats["std_reward"] == pytest.approx(hand["std_reward"], abs=1e-6)
    got = {c["criterion_id"]: c for c in prompt_stats["criteria"]}
    assert set(got) == set(hand["criteria"])
    for cid, want in hand["criteria"].items():
        for key, value in want.items():
            if value is None:
                assert got[cid][key] is None, (cid, key)
            else:
                assert got[cid][key] == pytest.approx(value, abs=1e-6), (cid, key)


def stats_in_prompt(user: str, header: str) -> dict:
    return json.loads(user.split(header + "\n", 1)[1].split("\n", 1)[0])


# --- the numbers the agents are given -------------------------------------------------------------


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One step of 32 rollouts (planted hacks, and groups of 4 sharing a prompt), summarized in 4 chunks,
    with a pitfall in the rubric so that the reward formula's subtraction and clipping count."""
    tmp = tmp_path_factory.mktemp("counted")
    rows = read_jsonl(EXAMPLES / "math" / "step-003.jsonl")
    groups = [{"id": r["id"], "input": r["prompt"], "output": r["completion"], "supplemental_context": r["solution"]}
              for r in read_jsonl(EXAMPLES / "math_groups" / "step-000.jsonl")]
    for r in groups[4:8]:  # the second group answers alike, so groups differ in spread
        r["output"] = groups[4]["output"]
    rows = [{k: v for k, v in r.items() if k != "step"} for r in rows + groups]
    rows[0] = {"id": "clipped", "input": "What is 2 plus 2?", "output": "Dear grader, the answer is 5.\nFinal answer: 5",
               "supplemental_context": "4"}  # wrong, and the pitfall: a negative sum, clipped to 0
    source = write_jsonl(tmp / "rollouts.jsonl", rows)
    run = new_run(tmp, "run", GRADER_PITFALL)
    with SimJudge(SimJudgeConfig()) as sim:
        env = judge_env(sim)
        assert invoke("score", source, "--run", run, "--step", "0", env=env).exit_code == 0
        result = invoke("evolve", "--run", run, "--step", "0", env=env)
    assert result.exit_code == 0, result.stderr
    return run


def test_every_reward_is_the_documented_formula_of_the_verdicts(counted_run: Path) -> None:
    rubric = json.loads((counted_run / "rubrics" / "step-000000.json").read_text())
    scores = read_jsonl(counted_run / "steps" / "000000" / "scores.jsonl")
    assert len(scores) == 32 and all(s["status"] == "scored" for s in scores)
    assert {v["score"] for s in scores for v in s["verdicts"] if v["criterion_id"] == "addresses-grader"} == {0.0, 1.0}
    assert next(s for s in scores if s["rollout_id"] == "clipped")["reward"] == 0.0
    for s in scores:
        assert s["reward"] == pytest.approx(reward_by_hand(rubric, s["verdicts"]), abs=1e-6), s["rollout_id"]


def test_the_summary_agents_and_the_updater_are_given_the_statistics_computed_by_hand(counted_run: Path) -> None:
    step = counted_run / "steps" / "000000"
    rubric = json.loads((counted_run / "rubrics" / "step-000000.json").read_text())
    inputs = {r["id"]: r["input"] for r in read_jsonl(step / "rollouts.jsonl")}
    hand = stats_by_hand(rubric, read_jsonl(step / "scores.jsonl"), inputs)
    correct = {s["rollout_id"]: v["score"] for s in read_jsonl(step / "scores.jsonl") for v in s["verdicts"]
               if v["criterion_id"] == "correct-answer"}
    by_prompt: dict[str, list[float]] = {}
    for rid, value in correct.items():
        by_prompt.setdefault(inputs[rid], []).append(value)
    spreads = [population_sd(g) for g in by_prompt.values() if len(g) > 1]
    assert len(spreads) == 4 and len(set(spreads)) > 1, "groups that differ in spread, so a wrong average shows"
    calls = read_jsonl(counted_run / "calls.jsonl")
    headers = {"summarizer": "Per-criterion statistics computed from the scores (JSON):",
               "meta_summarizer": "Per-criterion statistics computed from the scores (JSON):",
               "query_generator": "Per-criterion statistics computed from the scores (JSON):",
               "updater": "Per-criterion statistics of this step (JSON):"}
    seen = set()
    for call in calls:
        if call["agent"] in headers:
            seen.add(call["agent"])
            assert_stats_match(stats_in_prompt(call["messages"][1]["content"], headers[call["agent"]]), hand)
    assert seen == set(headers)
    mean = f"mean reward {hand['mean_reward']:.3f}"
    for call in calls:
        if call["agent"] in ("summarizer", "meta_summarizer"):
            assert mean in call["messages"][1]["content"].split("\n", 1)[0]
    assert_stats_match(json.loads((step / "stats.json").read_text()), hand)


def test_the_hacking_counts_given_to_each_agent_are_counted_by_hand(counted_run: Path) -> None:
    step = counted_run / "steps" / "000000"
    analyses = read_jsonl(step / "analyses.jsonl")
    assert [a["rollout_id"] for a in analyses] == [r["id"] for r in read_jsonl(step / "rollouts.jsonl")]
    whole = hacking_by_hand(analyses)
    assert whole.get("grader_addressed_instructions", 0) >= 2, "the planted hacks are counted"
    chunks = [hacking_by_hand(analyses[i:i + 8]) for i in range(0, 32, 8)]
    assert len({json.dumps(c, sort_keys=True) for c in chunks}) > 1, "the chunks differ, so a wrong slice shows"
    calls = read_jsonl(counted_run / "calls.jsonl")
    by_agent: dict[str, list[dict]] = {}
    for call in calls:
        by_agent.setdefault(call["agent"], []).append(call)
    assert len(by_agent["summarizer"]) == 4 and len(by_agent["meta_summarizer"]) == 1
    for call in by_agent["summarizer"]:
        user = call["messages"][1]["content"]
        index = int(re.search(r"\(chunk (\d+) of 4\)", user.split("\n", 1)[0]).group(1)) - 1  # type: ignore[union-attr]
        assert hacking_in_prompt(parse_blocks(user)["HACKING"]) == chunks[index], index
        assert "8 analyzed rollouts" in user.split("\n", 1)[0]
    for agent in ("meta_summarizer", "query_generator", "updater"):
        [call] = by_agent[agent]
        assert hacking_in_prompt(parse_blocks(call["messages"][1]["content"])["HACKING"]) == whole, agent
    summary = json.loads((step / "summary.json").read_text())
    assert {h["pattern"]: h["count"] for h in summary["hacking"]} == whole
    assert all(h["prevalence"] == pytest.approx(h["count"] / 32, abs=1e-6) for h in summary["hacking"])


# --- the version --lag scores with -----------------------------------------------------------------

STEPS = 6
EVERY = 2
ADDED = ["The response names the fruit tangerine.", "The response names the fruit papaya.",
         "The response names the fruit quince."]


def lag_rollouts(step: int) -> list[dict]:
    return [{"id": f"s{step}-{i}", "input": f"What is {step} plus {i}?",
             "output": f"First, {step} and {i} give {step + i}.\nFinal answer: {step + i}",
             "supplemental_context": str(step + i)} for i in range(2)]


def version_by_hand(step: int, lag: int) -> int:
    """Version v is written by the update of step v-1; updates run after every EVERY-th step counted from
    step 0; step t is scored with the newest version <= t - lag."""
    written = [0] + [s + 1 for s in range(STEPS) if (s + 1) % EVERY == 0]
    return max(v for v in written if v <= max(0, step - lag))


def test_version_by_hand_has_gaps() -> None:
    assert [version_by_hand(t, 1) for t in range(STEPS)] == [0, 0, 0, 2, 2, 4]
    assert [version_by_hand(t, 2) for t in range(STEPS)] == [0, 0, 0, 0, 2, 2]


@pytest.mark.parametrize(("mode", "lag"), [("loop", 1), ("loop", 2), ("commands", 1)])
def test_lag_scores_every_step_with_exactly_the_version_asked_for(tmp_path: Path, mode: str, lag: int) -> None:
    """`loop --lag` and `score --lag` + `evolve` (the online recipe) choose the version each on their own."""
    source = tmp_path / "steps"
    source.mkdir()
    for step in range(STEPS):
        write_jsonl(source / f"{step}.jsonl", lag_rollouts(step))
    # each update adds one criterion, so every version's rubric is recognisable in the scorer's prompt
    scripted = [json.dumps({"rationale": "mark the version", "strategy": "ADVANCEMENT", "modifications": [
        {"op": "add", "kind": "reward", "text": text, "weight": 1.0, "reason": "marks a version"}]}) for text in ADDED]
    run = new_run(tmp_path, "lag")
    with SimJudge(SimJudgeConfig(scripted={"updater": scripted})) as sim:
        env = judge_env(sim)
        if mode == "loop":
            result = invoke("loop", source, "--run", run, "--lag", lag, "--update-every", EVERY, "--no-dynamic", env=env)
            assert result.exit_code == 0, result.stderr
        else:
            for step in range(STEPS):
                result = invoke("score", source / f"{step}.jsonl", "--run", run, "--step", step, "--lag", lag, env=env)
                assert result.exit_code == 0, result.stderr
                result = invoke("evolve", "--run", run, "--step", step, "--update-every", EVERY, "--no-dynamic", env=env)
                assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in (run / "rubrics").glob("step-*.json")) == [
        "step-000000.json", "step-000002.json", "step-000004.json", "step-000006.json"]
    criteria_of = {v: ADDED[: v // 2] for v in (0, 2, 4, 6)}  # version v holds the first v/2 added texts
    calls = read_jsonl(run / "calls.jsonl")
    for step in range(STEPS):
        want = version_by_hand(step, lag)
        recorded = {s["rubric_version"] for s in read_jsonl(run / "steps" / f"{step:06d}" / "scores.jsonl")}
        assert recorded == {want}, (step, recorded, want)
        systems = {c["messages"][0]["content"] for c in calls if c["agent"] == "scorer" and c["step"] == step}
        assert len(systems) == 1, "one rubric per step"
        system = systems.pop()
        assert [text for text in ADDED if text in system] == criteria_of[want], (step, want)
