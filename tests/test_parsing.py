"""The answer contract, unit by unit: one JSON object per reply, one scale per score."""

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
    '{"verdicts": [],}',  # trailing comma: structure repaired, no value invented
    'I read the {criteria} first. {"verdicts": []}',  # braces in prose are not an answer
    '{"verdicts": []}\nAgain: {"verdicts": []}',  # the same object twice is not ambiguous
])
def test_extracts_the_one_object(reply: str) -> None:
    assert extract_json_object(reply) == {"verdicts": []}


def test_a_think_tag_quoted_inside_the_answer_is_text() -> None:
    reply = '{"reason": "the response leaves a <think> tag open", "score": 0}'
    assert extract_json_object(reply) == {"reason": "the response leaves a <think> tag open", "score": 0}


def test_colons_inside_strings_are_not_keys() -> None:
    assert extract_json_object('{"reason": "a: b", "note": "c\\u003a d", "score": 1}') == {
        "reason": "a: b", "note": "c: d", "score": 1}


def test_structural_repairs_keep_literal_values() -> None:
    assert extract_json_object("{'score': 0.5, 'ok': true,}") == {"score": 0.5, "ok": True}


@pytest.mark.parametrize(("reply", "reason"), [
    ("", "empty"),
    ("   ", "empty"),
    ("no json here", "no JSON object"),
    ("[1, 2, 3]", "array"),
    ('{"verdicts": [{"criterion_id": "a", "score": 1', "cut off"),
    ('{"score": 0.}', "not written completely"),  # json-repair would read 0.0
    ('{"score": .5}', "not written completely"),
    ('{"score": 0.9}\nIf the rubric were lenient: {"score": 1}', "2 different JSON objects"),
    ('<think>Draft: {"score": 1}', "never closed"),
    ('<think>a</think> {"score": 1} <think>b', "never closed"),
    ('{"score": 1, "score": 0}', "key 'score' twice"),  # a JSON reader keeps the last value silently
    ('Verdict: {"v": [{"score": 1, "score": 0}]}', "key 'score' twice"),
    ('{"verdicts": [], "verdicts": [1]}', "key 'verdicts' twice"),
    ('{"r": "a\\u003ab", "s": 1, "s": 2}', "key 's' twice"),  # an escaped ':' does not hide the dropped key
    ("{'score': 1, 'score': 0}", "drop the value 1"),  # json-repair keeps the last value as silently
    ('{"score": 1, 0}', "drop the value 0"),
])
def test_replies_outside_the_contract_are_errors(reply: str, reason: str) -> None:
    with pytest.raises(ReplyError, match=reason):
        extract_json_object(reply)


@pytest.mark.parametrize(("value", "expected"), [
    (0.7, 0.7), (1, 1.0), (0, 0.0), (0.0, 0.0), ("0.5", 0.5), (True, 1.0), (False, 0.0),
    ("yes", 1.0), ("not met", 0.0), ("partial", 0.5),
    ("8/10", 0.8), ("3 / 4", 0.75), ("40%", 0.4),  # the scale is written in the value itself
])
def test_scores_on_the_scale_or_explicit_are_read(value: object, expected: float) -> None:
    assert normalize_score(value) == pytest.approx(expected)


@pytest.mark.parametrize("value", [
    7, 9, 10, 85, 1.01, "7", "85",  # another scale: never rescaled (9 is not 0.9)
    -1, -0.1, 150, "11/10", "120%", "great", None, float("nan"), float("inf"), [1],
])
def test_scores_off_the_scale_are_errors_not_guesses(value: object) -> None:
    with pytest.raises(ReplyError):
        normalize_score(value)
