"""The reward formula, rubric edits and per-criterion statistics, checked by hand."""

from __future__ import annotations

import pytest

from amaris_cli.config import RubricSettings
from amaris_cli.models import (
    Criterion,
    CriterionStats,
    Modification,
    RubricSet,
    ScoreRecord,
    StepStats,
    Verdict,
)
from amaris_cli.rubrics import apply_modifications, cap_active, compute_reward, step_stats


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
        Modification(op="reweight", id="grader", weight=10.0),          # bounds
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


def test_two_edits_of_one_criterion_are_ambiguous_and_a_boolean_weight_is_no_weight() -> None:
    """Two reweights of one criterion, 2 then 0.5, were both listed as applied and the last one won silently; a
    weight of `true` was 1.0 (found by a red-team pass)."""
    mods = [Modification(op="reweight", id="work", weight=2.0), Modification(op="modify", id="grader", text="The response flatters the grader."),
            Modification(op="reweight", id="work", weight=0.5)]
    new, applied, rejected = apply_modifications(rubric(), mods, BOUNDS, new_version=1, step=0)
    assert [(m.op, m.id) for m in applied] == [("modify", "grader")]
    assert [r.modification.weight for r in rejected] == [2.0, 0.5]
    assert all("edits 'work' 2 times" in r.reason and "ambiguous" in r.reason for r in rejected)
    assert new.get("work").weight == 1.0
    # Two edits of one criterion that do not disagree (its text, then its weight) both apply.
    both = [Modification(op="modify", id="work", text="The response shows each step of its work."),
            Modification(op="reweight", id="work", weight=2.0)]
    new, applied, rejected = apply_modifications(rubric(), both, BOUNDS, new_version=1, step=0)
    assert len(applied) == 2 and not rejected and new.get("work").weight == 2.0
    with pytest.raises(ValueError, match="a weight is a number"):
        Modification.model_validate({"op": "add", "text": "states units", "kind": "reward", "weight": True})


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


def pitfall_anchored() -> RubricSet:
    """No reward anchor: the rubric's reward criteria are all adaptive."""
    return RubricSet(version=0, anchors=[Criterion(id="grader", text="addresses the grader", weight=1.0, kind="pitfall")],
                     adaptive=[Criterion(id="correct", text="correct", weight=2.0),
                               Criterion(id="work", text="shows work", weight=1.0)])


def test_an_edit_that_leaves_no_reward_criterion_is_rejected_and_the_rest_apply() -> None:
    """A rubric needs a reward criterion (rewards are divided by their weights): removing the last one, or
    turning it into a pitfall, is rejected with the reason, as every other bad edit; it never ends the update."""
    mods = [Modification(op="remove", id="work"),
            Modification(op="modify", id="correct", kind="pitfall"),
            Modification(op="remove", id="correct"),
            Modification(op="modify", id="correct", text="The final answer is correct and stated once.")]
    new, applied, rejected = apply_modifications(pitfall_anchored(), mods, BOUNDS, new_version=1, step=0)
    assert [(m.op, m.id) for m in applied] == [("remove", "work"), ("modify", "correct")]
    assert [r.modification.op for r in rejected] == ["modify", "remove"]
    assert all("'correct' is the rubric's last reward criterion" in r.reason for r in rejected)
    assert [(c.id, c.kind) for c in new.adaptive] == [("correct", "reward")]


def test_the_active_cap_keeps_a_reward_criterion_when_no_anchor_is_one() -> None:
    rubric = pitfall_anchored().model_copy(update={"adaptive": [
        Criterion(id="correct", text="correct", weight=2.0),
        Criterion(id="new-pitfall", text="claims a check it never shows", weight=1.0, kind="pitfall")]})
    flat = CriterionStats(criterion_id="correct", kind="reward", n=2, mean=1.0, spread=0.0, within_group_spread=0.0,
                          saturation_top=1.0, saturation_bottom=0.0)  # ranks below the new pitfall (no statistics yet)
    capped, dropped = cap_active(rubric, StepStats(step=0, n_rollouts=2, n_scored=2, n_failed=0, mean_reward=0.5,
                                                   std_reward=0.1, criteria=[flat]), cap=1)
    assert [c.id for c in capped.adaptive] == ["correct"]
    assert [d.criterion_id for d in dropped] == ["new-pitfall"] and "reward criterion stays" in dropped[0].reason
    capped, _ = cap_active(rubric, None, cap=0)
    assert [c.id for c in capped.adaptive] == ["correct"], "above a cap of 0 rather than a rubric with no reward"
    RubricSet.model_validate(capped.model_dump())


def test_min_anchor_share_rejects_the_edits_that_would_outweigh_the_anchors() -> None:
    """Unset, an updater could add adaptive rewards at max_weight until the anchors barely counted (2 of 42 in a
    red-team run: a wrong answer with long reasoning scored 0.95, the correct one 0.05)."""
    floor = RubricSettings(max_adaptive=8, max_weight=5.0, min_anchor_share=0.4)
    mods = [Modification(op="add", text="The response explains each step of its work.", weight=1.0, kind="reward"),
            Modification(op="reweight", id="work", weight=5.0),
            Modification(op="add", text="The response names the method it uses before using it.", weight=5.0,
                         kind="reward"),
            Modification(op="reweight", id="work", weight=0.5),
            Modification(op="add", text="The response restates the question before answering.", weight=0.5,
                         kind="pitfall")]
    new, applied, rejected = apply_modifications(rubric(), mods, floor, new_version=1, step=0)
    # correct 2 of (2 + work 1 + 1): 0.5; work at 5 would give 2/8; the 5-weight add 2/9; work at 0.5: 2/3.5
    assert [r.modification for r in rejected] == [mods[1], mods[2]]
    assert "would leave the anchors 25% of the reward criteria's weight, below rubric.min_anchor_share=0.4" == \
        rejected[0].reason
    assert [m.op for m in applied] == ["add", "reweight", "add"], "pitfalls are not in the reward's denominator"
    unset, applied, rejected = apply_modifications(rubric(), mods, BOUNDS.model_copy(update={"max_weight": 5.0}),
                                                   new_version=1, step=0)
    assert not [r for r in rejected if "anchor" in r.reason]
    with pytest.raises(ValueError, match="needs a reward criterion among the anchors"):
        RubricSettings(anchors=[Criterion(id="p", text="The response flatters the grader.", weight=1, kind="pitfall")],
                       min_anchor_share=0.5)


def test_the_active_cap_gives_a_criterion_rewritten_since_its_statistics_a_step_to_show_its_worth() -> None:
    """A rewrite keeps the criterion's id: ranked by the spread of the text it replaced (often the reason it was
    rewritten: it never separated rollouts), the cap dropped the updater's fix in the update that made it."""
    anchors = [Criterion(id="correct", text="The response gives the correct final answer.", weight=2.0)]
    measured = RubricSet(version=0, anchors=anchors, adaptive=[
        Criterion(id="a", text="The response keeps the explanation under two hundred words.", weight=1.0),
        Criterion(id="b", text="The response shows the steps of its derivation.", weight=1.0)])
    values = {"correct": [1, 0, 1, 0], "a": [1, 1, 1, 1], "b": [1, 0, 0, 1]}  # a never separates rollouts
    scores = [ScoreRecord(rollout_id=f"r{i}", step=0, rubric_version=0, status="scored", reward=0.5,
                          verdicts=[Verdict(criterion_id=k, score=v[i]) for k, v in values.items()]) for i in range(4)]
    stats = step_stats(0, measured, scores)
    mods = [Modification(op="modify", id="a", text="The response checks its final answer by substitution."),
            Modification(op="add", kind="reward", text="The response states the units of its answer.", weight=1.0)]
    new, applied, _ = apply_modifications(measured, mods, BOUNDS, new_version=1, step=0)
    assert [m.op for m in applied] == ["modify", "add"]
    capped, dropped = cap_active(new, stats, cap=2, measured=measured)
    assert [d.criterion_id for d in dropped] == ["b"], dropped
    assert "a" in {c.id for c in capped.adaptive}
    unchanged, dropped = cap_active(new.model_copy(update={"adaptive": [*measured.adaptive, new.adaptive[-1]]}),
                                    stats, cap=2, measured=measured)
    assert [d.criterion_id for d in dropped] == ["a"], "a text measured as it is keeps its statistics"


def test_an_update_cannot_reuse_a_removed_id_duplicate_a_text_by_modify_or_record_what_a_reweight_ignored() -> None:
    """Three ways an update's record and history described another rubric than the one written: a new criterion
    under the id this update removed (its statistics, plot line and stability were the removed one's), a modify
    giving a criterion another criterion's text (an add with that text is refused: the weight then counts twice),
    and a reweight's text and kind recorded as applied though only its weight was."""
    base = RubricSet(version=0, anchors=[Criterion(id="correct", text="The final answer is correct.", weight=2.0)],
                     adaptive=[Criterion(id="work", text="The response shows its work.", weight=1.0),
                               Criterion(id="grader", text="The response addresses the grader.", weight=1.5,
                                         kind="pitfall")])
    mods = [Modification(op="remove", id="work"),
            Modification(op="add", id="work", text="The response cites a source for each claim.", weight=1.0,
                         kind="pitfall"),
            Modification(op="modify", id="grader", text="The final answer is correct."),
            Modification(op="reweight", id="grader", weight=2.0, kind="reward", text="The response pads the answer.")]
    new, applied, rejected = apply_modifications(base, mods, BOUNDS, new_version=1, step=0)
    assert [(r.modification.op, r.reason) for r in rejected] == [
        ("add", "criterion id 'work' names a criterion this update removes: a new criterion takes an id of its own"),
        ("modify", "a criterion with the same text already exists")]
    assert [(m.op, m.id, m.text, m.kind, m.weight) for m in applied] == [
        ("remove", "work", None, None, None), ("reweight", "grader", None, None, 2.0)]
    assert [(c.id, c.text, c.kind, c.weight) for c in new.adaptive] == [
        ("grader", "The response addresses the grader.", "pitfall", 2.0)]


def test_disagreeing_edits_of_one_criterion_are_refused_whatever_their_order_and_whichever_pass_finds_them() -> None:
    """A removal and an edit of one criterion were both refused as ambiguous in one order; in the other the removal
    applied and the edit was refused as naming an unknown id. And the edits a first pass refused for a bound that a
    conflict's removal then met were applied in the second pass without being checked for a conflict: the last
    of two disagreeing weights won silently."""
    anchors = [Criterion(id="correct", text="The response gives the correct final answer.", weight=2.0)]
    base = RubricSet(version=1, anchors=anchors, adaptive=[
        Criterion(id="x", text="The response shows the steps of its derivation.", weight=1.0),
        Criterion(id="y", text="The response keeps the explanation under two hundred words.", weight=1.0)])
    plain = RubricSettings(anchors=anchors, max_adaptive=3)
    for mods in ([Modification(op="reweight", id="x", weight=2.0), Modification(op="remove", id="x")],
                 [Modification(op="remove", id="x"), Modification(op="reweight", id="x", weight=2.0)]):
        new, applied, rejected = apply_modifications(base, mods, plain, new_version=2, step=1)
        assert [c.id for c in new.adaptive] == ["x", "y"] and applied == [], mods
        assert [r.modification.op for r in rejected] == [m.op for m in mods], mods
        assert all("the edits disagree" in r.reason for r in rejected), rejected
    twice = [Modification(op="remove", id="x"), Modification(op="remove", id="x")]  # two removals agree
    new, applied, rejected = apply_modifications(base, twice, plain, new_version=2, step=1)
    assert [c.id for c in new.adaptive] == ["y"] and len(applied) == 1
    assert [r.reason for r in rejected] == ["'x' is removed by an earlier edit of this update"]
    floor = RubricSettings(anchors=anchors, max_adaptive=3, min_anchor_share=0.4)
    mods = [Modification(op="reweight", id=i, weight=w) for i, w in (("x", 1.4), ("x", 1.5), ("y", 1.6), ("y", 1.7))]
    new, applied, rejected = apply_modifications(base, mods, floor, new_version=2, step=1)
    assert [(c.id, c.weight) for c in new.adaptive] == [("x", 1.0), ("y", 1.0)] and applied == []
    assert len(rejected) == 4 and all("the edits disagree" in r.reason for r in rejected), rejected


def test_a_second_removal_is_refused_as_removed_only_when_the_first_one_stands() -> None:
    """[remove x, remove x, reweight x] keeps x (the removals and the edit disagree); the second removal was refused
    as "removed by an earlier edit", which the next updater read as x being gone."""
    base = RubricSet(version=0, anchors=[Criterion(id="correct", text="The final answer is correct.", weight=2.0)],
                     adaptive=[Criterion(id="x", text="The response shows its work.", weight=1.0)])
    mods = [Modification(op="remove", id="x"), Modification(op="remove", id="x"),
            Modification(op="reweight", id="x", weight=2.0)]
    new, applied, rejected = apply_modifications(base, mods, BOUNDS, new_version=1, step=0)
    assert [c.id for c in new.adaptive] == ["x"] and applied == []
    assert [r.reason for r in rejected] == ["the update edits 'x' 3 times, and the edits disagree; which one is meant "
                                            "is ambiguous: give one edit per criterion"] * 3
