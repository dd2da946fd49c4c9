"""Getting a verdict out of the ways real judges answer badly."""

from __future__ import annotations

import pytest

from amaris_cli.llm.parsing import ReplyError, extract_json_object, normalize_score


@pytest.mark.parametrize("reply", [
    '{"verdicts": []}',
    '```json\n{"verdicts": []}\n```',
    'Sure! Here is my verdict:\n```\n{"verdicts": []}\n```\nHope this helps.',
    '<think>maybe {"verdicts": [1]} no</think>{"verdicts": []}',
    'draft... </think>\n{"verdicts": []}',
    'Final: {"verdicts": []} thanks',
    '{"verdicts": [],}',  # trailing comma: repaired
])
def test_extracts_the_final_object(reply: str) -> None:
    assert extract_json_object(reply) == {"verdicts": []}


def test_truncated_json_is_repaired() -> None:
    assert extract_json_object('{"verdicts": [{"criterion_id": "a", "score": 1')["verdicts"][0]["criterion_id"] == "a"


@pytest.mark.parametrize("reply", ["", "   ", "no json here", "[1, 2, 3]"])
def test_no_object_is_an_error(reply: str) -> None:
    with pytest.raises(ReplyError):
        extract_json_object(reply)


@pytest.mark.parametrize(("value", "expected"), [
    (0.7, 0.7), (1, 1.0), (0, 0.0), (7, 0.7), (10, 1.0), (85, 0.85), ("8/10", 0.8), ("3 / 4", 0.75),
    ("40%", 0.4), ("0.5", 0.5), (True, 1.0), (False, 0.0), ("yes", 1.0), ("not met", 0.0), ("partial", 0.5),
])
def test_scores_on_other_scales_are_normalized(value: object, expected: float) -> None:
    assert normalize_score(value) == pytest.approx(expected)


@pytest.mark.parametrize("value", [-1, 150, "11/10", "120%", "great", None, float("nan")])
def test_impossible_scores_are_errors_not_guesses(value: object) -> None:
    with pytest.raises(ReplyError):
        normalize_score(value)
