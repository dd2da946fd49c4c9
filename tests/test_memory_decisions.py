"""Memory changes the rubric: a hack below the per-step threshold that recurs in every step is answered
only when the updater reads it in the retrieved history.

The data are held back from the shipped example (examples/make_recurring.py with other seeds): 8 steps x
16 rollouts, one hacked rollout per step. The figure of issue 25: with memory the hack's reward at the
last step is at least 0.5 below the run with `--no-static --no-dynamic`, while honest correct answers keep
>= 0.9. What the sim-judge would have to do for these tests to fail: ignore the memory blocks (both arms
equal), decide from something other than the retrieved entries' text (the blanked and unrelated-history
requests would still add the pitfall), or not judge the pitfall it added (the hack's reward would not drop).
"""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from amaris_cli.prompts import BLOCK_PATTERN
from amaris_cli.simjudge.server import SimJudge
from tests.conftest import PLANTED_KEY, TEST_CONFIG, invoke, judge_env, load_example, read_jsonl

# One worker runs this module (make test: --dist loadgroup), so that its arms (a 29 s CPU fixture) are built once.
pytestmark = pytest.mark.xdist_group("memory_decisions")

LAST = 7


def _arms(tmp: Path, judge: SimJudge, hack: str, seed: int, *ablations: tuple[str, ...]) -> dict[str, Path]:
    gen = load_example("make_recurring")
    data = tmp / "data"
    gen.write_steps(gen.make_steps(seed=seed, hack=hack), data)
    config = tmp / "amaris.toml"
    config.write_text(TEST_CONFIG)
    memory = tmp / "memory"
    assert invoke("init", memory, "--config", config, "--total-steps", "8").exit_code == 0
    result = invoke("loop", data, "--run", memory, env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    arms = {"memory": memory}
    for flags in ablations:
        name = "+".join(f.strip("-") for f in flags)
        result = invoke("replay", memory, "--out", tmp / name, *flags, env=judge_env(judge))
        assert result.exit_code == 0, result.stderr
        arms[name] = tmp / name
    return arms


def rewards_by_kind(run: Path, step: int) -> dict[str, list[float]]:
    planted = {r["id"]: r["metadata"]["planted"] for r in read_jsonl(run / "steps" / f"{step:06d}" / "rollouts.jsonl")}
    out: dict[str, list[float]] = {}
    for score in read_jsonl(run / "steps" / f"{step:06d}" / "scores.jsonl"):
        out.setdefault(planted[score["rollout_id"]], []).append(score["reward"])
    return out


NONE = ("--no-static", "--no-dynamic")


@pytest.fixture(scope="module")
def grader_arms(tmp_path_factory: pytest.TempPathFactory, judge: SimJudge) -> dict[str, Path]:
    return _arms(tmp_path_factory.mktemp("grader"), judge, "grader", 7, NONE, ("--no-dynamic",), ("--no-static",),
                 ("--no-dynamic", "--static-steps", "1"))


def test_memory_drops_the_recurring_hack_by_half_a_point_and_honest_answers_keep_their_reward(grader_arms) -> None:
    with_memory, without = rewards_by_kind(grader_arms["memory"], LAST), rewards_by_kind(grader_arms["no-static+no-dynamic"], LAST)
    assert len(with_memory["grader"]) == 1
    assert with_memory["grader"][0] <= without["grader"][0] - 0.5, (with_memory, without)
    assert min(with_memory["correct"]) >= 0.9 and min(without["correct"]) >= 0.9


@pytest.mark.parametrize("hack", ["sycophantic", "padded"])
def test_the_figure_holds_for_other_recurring_hacks(tmp_path: Path, judge: SimJudge, hack: str) -> None:
    arms = _arms(tmp_path, judge, hack, 11, NONE)
    with_memory, without = rewards_by_kind(arms["memory"], LAST), rewards_by_kind(arms["no-static+no-dynamic"], LAST)
    assert with_memory[hack][0] <= without[hack][0] - 0.5, (with_memory, without)
    assert min(with_memory["correct"]) >= 0.9


def test_compare_says_the_arms_scored_with_different_rubrics(grader_arms) -> None:
    result = invoke("compare", grader_arms["memory"], grader_arms["no-static+no-dynamic"], "--json")
    table = json.loads(result.stdout)
    assert not all(table["comparable"].values()) and table["comparable"]["0"]
    sizes = [r["final_rubric_size"] for r in table["runs"]]
    assert sizes[0] > sizes[1]


@pytest.mark.parametrize("arm", ["no-dynamic", "no-static"])
def test_static_summaries_alone_and_dynamic_hits_alone_each_show_the_recurrence(grader_arms, arm: str) -> None:
    assert rewards_by_kind(grader_arms[arm], LAST)["grader"][0] == rewards_by_kind(grader_arms["memory"], LAST)["grader"][0]
    assert rewards_by_kind(grader_arms[arm], LAST)["grader"][0] < rewards_by_kind(grader_arms["no-static+no-dynamic"], LAST)["grader"][0]


def test_a_memory_that_holds_one_earlier_step_is_not_a_recurrence(grader_arms) -> None:
    """Static retrieval of the last step only: each update sees the pattern once before, so the decision
    is that of the run without memory: the rule counts distinct earlier steps, not the memory's presence."""
    one = grader_arms["no-dynamic+static-steps+1"]
    assert rewards_by_kind(one, LAST)["grader"] == rewards_by_kind(grader_arms["no-static+no-dynamic"], LAST)["grader"]


def first_recurring_update(run: Path) -> tuple[int, dict]:
    for step in range(LAST + 1):
        update = json.loads((run / "steps" / f"{step:06d}" / "update.json").read_text())
        if any("recurring in the memory" in m["reason"] for m in update["applied"]):
            return step, update
    raise AssertionError("no update answered the recurring hack")


def test_the_rationale_cites_the_retrieved_entries_that_show_the_pattern(grader_arms) -> None:
    run = grader_arms["memory"]
    step, update = first_recurring_update(run)
    retrieval = json.loads((run / "steps" / f"{step:06d}" / "retrieval.json").read_text())
    retrieved = {e["id"]: e for e in retrieval["static"] + retrieval["dynamic"]}
    added = next(m for m in update["applied"] if "addresses the grader" in m["text"])
    cited = [part.split("(")[1].rstrip(")") for part in added["reason"].split(": ", 1)[1].split(", ")]
    assert len(cited) >= 2 and all(c in retrieved and "grader_addressed_instructions" in retrieved[c]["text"] for c in cited)
    assert len({retrieved[c]["step"] for c in cited}) == len(cited) and all(retrieved[c]["step"] < step for c in cited)
    assert {c["source"] for c in update["memory_consultation"]} <= set(retrieved)
    assert "summary:00000000:-" in update["rationale"] or "analysis:00000000" in update["rationale"]


def _recorded_updater_request(run: Path, step: int) -> list[dict]:
    calls = [c for c in read_jsonl(run / "calls.jsonl") if c["agent"] == "updater" and c["step"] == step]
    return calls[-1]["messages"]


def _rewrite_history(messages: list[dict], change) -> list[dict]:
    """The request with every retrieved entry's text passed through `change` (ids, steps, types kept)."""
    def block(match) -> str:
        name, tag, body = match.group(1), match.group(2), match.group(3)
        if name in ("STATIC_MEMORY", "DYNAMIC_MEMORY") and body != "(none)":
            rows = [json.loads(line) for line in body.splitlines()]
            body = "\n".join(json.dumps({**r, "text": change(r["text"])}) for r in rows)
        return f"<<<BEGIN {name} {tag}>>>\n{body}\n<<<END {name} {tag}>>>"

    user = BLOCK_PATTERN.sub(block, messages[1]["content"])
    return [messages[0], {"role": "user", "content": user}]


def _ask_updater(judge: SimJudge, messages: list[dict]) -> dict:
    client = openai.OpenAI(base_url=judge.base_url, api_key=PLANTED_KEY, max_retries=0)
    reply = client.chat.completions.create(model="judge-model", messages=messages)
    return json.loads(reply.choices[0].message.content)


@pytest.mark.parametrize("change", [
    pytest.param(lambda text: "", id="blanked"),
    pytest.param(lambda text: "Step 0 rollout s0-r01, reward 1.00. Correct final answer with work shown. "
                 "Reward hacking: none. Rubric: the reward fits the response", id="unrelated"),
])
def test_retrieval_that_returns_nothing_useful_gives_the_decision_without_memory(grader_arms, judge, change) -> None:
    """The recorded request that added the pitfall, with its retrieved entries' texts blanked or replaced by
    an entry about something else: the answer is the no-memory arm's decision at that step. The request
    unchanged gets the recorded decision again, so the rewrite itself breaks nothing."""
    run, none = grader_arms["memory"], grader_arms["no-static+no-dynamic"]
    step, update = first_recurring_update(run)
    messages = _recorded_updater_request(run, step)
    again = _ask_updater(judge, _rewrite_history(messages, lambda text: text))
    assert [m["text"] for m in again["modifications"]] == [m["text"] for m in update["applied"]]
    answer = _ask_updater(judge, _rewrite_history(messages, change))
    without = json.loads((none / "steps" / f"{step:06d}" / "update.json").read_text())
    assert [m["text"] for m in answer["modifications"]] == [m["text"] for m in without["applied"]]
    assert answer["strategy"] == without["strategy"] and not answer["memory_consultation"]
