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
    '<reasoning>the answer {"verdicts": [1]} is wrong</reasoning>\n{"verdicts": []}',
    '<THINKING>draft</THINKING>{"verdicts": []}',
    '◁think▷maybe {"verdicts": [1]}◁/think▷{"verdicts": []}',  # Kimi's reasoning draft
    # Harmony (gpt-oss served without its parser): the final channel is the answer, the analysis a draft
    '<|channel|>analysis<|message|>maybe {"verdicts": [1]}<|end|><|start|>assistant<|channel|>final<|message|>'
    '{"verdicts": []}<|return|>',
    '<|start|>assistant<|channel|>final <|constrain|>json<|message|>{"verdicts": []}',
    'Wait, let me check each criterion first. Actually it holds. {"verdicts": []}',  # reasoning before the answer
    '{"verdicts": []}\nLet me know if you need anything else.',  # a sign-off
])
def test_extracts_the_one_object(reply: str) -> None:
    assert extract_json_object(reply) == {"verdicts": []}


@pytest.mark.parametrize("after", [
    # what a judge writes after its verdict to explain it, with the words a retraction opens with inside a sentence
    "Explanation: the response actually works through every step the criterion asks for.",
    "The response tells the user to wait for the results instead of giving them.",
    "Note: the response includes a correction of its earlier claim.",
    "The response chose to disregard the user's constraint.",
    "The response says sorry for the delay and then answers; its apologies do not replace the steps.",
    # an apology for the explanation itself, a sign-off: it takes nothing back
    "Sorry for the long explanation.",
    "Apologies if this seems strict: the criterion asks for units, and the response gives none.",
    "I apologize for the length of this note; each step was checked against the criterion.",
    # the response, quoted: what the judge read, not what it says
    'The response writes "Wait, I made a mistake" and then fixes it, the self-correction the criterion rewards.',
    "It ends with `actually, scratch that` and a new answer.",
    # the same in the languages a judge answers rollouts in: words a retraction opens with, inside a sentence
    "回答实际上给出了每一步的推导。", "该回答其实完整地解释了步骤。", "回答纠正了之前的错误，符合标准。",
    "回答向用户表示抱歉后给出了答案。", "応答は実はすべての手順を示しています。", "Die Antwort ist eigentlich vollständig.",
    "La réponse donne en fait toutes les étapes.", "La respuesta en realidad muestra cada paso.",
    "Ответ на самом деле показывает все шаги.",
    # and quoted from the response, in that language's quotation marks
    "回答中写道「我错了」然后改正了答案。", "La réponse écrit « je me suis trompé » puis corrige.",
    "Die Antwort sagt „ich habe mich geirrt“ und korrigiert sich.",
    "Die Antwort sagt »ich habe mich geirrt« und korrigiert sich.",
    # the response's mistakes in the third person, an apology that signs off, a word that only begins alike
    "回答は途中で計算を間違えました。", "応答の最終的な答えは間違っていました。", "제가 잘못된 부분을 찾지 못했습니다.",
    "Désolé pour la longue explication.", "Entschuldigung für die ausführliche Begründung.",
    "Lo siento por la explicación larga.", "抱歉解释较长。", "不对称的结构也被正确处理。",
    "Desculpe pela explicação longa.", "Disculpa la extensión de la explicación.", "第一项满足。不对的地方在于第三步的单位换算。",
    # a correction word as a noun of the sentence, not heading a correction
    "回答先写了41。修正后的答案为42，是正确的。", "訂正後の答えは42で正しいです。", "정정된 답은 42로 올바릅니다.",
    "Correzione del calcolo: lo studente ha corretto l'errore al passaggio 3.", "Поправка в третьем шаге ответа корректна.",
])
def test_an_explanation_after_the_object_does_not_take_it_back(after: str) -> None:
    assert extract_json_object('{"verdicts": []}\n' + after) == {"verdicts": []}
    assert extract_json_object('```json\n{"verdicts": []}\n```\n' + after) == {"verdicts": []}


_ANSWER = '{"verdicts": [{"criterion_id": "correct-answer", "reason": "r", "score": 1}, ' \
          '{"criterion_id": "shows-reasoning", "reason": "r", "score": 0.5}]}'


@pytest.mark.parametrize("after", [  # found by a red-team pass: 17 of 18 such phrasings were recorded as 1
    "Scratch the above, correct-answer is 0.",
    "Erratum: correct-answer = 0.",
    "Revision: correct-answer: 0",
    "Amended: correct-answer score 0, shows-reasoning score 0.5.",
    "Final verdict: correct-answer score 0.",
    "However, 108 does not match 109, so correct-answer is 0.",
    "\u2014 actually, correct-answer is 0.",
    'Final: "correct-answer": 0',
    "So correct-answer is not met.",
    "shows-reasoning should be 1 after all.",
    "Correct-answer should have been 0.",
    "Oh no, correct-answer is wrong: it should be 0.",
    "<think>Wait, correct-answer should be 0; I was wrong above.</think>",  # reasoning after the answer is no draft
    "<think>correct-answer is 0 here</think>",
])
def test_a_verdict_said_again_after_the_object_with_another_value_is_invalid(after: str) -> None:
    with pytest.raises(ReplyError, match="takes it back|gives (correct-answer|shows-reasoning)"):
        extract_json_object(_ANSWER + "\n" + after)


@pytest.mark.parametrize("after", [
    "In short: correct-answer is met and shows-reasoning is 0.5.",  # the same values, said again
    "correct-answer: the response gives 42, which matches the reference.",
    "Both criteria were checked against the reference; see the reasons.",
    "The response's correct-answer section is fine.",
    "correct-answer is right: 42 matches 42.",
])
def test_a_verdict_said_again_with_the_same_value_or_an_explanation_is_fine(after: str) -> None:
    assert extract_json_object(_ANSWER + "\n" + after)["verdicts"][0]["score"] == 1


def test_a_long_run_of_linking_text_after_an_id_ends() -> None:
    """The pattern that reads a verdict said again once split a run of dashes into its iterations in every way:
    "correct-answer" and 24 dashes took 8 s, and each dash doubled it (a reply can hold a thousand); the take-back
    openings read interjections across sentence ends (". so" 5,000 times: 11 s, growing with its square). Run in
    a process of its own, bounded: the check is that it ends, not how fast."""
    import subprocess
    import sys

    code = ("from amaris_cli.llm.parsing import extract_json_object, ReplyError\n"
            f"answer = {_ANSWER!r}\n"
            "for tail in ['correct-answer ' + '-' * 80 + ' x', 'correct-answer' + ' :' * 80 + 'x', "
            "'correct-answer ' + ' is' * 80 + ' x', '. so ' * 20000, '\u3002\u55ef\uff0c' * 20000]:\n"
            "    extract_json_object(answer + chr(10) + tail)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_think_tag_quoted_inside_the_answer_is_text() -> None:
    reply = '{"reason": "the response leaves a <think> tag open", "score": 0}'
    assert extract_json_object(reply) == {"reason": "the response leaves a <think> tag open", "score": 0}


@pytest.mark.parametrize("reply", [
    # tags the judge quotes from a response are text: they neither cut the answer nor join the values around
    # them (the second verdict's score once became the first's, and the first verdict's reason lost its end)
    '{"verdicts": [{"criterion_id": "a", "reason": "it opens <think>", "score": 1}, '
    '{"criterion_id": "b", "reason": "and closes </think> late", "score": 0}]}',
    'Verdicts: {"verdicts": [{"criterion_id": "a", "reason": "it wraps its work in <reasoning> and </reasoning>", '
    '"score": 1}]}',
    '{"verdicts": [{"criterion_id": "a", "reason": "it ends with </think> that it never opened", "score": 0}]}',
    '{"verdicts": [{"criterion_id": "a", "reason": "it writes <|channel|>analysis<|message|> tokens", "score": 0}]}',
    # a Harmony reply whose final answer quotes a response that writes a final message of its own (a reviewer's
    # finding: the quoted verdict, score 1, was taken for the judge's 0)
    '<|channel|>analysis<|message|>Check a: wrong.<|end|><|start|>assistant<|channel|>final<|message|>'
    '{"verdicts": [{"criterion_id": "a", "score": 0, "reason": "wrong; the response then writes '
    "<|channel|>final<|message|>{'verdicts': [{'criterion_id': 'a', 'score': 1, 'reason': 'ok'}]}\"}]}<|return|>",
])
def test_draft_tags_quoted_inside_the_answer_change_nothing(reply: str) -> None:
    import json

    answer = reply[reply.index("{"):].removesuffix("<|return|>")
    assert extract_json_object(reply) == json.loads(answer)


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
    ('"{\\"verdicts\\": [{\\"criterion_id\\": \\"a\\", \\"score\\": 1}]}"', "encoded twice"),
    ('{"verdicts": [{"criterion_id": "a", "score": 1', "cut off"),
    ('{"score": 0.}', "not written completely"),  # json-repair would read 0.0
    ('{"score": .5}', "not written completely"),
    ('{"score": 0.9}\nIf the rubric were lenient: {"score": 1}', "2 different JSON objects"),
    ('<think>Draft: {"score": 1}', "never closed"),
    ('<think>a</think> {"score": 1} <think>b', "never closed"),
    ('<reasoning>Draft: {"score": 1}', "a <reasoning> block that is never closed .* close it with </reasoning>"),
    ('◁think▷Draft: {"score": 1}', "never closed"),
    ('<|channel|>analysis<|message|>Draft: {"score": 1}<|end|>', "Harmony drafts .*analysis.* no final message"),
    ('<|channel|>final<|message|>{"score": 1}<|end|><|channel|>final<|message|>{"score": 0}', "2 Harmony final"),
    ('{"score": 1, "score": 0}', "key 'score' twice"),  # a JSON reader keeps the last value silently
    ('Verdict: {"v": [{"score": 1, "score": 0}]}', "key 'score' twice"),
    ('{"verdicts": [], "verdicts": [1]}', "key 'verdicts' twice"),
    ('{"r": "a\\u003ab", "s": 1, "s": 2}', "key 's' twice"),  # an escaped ':' does not hide the dropped key
    ("{'score': 1, 'score': 0}", "drop the value 1"),  # json-repair keeps the last value as silently
    # a JSON reader refuses a lone surrogate; json-repair keeps it, and no file of the run could hold it
    ('{"score": 1, "reason": "r\\ud800"}', "lone surrogate"),
    ('{"score": 1, "r\\udfff": "x"}', "lone surrogate"),
    ('{"score": 1, 0}', "drop the value 0"),
    # text after the object that takes it back: the object is not what the judge meant
    ('{"score": 1}\nActually, I made a mistake: the response does not meet the criterion.', r'takes it back \("actually"\)'),
    ('```json\n{"score": 1}\n```\nWait, the final answer is wrong, so the score should be 0.', r'takes it back \("wait"\)'),
    ('Verdict: {"score": 1}. On second thought, it is only partly met.', r'takes it back \("on second thought"\)'),
    ('{"score": 1}\nCorrection: score 0.', r'takes it back \("correction"\)'),
    ('{"score": 1}\nPlease disregard the JSON above.', r'takes it back \("disregard"\)'),
    ('{"score": 1}\nHmm, actually no: the score should be 0.', r'takes it back \("hmm, actually"\)'),
    ('{"score": 1}\n**Wait** - the final answer is wrong.', r'takes it back \("wait"\)'),
    ('{"score": 1}\nOops, my mistake: the criterion is not met.', r'takes it back \("oops"\)'),
    ('{"score": 1}\nUpon reflection, the score should be 0.', r'takes it back \("upon reflection"\)'),
    ('{"score": 1}\nI was mistaken; the response fails it.', r'takes it back \("i was mistaken"\)'),
    ('{"score": 1}\nHold on, the final answer is wrong.', r'takes it back \("hold on"\)'),
    ('{"score": 1}\nLet me re-check: the final answer is wrong, so 0.', r'takes it back \("let me re-check"\)'),
    ('{"score": 1}\nSorry, the score should be 0: the final answer is wrong.', r'takes it back \("sorry"\)'),
    # braces in the prose after the object are not where the check starts
    ('{"score": 1}\nActually, I was wrong: the set {1, 2} misses 3.', r'takes it back \("actually"\)'),
    ('{"score": 1}\nMy apologies - the criterion is not met.', r'takes it back \("my apologies"\)'),
    ('{"score": 1}\nOh, I apologize: the response fails it.', r'takes it back \("oh, i apologize"\)'),
    ("{\"score\": 1}\nI'm sorry, the score should be 0: the final answer is wrong.", r"takes it back \(\"i'm sorry\"\)"),
    ('{"score": 1}\nI am sorry - the criterion is not met after all.', r'takes it back \("i am sorry"\)'),
    ('{"score": 1}\nI\u2019m so sorry, it is 0.', r'takes it back \("i\u2019m so sorry"\)'),
    ('{"score": 1}\nSorry for the confusion: the score should be 0.', r'takes it back \("sorry"\)'),
    ('{"score": 1}\nWe apologize, the response fails it.', r'takes it back \("we apologize"\)'),
    ('{"score": 1}\nApologies for the previous verdict; the score is 0.', r'takes it back \("apologies"\)'),
    ('{"score": 1}\nNever mind, the first criterion is not met; its score should be 0.', r'takes it back \("never mind"\)'),
    ('{"score": 1}\nEDIT: correct-answer should be 0.', r'takes it back \("edit"\)'),
    ('{"score": 1}\nUpdate: after re-reading, correct-answer is not met.', r'takes it back \("after re-reading"\)'),
    ('{"score": 1}\nCorrecting myself: correct-answer gets 0.', r'takes it back \("correcting myself"\)'),
    ('{"score": 1}\nUpon re-examination the score is 0.', r'takes it back \("upon re-examination"\)'),
    # ... and in the languages a judge answers rollouts in (an English-only check read the first object)
    ('{"score": 1}\n实际上，我犯了一个错误：最终答案是错的，分数应为 0。', r'takes it back \("实际上"\)'),
    ('{"score": 1}\n其实不对，应该是0分。', r'takes it back \("其实"\)'),
    ('{"score": 1}\n我刚才的评分有误，应为 0。', r'takes it back \("我刚才的评分有误"\)'),
    ('{"score": 1}\n抱歉，分数应为0。', r'takes it back \("抱歉"\)'),
    ('{"score": 1}\n実は、間違えました。スコアは0です。', r'takes it back \("実は"\)'),
    ('{"score": 1}\n잠깐, 제가 실수했습니다. 점수는 0입니다.', r'takes it back \("잠깐"\)'),
    ('{"score": 1}\nEigentlich ist die Antwort falsch; der Score sollte 0 sein.', r'takes it back \("eigentlich"\)'),
    ('{"score": 1}\nDas Kriterium ist nicht erfüllt, ich habe mich geirrt.', r'takes it back \("ich habe mich geirrt"\)'),
    ('{"score": 1}\nEn fait, je me suis trompé : le score est 0.', r'takes it back \("en fait"\)'),
    ('{"score": 1}\nEn realidad, la puntuación es 0.', r'takes it back \("en realidad"\)'),
    ('{"score": 1}\nNa verdade, a pontuação é 0.', r'takes it back \("na verdade"\)'),
    ('{"score": 1}\nIn realtà il punteggio è 0.', r'takes it back \("in realtà"\)'),
    ('{"score": 1}\nНа самом деле оценка 0.', r'takes it back \("на самом деле"\)'),
    ('{"score": 1}\nHmm, eigentlich ist das erste Kriterium nicht erfüllt.', r'takes it back \("hmm, eigentlich"\)'),
    ('{"score": 1}\nOh, attendez : le score est 0.', r'takes it back \("oh, attendez"\)'),
    ('{"score": 1}\n嗯，其实分数应为0。', r'takes it back \("嗯，其实"\)'),
    ('{"score": 1}\nMe he equivocado: la puntuación es 0.', r'takes it back \("me he equivocado"\)'),
    ('{"score": 1}\nHo sbagliato, il punteggio è 0.', r'takes it back \("ho sbagliato"\)'),
    ('{"score": 1}\n前の採点は誤りでした。スコアは0です。', r'takes it back \("前の採点は誤り"\)'),
    ('{"score": 1}\n제가 착각했습니다. 점수는 0입니다.', r'takes it back \("제가 착각"\)'),
    ('{"score": 1}\nDésolé, le score devrait être 0.', r'takes it back \("désolé"\)'),
    # "I made a mistake" as those languages say it, and "the answer above is wrong"
    ('{"score": 1}\nJ\'ai fait une erreur dans mon évaluation : le score est 0.', r"takes it back \(\"j'ai fait une erreur\"\)"),
    ('{"score": 1}\nCometí un error en la evaluación anterior; el puntaje es 0.', r'takes it back \("cometí un error"\)'),
    ('{"score": 1}\nCometi um erro na avaliação; a nota correta é 0.', r'takes it back \("cometi um erro"\)'),
    ('{"score": 1}\nHo commesso un errore nella valutazione.', r'takes it back \("ho commesso un errore"\)'),
    ('{"score": 1}\nЯ допустил ошибку в оценке; правильный балл 0.', r'takes it back \("я допустил ошибку"\)'),
    ('{"score": 1}\nIch habe mich verrechnet: das Kriterium ist nicht erfüllt.', r'takes it back \("ich habe mich verrechnet"\)'),
    ('{"score": 1}\nDie obige Bewertung ist falsch; richtig wäre 0.', r'takes it back \("die obige bewertung ist falsch"\)'),
    ('{"score": 1}\n我之前的判断错了，第一项应该是0。', r'takes it back \("我之前的判断错了"\)'),
    ('{"score": 1}\n上面的JSON有误，请以0分为准。', r'takes it back \("上面的json有误"\)'),
    ('{"score": 1}\n上記のJSONは誤りです。', r'takes it back \("上記のjsonは誤り"\)'),
    ('{"score": 1}\n위의 점수는 틀렸습니다. 0점이어야 합니다.', r'takes it back \("위의 점수는 틀렸"\)'),
    ('{"score": 1}\nCorrezione: il punteggio è 0.', r'takes it back \("correzione"\)'),
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
