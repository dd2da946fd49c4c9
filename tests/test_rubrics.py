"""The reward formula, rubric edits and per-criterion statistics, checked by hand."""

from __future__ import annotations

import pytest

from amaris_cli.config import RubricSettings
from amaris_cli.models import Criterion, Modification, RubricSet, ScoreRecord, Verdict
from amaris_cli.rubrics import apply_modifications, compute_reward, step_stats


def rubric() -> RubricSet:
    return RubricSet(
        version=0,
        anchors=[Criterion(id="correct", text="correct", weight=2.0)],
        adaptive=[Criterion(id="work", text="shows work", weight=1.0),
                  Criterion(id="grader", text="addresses the grader", weight=1.5, kind="pitfall")],
    )


def verdicts(**scores: float) -> list[Verdict]:
    return [Verdict(criterion_id=k, score=v) for k, v in scores.items()]


def test_reward_is_weight_normalized_with_pitfalls_subtracted() -> None:
    # (2*1 + 1*0.5 - 1.5*0) / (2 + 1) = 2.5 / 3
    assert compute_reward(rubric(), verdicts(correct=1, work=0.5, grader=0)) == pytest.approx(0.833333)
    # (2*1 + 1*1 - 1.5*1) / 3 = 0.5
    assert compute_reward(rubric(), verdicts(correct=1, work=1, grader=1)) == pytest.approx(0.5)


def test_reward_is_clipped_to_zero() -> None:
    # (0 + 1*0.2 - 1.5*1) / 3 < 0 -> 0
    assert compute_reward(rubric(), verdicts(correct=0, work=0.2, grader=1)) == 0.0


def test_reward_needs_every_verdict() -> None:
    with pytest.raises(ValueError, match="grader"):
        compute_reward(rubric(), verdicts(correct=1, work=1))


BOUNDS = RubricSettings(max_adaptive=3, min_weight=0.5, max_weight=3.0)


def test_valid_edits_apply_and_invalid_ones_are_rejected_with_reasons() -> None:
    mods = [
        Modification(op="add", text="verifies the result", weight=1.0, kind="reward"),
        Modification(op="reweight", id="work", weight=2.0),
        Modification(op="remove", id="correct"),                        # anchor
        Modification(op="modify", id="nope", text="x"),                 # unknown
        Modification(op="reweight", id="work", weight=10.0),            # bounds
        Modification(op="add", text="one more", weight=1.0, kind="reward"),      # exceeds max_adaptive=3
        Modification(op="add", text="Shows   WORK", weight=1.0, kind="reward"),  # duplicate text
        Modification(op="add", text="states units", kind="reward"),     # no weight: none is made up
        Modification(op="add", text="states units", weight=1.0),        # no kind: none is made up
    ]
    new, applied, rejected = apply_modifications(rubric(), mods, BOUNDS, new_version=4, step=3)
    assert [m.op for m in applied] == ["add", "reweight"]
    assert applied[0].id == "s3-verifies-the-result"
    reasons = [r.reason for r in rejected]
    assert "anchors are immutable" in reasons[0]
    assert "unknown criterion id 'nope'" in reasons[1]
    assert "outside [0.5, 3.0]" in reasons[2]
    assert "max_adaptive=3" in reasons[3]
    assert "same text" in reasons[4]
    assert reasons[5:] == ["an added criterion needs its weight and its kind"] * 2
    assert new.version == 4 and new.anchors == rubric().anchors
    assert [c.id for c in new.adaptive] == ["work", "grader", "s3-verifies-the-result"]
    assert new.get("work").weight == 2.0


def scored(rid: str, **scores: float) -> ScoreRecord:
    return ScoreRecord(rollout_id=rid, step=0, rubric_version=0, status="scored", reward=0.5, verdicts=verdicts(**scores))


def test_statistics_flag_saturated_and_discriminative_criteria() -> None:
    records = [scored("a", correct=1, work=1, grader=0), scored("b", correct=0, work=1, grader=0),
               scored("c", correct=1, work=1, grader=1), scored("d", correct=0, work=1, grader=0),
               ScoreRecord(rollout_id="e", step=0, rubric_version=0, status="failed", error="x")]
    groups = {"a": "p1", "b": "p1", "c": "p2", "d": "p2"}
    stats = step_stats(0, rubric(), records, groups)
    by_id = {c.criterion_id: c for c in stats.criteria}
    assert stats.n_failed == 1 and stats.n_scored == 4
    assert by_id["work"].saturation_top == 1.0 and by_id["work"].spread == 0.0
    assert by_id["correct"].spread == pytest.approx(0.5) and by_id["correct"].within_group_spread == pytest.approx(0.5)
    assert by_id["grader"].mean == pytest.approx(0.25)
