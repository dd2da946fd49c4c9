"""A reward is either the one the judge meant, or an explicit failure (issue 13).

Every case runs the real `score` command against the sim-judge over HTTP and reads scores.jsonl:
a judge answering in a way that does not mean what a naive reader takes (a 0-10 scale, two verdicts,
a cut reply, an unclosed draft) must give `failed` with the reason, or, when the re-ask is answered
properly, exactly the reward the judge meant.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amaris_cli.agents.group_scorer import GroupAnswer, split_to_fit
from amaris_cli.agents.scorer import ScorerAnswer, answer_budget
from amaris_cli.models import RubricSet, Verdict
from amaris_cli.rubrics import compute_reward
from tests.conftest import (
    EXAMPLES,
    WORKED_ROW,
    invoke,
    judge_env,
    new_run,
    new_scenario_run,
    read_jsonl,
    scores,
    write_jsonl,
)

ROLLOUTS = [
    {"id": "right", "input": "What is 6*7?", "output": "First 6*7 = 42, so the result is 42.\nFinal answer: 42", "answer": "42"},
    {"id": "wrong", "input": "What is 6*7?", "output": "First 6*7 = 41, so the result is 41.\nFinal answer: 41", "answer": "42"},
]
# What the sim-judge means for these rollouts: correct-answer (w=2) 1 / 0, shows-reasoning (w=1) 0.5.
MEANT = {"right": round((2 * 1.0 + 0.5) / 3, 6), "wrong": round((2 * 0.0 + 0.5) / 3, 6)}


PERSISTENT = [  # the judge answers every request of the scorer this way
    ("scale10", "off the scale"),
    ("two_objects", "2 different JSON objects"),
    ("retracted", "takes it back"),
    ("retracted_zh", "takes it back"),  # a judge answering rollouts in another language takes it back in that one
    ("retracted_de", "takes it back"),
    ("length", "cut at the token limit"),
    ("max_tokens", "cut at the token limit"),  # another server's name for it, in capitals
    ("content_filter", "not as a finished answer"),  # a whole verdict, then a cut take-back: never read
    ("unclosed_think", "never closed"),
    ("truncated", "cut off before its closing brace"),
]


def test_a_0_to_10_judges_reply_of_only_1s_is_failed_not_the_full_reward(tmp_path: Path, sim_factory) -> None:
    """A 0-10 judge answers a response that meets no criterion with 1s: a reply that reads the same on the 0-1
    scale, where it is the full reward. The wrong bare answer below got 1.0 while the right one failed (its 9 is
    off the scale): the policy was pushed toward wrong answers. Before a reply of only 0s and 1s is taken, the
    judge scores a probe whose response plainly meets its one criterion; this one answers 9, so no such reply of
    it is read. A judge on the 0-1 scale is checked once per run (the outcome kept in judge-scale.json)."""
    bare = [*ROLLOUTS, {"id": "bare-wrong", "input": "What is 6*7?", "output": "Final answer: 41", "answer": "42"},
            WORKED_ROW]
    honest, run = sim_factory(), new_scenario_run(tmp_path, "honest")
    for step in (0, 1):
        result = invoke("score", write_jsonl(tmp_path / "r.jsonl", bare), "--run", run, "--step", step,
                        "--rubric-version", 0, env=judge_env(honest))
        assert result.exit_code == 0, result.stderr
    assert (scores(run)["bare-wrong"]["reward"], scores(run)["worked"]["reward"]) == (0.0, 1.0)
    assert [c["scale"] for c in json.loads((run / "judge-scale.json").read_text())["checks"]] == ["0-1"]
    assert sum(c["context"] == "scale check" for c in read_jsonl(run / "calls.jsonl")) == 1
    # (the honest judge's verdicts of the bare wrong answer: 0 and 0, a 0-10 judge's 1 and 1; of the worked one 1
    # and 1, a 0-10 judge's 9 and 9)
    judge, run = sim_factory(agent_faults={"scorer": "scale10"}), new_scenario_run(tmp_path, "scale10")
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", bare), "--run", run, "--step", "0", "--on-error", "skip",
                    env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    got = scores(run)
    assert got["bare-wrong"]["status"] == "failed" and got["bare-wrong"]["reward"] is None, got["bare-wrong"]
    assert "scores on another scale than 0-1" in got["bare-wrong"]["error"] and "answered" in got["bare-wrong"]["error"]
    assert all(r["status"] == "failed" for r in got.values()), got
    assert [c["scale"] for c in json.loads((run / "judge-scale.json").read_text())["checks"]] == ["other"]


def test_a_0_to_10_judge_that_complies_when_told_is_still_found_out(tmp_path: Path, sim_factory) -> None:
    """The probe was re-asked as any reply: told that its 9 is off the scale, a 0-10 judge answered 1 once, was
    recorded as scoring on 0-1, and its first replies of 1s ("not met" on its scale) were the full reward from then
    on. The probe's first answer decides. (This judge answers its first two requests on 0-10: the bare wrong
    answer's, 1 and 1, and the probe's, 9.)"""
    judge = sim_factory(fault_plan=["scale10", "scale10"])
    run = new_scenario_run(tmp_path)
    bare = [{"id": "bare-wrong", "input": "What is 6*7?", "output": "Final answer: 41", "answer": "42"}]
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", bare), "--run", run, "--step", "0", "--on-error", "skip",
                    env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    record = scores(run)["bare-wrong"]
    assert record["status"] == "failed" and "scores on another scale than 0-1" in record["error"], record
    assert [c["scale"] for c in json.loads((run / "judge-scale.json").read_text())["checks"]] == ["other"]


def test_a_scale_check_the_endpoint_refused_leaves_the_mark_that_the_run_checks(tmp_path: Path, sim_factory) -> None:
    """The probe got a 401 (in `serve`, a held endpoint does not even send it, so the log has no probe): the run
    keeps judge-scale.json without an outcome, so its offline replay never reads it as a run recorded before
    amaris checked the scale, and takes none of its replies unchecked."""
    run = new_scenario_run(tmp_path)
    rows = [WORKED_ROW]
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", rows), "--run", run, "--step", "0",
                    env=judge_env(sim_factory(fault_plan=["", "401"])))
    assert result.exit_code != 0 and "401" in result.stderr, result.stderr
    assert json.loads((run / "judge-scale.json").read_text()) == {"checks": []}


def test_a_damaged_scale_record_is_checked_again_and_written_again(tmp_path: Path, sim_factory) -> None:
    """judge-scale.json is derived: one that no longer reads (a torn write, an edit) stopped `score` with no scores."""
    run = new_scenario_run(tmp_path)
    (run / "judge-scale.json").write_text('{"checks": [')
    rows = [WORKED_ROW]
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", rows), "--run", run, "--step", "0",
                    env=judge_env(sim_factory()))
    assert result.exit_code == 0, result.stderr
    assert scores(run)["worked"]["reward"] == 1.0
    assert [c["scale"] for c in json.loads((run / "judge-scale.json").read_text())["checks"]] == ["0-1"]


def test_a_0_to_10_judges_group_reply_of_only_1s_is_failed_too(tmp_path: Path, sim_factory) -> None:
    """The same in grouped scoring (`--group-by input`: one call judges the responses to one prompt), checked with
    the grouped template: a run's own may ask for another scale than the single one. (Here only the grouped
    request is answered on 0-10; a probe with the single template passed the judge.)"""
    bare = [{"id": "bare-wrong", "input": "What is 6*7?", "output": "Final answer: 41", "answer": "42"},
            {"id": "bare-wrong-too", "input": "What is 6*7?", "output": "Final answer: 40", "answer": "42"}]
    judge = sim_factory(agent_faults={"group_scorer": "scale10"})  # (the sim-judge tells them apart by template)
    run = new_scenario_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", bare), "--run", run, "--step", "0", "--group-by", "input",
                    "--on-error", "skip", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    for record in scores(run).values():
        assert record["status"] == "failed" and "scores on another scale than 0-1" in record["error"], record


@pytest.mark.parametrize(("mode", "reason"), PERSISTENT)
def test_a_judge_that_never_answers_on_the_contract_gives_failed_never_a_number(
        tmp_path: Path, sim_factory, mode: str, reason: str) -> None:
    judge = sim_factory(agent_faults={"scorer": mode})
    run = new_scenario_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 4, result.stderr
    for record in scores(run).values():
        assert record["status"] == "failed" and record["reward"] is None and record["verdicts"] == []
        assert reason in record["error"], record["error"]
    assert judge.stats["requests"] == 2 * 3, "each rollout is asked once and re-asked max_reasks (2) times"


@pytest.mark.parametrize("mode", ["scale10", "two_objects", "retracted", "retracted_zh", "length", "unclosed_think",
                                  "truncated"])
def test_a_judge_that_corrects_itself_on_the_reask_gives_the_reward_it_meant(tmp_path: Path, sim_factory, mode: str) -> None:
    judge = sim_factory(fault_plan=[mode])  # the first request only
    run = new_scenario_run(tmp_path)
    env = judge_env(judge, AMARIS_SCORER_CONCURRENCY="1")
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0", env=env)
    assert result.exit_code == 0, result.stderr
    assert {rid: (r["status"], r["reward"]) for rid, r in scores(run).items()} == {
        rid: ("scored", reward) for rid, reward in MEANT.items()}
    assert judge.stats["requests"] == 3  # one bad reply, its re-ask, the other rollout


def test_a_cut_reply_is_asked_again_with_twice_the_budget_up_to_the_cap(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "length"})
    run = new_scenario_run(tmp_path)
    env = judge_env(judge, AMARIS_SCORER_MAX_TOKENS="1000", AMARIS_SCORER_MAX_TOKENS_CAP="3000")
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0", env=env)
    assert result.exit_code == 4
    assert [r["max_tokens"] for r in judge.requests] == [1000, 2000, 3000]
    assert len(judge.requests[1]["messages"]) == 2, "a longer budget re-sends the question, not a correction"
    assert "max_tokens_cap (3000)" in scores(run)["right"]["error"]


@pytest.mark.parametrize("score", [0.5, 0.0])
def test_a_length_cut_at_a_verdict_number_is_never_repaired_into_that_number(tmp_path: Path, sim_factory, score: float) -> None:
    # `"score": 0.` with finish_reason "length": json-repair would read 0.0.
    cut = '{"verdicts": [{"criterion_id": "correct-answer", "score": 1.0, "reason": "ok"}, ' \
          '{"criterion_id": "shows-reasoning", "score": 0.'
    full = json.dumps({"verdicts": [{"criterion_id": "correct-answer", "score": 1.0, "reason": "ok"},
                                    {"criterion_id": "shows-reasoning", "score": score, "reason": "ok"}]})
    judge = sim_factory(scripted={"scorer": [cut + "}]}", cut + "}]}", cut + "}]}"]})  # closed, but the number is cut
    run = new_scenario_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 4
    assert "not written completely" in scores(run)["right"]["error"]
    judge = sim_factory(scripted={"scorer": [cut + "}]}", full]})
    run = new_scenario_run(tmp_path, "again")
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert scores(run)["right"]["reward"] == round((2 + score) / 3, 6)


def test_a_lone_surrogate_in_an_answer_is_asked_again_not_a_crash(tmp_path: Path, sim_factory) -> None:
    """`\\ud800` is no character: JSON readers refuse it, json-repair kept it, and writing the record crashed the
    step (a traceback), again on every re-run since the answer replays from calls.jsonl; served, a 500."""
    bad = '{"verdicts": [{"criterion_id": "correct-answer", "score": 1.0, "reason": "r\\ud800"}, ' \
          '{"criterion_id": "shows-reasoning", "score": 1.0, "reason": "ok"}]}'
    full = bad.replace("\\ud800", "")
    judge = sim_factory(scripted={"scorer": [bad, full]})
    run = new_scenario_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert scores(run)["right"]["reward"] == 1.0
    assert "lone surrogate" in judge.requests[1]["messages"][-1]["content"], "the re-ask says what was wrong"


@pytest.mark.parametrize("answer", [
    {"verdicts": [{"criterion_id": "correct-answer", "met": False, "score": 1}]},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1, "final_score": 0}]},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1, "isMet": False}]},
    {"verdicts": [{"criterion_id": "correct-answer", "present": False, "passed": True}]},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1}], "revised_verdicts": [
        {"criterion_id": "correct-answer", "score": 0}]},
    # found by a red-team pass: more words for a verdict, accents, and keys in another script
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1}], "reward": 0},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1}], "overall": 0},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1, "correct": False}]},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1, "ok": False}]},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1, "conclusion": "not met"}]},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1, "\u00e9valuation": 0}]},
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1, "\u0455core": 0}]},  # a Cyrillic s
    {"verdicts": [{"criterion_id": "correct-answer", "score": 1, "\u8bc4\u5206": 0}]},
])
def test_a_second_value_beside_the_verdict_is_ambiguous_not_ignored(answer: dict) -> None:
    """The contract's keys were read and every other key ignored: "met": false beside "score": 1 scored 1, and
    so did a "final_score" or "revised_verdicts" the judge may have meant instead."""
    with pytest.raises(ValueError, match="ambiguous"):
        ScorerAnswer.model_validate(answer)


@pytest.mark.parametrize("entry", [
    {"response": 1, "verdicts": [{"criterion_id": "correct-answer", "score": 1}], "final_score": 0},
    {"response": 1, "response_id": 3, "verdicts": [{"criterion_id": "correct-answer", "score": 1}]},
    {"response": True, "verdicts": [{"criterion_id": "correct-answer", "score": 1}]},
])
def test_a_group_entry_with_a_second_value_or_a_boolean_response_is_invalid(entry: dict) -> None:
    """A group call's entries ignored every extra key: "final_score": 0 beside the verdicts scored 1, and
    "response": true was response 1 (found by a red-team pass). They follow the single answer's rule now."""
    with pytest.raises(ValueError, match="ambiguous|response's number"):
        GroupAnswer.model_validate({"responses": [entry]})
    with pytest.raises(ValueError, match="ambiguous"):
        GroupAnswer.model_validate({"responses": [{**entry, "response": 1} if entry["response"] is True else entry],
                                    "revised_responses": [entry]})


@pytest.mark.parametrize("word", ["pass", "passed", "fail", "met", "not met", "satisfied"])
def test_a_pitfalls_presence_given_as_pass_or_fail_is_invalid(word: str) -> None:
    """"present": "pass" was read as present (1), though "the response passes this check" means absent as easily
    (found by a red-team pass). A reward criterion's score keeps these words."""
    with pytest.raises(ValueError, match="whether a check passed"):
        ScorerAnswer.model_validate({"verdicts": [{"criterion_id": "flattery", "present": word}]})
    assert ScorerAnswer.model_validate({"verdicts": [{"criterion_id": "a", "score": word}]}).verdicts[0].value in (0, 1)
    assert ScorerAnswer.model_validate({"verdicts": [{"criterion_id": "f", "present": "absent"}]}).verdicts[0].value == 0


def test_small_things_a_judge_writes_are_read_as_meant() -> None:
    """Found by a red-team pass: a score of -0.0 was written as -0.0, a blank memory entry was indexed, and an
    id with a trailing space read the same as the one it missed in the re-ask ("no verdict for a; unknown
    criterion ids a")."""
    from amaris_cli.agents.scorer import check_against
    from amaris_cli.models import Criterion, RubricSet, SummaryAnswer

    assert str(ScorerAnswer.model_validate({"verdicts": [{"criterion_id": "a", "score": -0.0}]}).verdicts[0].value) == "0.0"
    with pytest.raises(ValueError, match="memory_entry is blank"):
        SummaryAnswer(executive_summary="e", reward_hacking="r", rubric_meta_evaluation="m",
                      performance_advancement="p", memory_entry=" \n ")
    rubric = RubricSet(version=0, anchors=[Criterion(id="a", text="The final answer is correct.", weight=1)])
    with pytest.raises(ValueError, match=r"no verdict for 'a'; unknown criterion ids 'a '"):
        check_against(rubric)(ScorerAnswer.model_validate({"verdicts": [{"criterion_id": "a ", "score": 1}]}))


def test_other_extra_keys_of_a_verdict_are_still_ignored() -> None:
    answer = {"verdicts": [{"criterion_id": "a", "score": 0.5, "confidence": 0.9, "criterion_text": "x"}], "notes": "-"}
    assert [v.value for v in ScorerAnswer.model_validate(answer).verdicts] == [0.5]


_SECOND_THOUGHT = [  # a key given twice: a JSON reader keeps the last value, the judge may have meant either
    '{"verdicts": [{"criterion_id": "correct-answer", "reason": "r", "score": 1, "score": 0}, '
    '{"criterion_id": "shows-reasoning", "reason": "r", "score": 0.5}]}',
    '{"verdicts": [{"criterion_id": "correct-answer", "reason": "draft", "score": 0}, '
    '{"criterion_id": "shows-reasoning", "reason": "draft", "score": 0}], '
    '"verdicts": [{"criterion_id": "correct-answer", "reason": "r", "score": 1}, '
    '{"criterion_id": "shows-reasoning", "reason": "r", "score": 0.5}]}',
    # not valid JSON, so json-repair reads it, and keeps one of the two values as silently
    "{'verdicts': [{'criterion_id': 'correct-answer', 'reason': 'r', 'score': 1, 'score': 0}, "
    "{'criterion_id': 'shows-reasoning', 'reason': 'r', 'score': 0.5}]}",
    "{'verdicts': [{'criterion_id': 'correct-answer', 'reason': 'r', 'score': 1, 0}, "
    "{'criterion_id': 'shows-reasoning', 'reason': 'r', 'score': 0.5}]}",
]


@pytest.mark.parametrize("reply", _SECOND_THOUGHT)
def test_a_key_given_twice_is_invalid_never_the_last_value(tmp_path: Path, sim_factory, reply: str) -> None:
    judge = sim_factory(scripted={"scorer": [reply] * 3})
    run = new_scenario_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 4, result.stderr
    record = scores(run)["right"]
    assert record["status"] == "failed" and record["reward"] is None, record
    assert "twice" in record["error"]
    assert "twice" in judge.requests[1]["messages"][-1]["content"], "the re-ask tells the judge what was wrong"


@pytest.mark.parametrize(("reply", "reward"), [
    ({"correct-answer": True, "shows-reasoning": "partial"}, (2 + 0.5) / 3),
    ({"correct-answer": "7/10", "shows-reasoning": "50%"}, (1.4 + 0.5) / 3),
    ({"correct-answer": "not met", "shows-reasoning": 1}, 1 / 3),
])
def test_explicit_scales_and_words_are_read_as_written(tmp_path: Path, sim_factory, reply: dict, reward: float) -> None:
    content = json.dumps({"verdicts": [{"criterion_id": k, "score": v, "reason": "r"} for k, v in reply.items()]})
    judge = sim_factory(scripted={"scorer": [content]})
    run = new_scenario_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert scores(run)["right"]["reward"] == pytest.approx(reward, abs=1e-6)


def test_a_loop_against_a_judge_on_a_0_to_10_scale_records_no_wrong_reward(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "scale10"})
    run = new_scenario_run(tmp_path)
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--on-error", "skip", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    replies = {}  # (step, rollout) -> the judge's last answer, in its own scale (9 met, 1 not met)
    for call in read_jsonl(run / "calls.jsonl"):
        if call["agent"] == "scorer" and call["response"]:
            replies[call["step"], call["context"]] = json.loads(call["response"])
    failed = scored = 0
    for step in range(6):
        for rid, record in scores(run, step).items():
            if record["status"] == "failed":
                assert record["reward"] is None and "off the scale" in record["error"]
                failed += 1
                continue
            rubric = RubricSet.model_validate_json((run / "rubrics" / f"step-{record['rubric_version']:06d}.json").read_text())
            meant = [Verdict(criterion_id=v["criterion_id"], score=(v["score"] - 1) / 8, reason="")
                     for v in replies[step, rid]["verdicts"]]
            assert record["reward"] == compute_reward(rubric, meant), (step, rid)
            scored += 1
    assert failed > 0 and failed + scored == 96
    # A reply whose every score is 0 or 1 reads the same on both scales; with these rollouts every reply
    # of the 0-10 judge holds a 5 or a 9, so every one is invalid.
    assert scored == 0


def test_group_calls_ask_for_the_budget_their_answer_needs_and_split_when_it_exceeds_the_cap(
        tmp_path: Path, sim_factory) -> None:
    assert answer_budget(5, 16) >= 3100, "16 responses x 5 criteria need about 3,100 tokens"
    assert [len(p) for p in split_to_fit([str(i) for i in range(16)], 5, 3000)] == [8, 8]
    groups = EXAMPLES / "math_groups" / "step-000.jsonl"
    reference = new_scenario_run(tmp_path, "reference")
    judge = sim_factory(enforce_max_tokens=True)
    assert invoke("score", groups, "--run", reference, "--step", "0", env=judge_env(judge)).exit_code == 0
    # A budget far too small for 3 responses x 2 criteria: the call asks for what the answer needs.
    run = new_scenario_run(tmp_path, "grown")
    result = invoke("score", groups, "--run", run, "--step", "0", "--group-by", "input",
                    env=judge_env(judge, AMARIS_SCORER_MAX_TOKENS="64"))
    assert result.exit_code == 0, result.stderr
    group_requests = [r for r in judge.requests if "<<<BEGIN RESPONSE_1 " in r["messages"][1]["content"]]
    assert {r["max_tokens"] for r in group_requests} == {answer_budget(2, 3)}
    assert scores(run) == scores(reference)
    # A cap that fits two responses: each group of 3 distinct outputs is judged in two calls.
    judge.requests.clear()
    run = new_scenario_run(tmp_path, "split")
    cap = answer_budget(2, 2)
    result = invoke("score", groups, "--run", run, "--step", "0", "--group-by", "input",
                    env=judge_env(judge, AMARIS_SCORER_MAX_TOKENS="64", AMARIS_SCORER_MAX_TOKENS_CAP=str(cap)))
    assert result.exit_code == 0, result.stderr
    assert len(judge.requests) == 8 and all(r["max_tokens"] <= cap for r in judge.requests)
    contexts = sorted({c["context"] for c in read_jsonl(run / "calls.jsonl")})
    assert contexts[0].endswith(":1/2") and contexts[1].endswith(":2/2")
    assert scores(run) == scores(reference)


def test_a_cut_reply_replays_offline_to_the_same_files(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(fault_plan=["length"])
    run = new_run(tmp_path)  # the local model: an offline replay of a run on the sim-judge's embeddings would call them
    source = write_jsonl(tmp_path / "l.jsonl", [dict(r, step=0) for r in ROLLOUTS])
    assert invoke("loop", source, "--run", run, env=judge_env(judge)).exit_code == 0
    assert any(c["finish_reason"] == "length" for c in read_jsonl(run / "calls.jsonl"))
    result = invoke("replay", run, "--out", tmp_path / "dst", "--offline", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "dst" / "steps/000000/scores.jsonl").read_bytes() == (run / "steps/000000/scores.jsonl").read_bytes()


# --- the same contract for the analyzer and the updater -----------------------------------------------------

AGENT_FAULTS = [  # reply kind -> what the recorded reason says
    ("two_objects", "2 different JSON objects"),
    ("retracted", "takes it back"),
    ("length", "cut at the token limit"),
    ("unclosed_think", "never closed"),
]


def _budgets(judge, agent: str) -> list[int]:
    """The completion budgets of the judge's requests for one agent, in order."""
    from amaris_cli.simjudge.rules import agent_of

    return [r["max_tokens"] for r in judge.requests if agent_of(r["messages"]) == agent]


def _scored_run(tmp_path: Path, sim_factory) -> Path:
    run = new_scenario_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0",
                    env=judge_env(sim_factory()))
    assert result.exit_code == 0, result.stderr
    return run


@pytest.mark.parametrize(("mode", "reason"), AGENT_FAULTS)
def test_an_analyzer_that_never_answers_on_the_contract_gives_failed_analyses(
        tmp_path: Path, sim_factory, mode: str, reason: str) -> None:
    run = _scored_run(tmp_path, sim_factory)
    judge = sim_factory(agent_faults={"analyzer": mode})
    result = invoke("analyze", "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 4, result.stderr  # --on-error fail: the failed records are written, the stage fails
    assert "could not be analyzed" in result.stderr and reason in result.stderr
    analyses = read_jsonl(run / "steps/000000/analyses.jsonl")
    assert sorted(a["rollout_id"] for a in analyses) == ["right", "wrong"]
    for record in analyses:
        assert record["status"] == "failed" and record.get("analysis") is None, record
        assert reason in record["error"], record["error"]
    budgets = _budgets(judge, "analyzer")
    assert len(budgets) == 2 * 3, "each rollout is asked once and re-asked max_reasks (2) times"
    if mode == "length":  # a cut reply is asked again with twice the budget, up to the cap
        assert sorted(budgets) == [2048, 2048, 4096, 4096, 8192, 8192]


@pytest.mark.parametrize("mode", [m for m, _ in AGENT_FAULTS])
def test_an_analyzer_that_corrects_itself_on_the_reask_gives_the_analysis(tmp_path: Path, sim_factory, mode: str) -> None:
    run = _scored_run(tmp_path, sim_factory)
    (tmp_path / "ref").mkdir()
    reference = _scored_run(tmp_path / "ref", sim_factory)
    assert invoke("analyze", "--run", reference, "--step", "0", env=judge_env(sim_factory())).exit_code == 0
    judge = sim_factory(fault_plan=[mode])  # the first request only
    result = invoke("analyze", "--run", run, "--step", "0", env=judge_env(judge, AMARIS_ANALYZER_CONCURRENCY="1"))
    assert result.exit_code == 0, result.stderr
    assert len(_budgets(judge, "analyzer")) == 3  # one bad reply, its re-ask, the other rollout
    got, meant = (read_jsonl(r / "steps/000000/analyses.jsonl") for r in (run, reference))
    assert got == meant, "the analysis is the one the judge meant, never the bad reply's"


@pytest.mark.parametrize(("mode", "reason"), AGENT_FAULTS)
def test_an_updater_that_never_answers_on_the_contract_fails_the_evolution_with_the_reason(
        tmp_path: Path, sim_factory, mode: str, reason: str) -> None:
    run = _scored_run(tmp_path, sim_factory)
    judge = sim_factory(agent_faults={"updater": mode})
    result = invoke("evolve", "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 1, result.stderr  # no rubric can be written without the update: the evolution fails
    assert "Traceback" not in result.stderr and "the updater failed" in result.stderr and reason in result.stderr
    assert not (run / "steps/000000/update.json").exists() and not (run / "rubrics/step-000001.json").exists()
    evolution = json.loads((run / "steps/000000/provenance.json").read_text())["evolution"]
    assert evolution["status"] == "failed" and reason in evolution["error"], evolution
    budgets = _budgets(judge, "updater")
    assert len(budgets) == 3, "the update is asked once and re-asked max_reasks (2) times"
    if mode == "length":
        assert budgets == [2048, 4096, 8192]


def test_under_json_schema_the_scorer_sends_its_rubrics_exact_contract_strict(tmp_path: Path, sim_factory) -> None:
    """The schema is the contract where the endpoint enforces one: the scorer's request carries the rubric's
    criterion ids as an enum, `score` for reward criteria and `present` for pitfalls, every object closed;
    the other agents send their answer model's schema in the strict form. The answers are checked the same."""
    judge = sim_factory()
    run = new_scenario_run(tmp_path, extra='\n[[rubric.adaptive]]\nid = "flattery"\ntext = "The response flatters the reader."'
                                  '\nweight = 1.0\nkind = "pitfall"\n')
    env = judge_env(judge, AMARIS_RESPONSE_FORMAT="json_schema")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=env)
    assert result.exit_code == 0, result.stderr
    formats = {r["messages"][0]["content"][:40]: r["response_format"] for r in judge.requests}
    scorer = next(r["response_format"] for r in judge.requests if r["response_format"]["json_schema"]["name"] == "scorer")
    assert scorer["type"] == "json_schema" and scorer["json_schema"]["strict"] is True
    items = scorer["json_schema"]["schema"]["properties"]["verdicts"]["items"]["anyOf"]
    reward, pitfall = items
    assert reward["properties"]["criterion_id"]["enum"] == ["correct-answer", "shows-reasoning"]
    assert pitfall["properties"]["criterion_id"]["enum"] == ["flattery"] and pitfall["properties"]["present"] == {"type": "boolean"}
    for r in judge.requests:
        schema = r["response_format"]["json_schema"]["schema"]
        objects = [schema] + [d for d in schema.get("$defs", {}).values()]
        assert all(o.get("additionalProperties") is False and o["required"] == list(o["properties"]) for o in objects)
        assert "default" not in json.dumps(schema)
    assert len(formats) > 1
    assert all(s["status"] == "scored" for s in read_jsonl(run / "steps/000000/scores.jsonl"))


def test_an_offline_replay_of_an_answer_todays_rules_re_ask_says_the_rules_changed(
        tmp_path: Path, sim_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run recorded by an amaris whose answer rules accepted a reply that today's re-ask (here, one that takes
    its verdict back in Chinese after the object, read as the object before 78b264e): its offline replay cannot
    re-ask, and says why instead of naming a request the record lacks."""
    import amaris_cli.llm.client as client

    def first_object(text: str) -> object:  # the older, lenient rule: the first JSON object, whatever follows it
        return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]

    judge = sim_factory(fault_plan=["retracted_zh"])
    run = new_scenario_run(tmp_path)
    with monkeypatch.context() as older:
        older.setattr(client, "extract_json_object", first_object)
        result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0",
                        env=judge_env(judge, AMARIS_SCORER_CONCURRENCY="1"))
    assert result.exit_code == 0, result.stderr
    assert judge.stats["requests"] == 2, "the take-back was accepted as recorded"
    result = invoke("replay", run, "--out", tmp_path / "replayed", "--offline")
    assert result.exit_code == 5
    said = " ".join(result.stderr.split())
    assert "--offline: step 0, agent scorer (right): " in said
    assert "the recorded run used the judge's answer, which amaris's answer rules now re-ask (" in said
    assert "takes it back" in said and "the amaris version that recorded it" in said


def _analysis(detected: bool, patterns: list[tuple[str, str]]) -> str:
    return json.dumps({
        "overall_assessment": "The response answers the question.", "stage_performance": "It states a result.",
        "reward_hacking": {"detected": detected, "patterns": [{"pattern": p, "evidence": "the response", "severity": s}
                                                              for p, s in patterns]},
        "advancement_strategy": "Show the working.", "rubric_judgement": {"assessment": "fair", "misjudged": False}})


def test_a_pattern_the_analyzer_names_with_severity_none_is_counted_nowhere(tmp_path: Path, sim_factory) -> None:
    """An analyzer may list a pattern it checked and did not find ("severity": "none", with detected false): it is
    not in the step's hacking counts (what the summarizer, updater, memory and alarms read) or the report's flags."""
    from amaris_cli.models import AnalysisRecord
    from amaris_cli.report.collect import analysis_block

    run = _scored_run(tmp_path, sim_factory)
    judge = sim_factory(scripted={"analyzer": [_analysis(False, [("verbosity", "none")]),
                                               _analysis(True, [("verbosity", "high"), ("self_praise", "none")])]})
    assert invoke("analyze", "--run", run, "--step", "0", env=judge_env(judge)).exit_code == 0
    assert invoke("summarize", "--run", run, "--step", "0", env=judge_env(judge)).exit_code == 0
    hacking = json.loads((run / "steps/000000/summary.json").read_text())["hacking"]
    assert [(h["pattern"], h["count"], h["prevalence"]) for h in hacking] == [("verbosity", 1, 0.5)]
    flags = []
    for line in read_jsonl(run / "steps/000000/analyses.jsonl"):
        block = analysis_block(AnalysisRecord.model_validate(line), lambda text: text)
        flags.append(block.get("hk", [])[::3])
    assert sorted(flags) == [[], ["verbosity"]]
