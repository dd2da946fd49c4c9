"""The answer contract: exactly one JSON answer out of a judge's reply, or the reason there is none.

The same rules hold for every agent. A reply is valid only when, after dropping closed reasoning
drafts (`<think>`, `<thinking>`, `<reasoning>`, Kimi's `◁think▷`; and anything before an unopened close),
and keeping only the final message of a reply in OpenAI's Harmony format (gpt-oss served without its
parser: `<|channel|>analysis<|message|>draft<|end|>...<|channel|>final<|message|>answer`), it holds
exactly one JSON object; code fences and chatter around it are fine. Only tags outside JSON objects mark
drafts: one inside an object is text the judge quotes from a response. It is invalid when
  - a draft is never closed, or a Harmony reply has no final message (the reasoning was cut or never
    finished; a draft is not an answer);
  - it holds several different objects (an honest verdict, then "if the rubric were lenient: {...}":
    which one did the judge mean?);
  - an object is cut before its closing brace (a truncated answer is not repaired into a verdict);
  - an object is not valid JSON and json-repair would have to invent a value: json-repair fixes
    structure only (quotes, trailing commas, comments); every number and boolean of the repaired
    object must be written, complete, in the reply (`"score": 0.` is not 0.0), and every one written
    in it must be in the repaired object (`"score": 1, 0` is not 1);
  - an object gives a key twice (`"score": 1, ..., "score": 0`, or a second "verdicts" list): a JSON
    reader silently keeps the last value, but which one the judge meant is as open as between two objects;
  - the text after the object takes it back ("Actually, I made a mistake: the first criterion is not
    met"): the object is then not what the judge meant, and what it meant instead is prose. Reasoning
    before the object, and a sign-off after it, are fine; only the words of `_REVISION` count.
A reply cut by the token limit (`finish_reason == "length"`) is invalid too; the client checks that.

Scores (`normalize_score`) are on one scale, the one the scorer prompt states: a number from 0 to 1.
Booleans, the words in `WORD_SCORES`, and a fraction or percentage written as one ("7/10", "85%")
are read as what they say. Anything else, a bare 7 or 85 included, is invalid: a number off the
scale is never rescaled, because 1 on a 0-10 scale and 1 on a 0-1 scale cannot be told apart.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

import orjson

from amaris_cli.jsonlimits import duplicated_key

_DRAFT_OPEN = r"<(?:think|thinking|reasoning)>|◁think▷"
_DRAFT_CLOSE = r"</(?:think|thinking|reasoning)>|◁/think▷"
_THINK_OPEN = re.compile(_DRAFT_OPEN, re.I)
_THINK_CLOSE = re.compile(_DRAFT_CLOSE, re.I)
# Harmony: messages are `<|channel|>NAME [<|constrain|>json]<|message|>TEXT` ending at <|end|>, <|return|> or <|call|>.
_HARMONY_CHANNEL = re.compile(r"<\|channel\|>\s*(\w+)[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>")
_HARMONY_END = re.compile(r"<\|(?:end|return|call)\|>")
_HARMONY_START = re.compile(r"\s*<\|(?:start|channel)\|>")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
# Words with which a judge takes back what it just answered (the reply's text after its JSON object). Phrases that
# only a judge revising itself writes count anywhere; words an honest explanation also uses ("the response actually
# covers...", "tells the user to wait", "a correction of its claim", "says sorry for the delay") count only where
# they open a sentence ("Actually, ...", "Hmm, wait: ...", "**Correction:** ...", "Sorry, the score should be 0",
# "I'm sorry, ...").
# Text in quotes is the response, quoted: "Wait, I made a mistake" is what the judge read, not what it says.
_REVISION_ANYWHERE = (
    r"on (?:second|further) thought|scratch that|i retract|i take (?:it|that) back"
    r"|(?:disregard|ignore)(?=\s+(?:the|my|that|this|everything)\b[^.\n]{0,20}?\b(?:above|previous|earlier|json|answer"
    r"|verdict|object|score)s?\b)"
    r"|let me (?:reconsider|re-?evaluate|re-?check|correct|revise|redo)"
    r"|i (?:made an? (?:mistake|error)|was (?:wrong|mistaken)|misread|misjudged)|my (?:mistake|error|bad)"
    r"|(?:the|my) (?:above|previous) (?:answer|json|verdict|score) (?:is|was) (?:wrong|incorrect)"
    r"|revised (?:score|verdict|answer|json)|never ?mind|correcting myself"
    r"|(?:up)?on re-?(?:reading|examination|checking)|after re-?(?:reading|checking|examining)")
# An apology takes the object back, unless it apologizes "for"/"if" something that is no error of the judge's: a
# sign-off ("Sorry for the long explanation.", "Apologies if this seems strict: ...") takes nothing back.
_APOLOGY = (r"(?:(?:i['\u2019]?m|i am|we['\u2019]?re|we are)\s+(?:so\s+|very\s+|truly\s+)?sorry|sorry|(?:my |our )?apologies"
            r"|(?:i|we) apologi[sz]e)"
            r"(?!\s+(?:for|if)\b(?![^.!?\n]*\b(?:mistake|error|confusion|oversight|mix-?up|wrong|incorrect|misread"
            r"|previous|earlier|above|verdict|score|rating)))")
_REVISION_OPENING = rf"actually|wait|correction|hold on|oops|(?:up)?on reflection|disregard|edit(?=\s*:)|{_APOLOGY}"
_REVISION = re.compile(
    rf"\b(?:{_REVISION_ANYWHERE})\b"
    rf"|(?:\A|(?<=[.!?;:(\n]))[\s*_>#\-\u2022]*(?:(?:hmm+|oh|ah|uh|um+|no|but|ok(?:ay)?|well|so)\b[\s,\-\u2013\u2014]*)*+"
    rf"\b(?:{_REVISION_OPENING})\b", re.I)
# The same in the languages a judge most often answers in besides English, when the rollouts are in them: a
# judge's own admission of an error counts anywhere; words an explanation also uses ("the response in fact ...",
# "其实", "実は") only where they open a sentence. Chinese, Japanese and Korean have no word boundaries.
_OTHER_ANYWHERE = (
    r"\b(?:ich habe mich (?:geirrt|vertan|verrechnet)|mein fehler|ich nehme (?:das|es|meine \w+) zurück"
    r"|(?:die|meine) (?:obige|vorherige) (?:bewertung|antwort|punktzahl) (?:ist|war) falsch"
    r"|bei (?:genauerer|näherer) betrachtung|je me suis tromp[ée]e?|j['\u2019]ai (?:fait|commis) une erreur"
    r"|je retire (?:ce|cela|mon|ma)|à la réflexion|après réflexion|mon erreur|me equivoqu[ée]|me he equivocado"
    r"|cometí un error|retiro (?:lo|mi)|pensándolo (?:bien|mejor)|mi error|(?:eu )?me enganei|eu errei|cometi um erro"
    r"|pensando bem|meu erro|mi sono sbagliat[oa]|ho (?:sbagliato|commesso un errore)|ripensandoci|errore mio"
    r"|я ошиб(?:ся|лась)|я допустил[аи]? ошибку|моя ошибка|беру свои слова назад)\b"
    # (first person, or the answer above: "the response made a mistake" is an explanation)
    r"|我(?:搞|弄)?错了|我犯了(?:一个)?错误|我(?:之前|刚才|上面)(?:的)?(?:评分|判断|回答|打分)(?:有误|错了)"
    r"|(?:上面|以上|之前)的(?:JSON|评分|分数|判断)(?:有误|错了|不对)"
    r"|(?:私|わたし)(?:が|は)(?:間違え|誤)|(?:先ほど|先程|前|上記)の(?:JSON|採点|評価|判定|回答|スコア)は(?:誤り|間違い)"
    r"|제가 (?:실수했|잘못(?:했|봤|읽|판단)|착각)|위의 (?:점수|평가|JSON)(?:는|은|가|이) 틀렸")
# An apology opens a take-back unless it apologizes "for" something, or names what (a sign-off: "Désolé pour la
# longue explication", "Disculpa la extensión"), as in English.
_OTHER_APOLOGY = (
    r"\b(?:entschuldigung|désolée?|pardon|lo siento|perdón|disculpa|desculpe|scusa(?:te)?|извините|простите)\b"
    r"(?!\s*(?:für|pour|por|pela|pelo|per|за|para)\b|\s+(?:la|le|les|el|a|o|die|den|das)\b)"
    r"|(?:抱歉|对不起|すみません|申し訳|죄송)(?!(?:解释|说明|篇幅|説明|설명))")
# A correction word opens a take-back when it heads a correction ("Correzione: ...", "修正：..."), not as a noun of a
# sentence ("修正后的答案为42", "Поправка в третьем шаге корректна").
_OTHER_CORRECTION = r"(?:\b(?:korrektur|corrección|correção|correzione|поправка)\b|更正|纠正|修正|訂正|정정)(?=\s*[:：,，])"
_OTHER_OPENING = (
    r"(?:\b(?:eigentlich|moment mal|warte|en fait|attendez|oups|en realidad|espera|na verdade|espere|in realtà"
    r"|aspetta|на самом деле|подождите|погодите)\b"
    rf"|{_OTHER_APOLOGY}|{_OTHER_CORRECTION}|实际上|其实|等等|等一下|不对(?![称劲的之])|実は|待って|사실은|잠깐)")
# Interjections a take-back may open with ("Hmm, eigentlich ...", "Oh, attendez", "嗯，其实"), within one sentence (a
# sentence's end starts another: across them, ". so" 5,000 times was read in 11 s).
_OTHER_INTERJECTION = r"(?:(?:hmm+|oh|ah|äh|ach|nein|non|no|ok(?:ay)?|bon|bueno|pues|嗯|啊|哦|あ|ああ|아)[\s,，、\-\u2013\u2014]*)*+"
_REVISION_OTHER = re.compile(
    rf"{_OTHER_ANYWHERE}|(?:\A|(?<=[.!?;:(\n。！？；：]))[\s*_>#\-\u2022]*{_OTHER_INTERJECTION}{_OTHER_OPENING}", re.I)
# Quoted text after the object: what the judge quotes from the response (straight, curly, code, guillemet or corner
# quotes, one line).
_QUOTED = re.compile(r'"[^"\n]*"|\u201c[^\u201d\n]*\u201d|\u201e[^\u201c\u201d\n]*[\u201c\u201d]|`[^`\n]*`'
                     r"|\u00ab[^\u00bb\n]*\u00bb|\u00bb[^\u00ab\n]*\u00ab|\u300c[^\u300d\n]*\u300d|\u300e[^\u300f\n]*\u300f")
_LITERAL = re.compile(r"true|false|null", re.I)


class ReplyError(ValueError):
    """The reply holds no usable answer; the message is sent back to the model on a re-ask."""


def _harmony_final(text: str) -> str:
    """The final channel's message of a reply in Harmony's format (one that starts with its tokens); any
    other reply as it is. A reply that only quotes the tokens (a reason about a response holding them)
    starts otherwise and is left alone."""
    if not _HARMONY_START.match(text):
        return text
    # As with draft tags, a marker inside a JSON object is text the judge quotes (a response that writes
    # "<|channel|>final<|message|>{...}" must not become the answer).
    spans = _object_spans(text)
    channels = [m for m in _HARMONY_CHANNEL.finditer(text) if _outside(spans, m.start())]
    finals = [m for m in channels if m.group(1).lower() == "final"]
    if not finals:
        raise ReplyError("the reply holds only Harmony drafts (channel "
                         f"{', '.join(sorted({m.group(1) for m in channels})) or 'none'}) and no final message; "
                         "give the JSON object in the final channel")
    if len(finals) > 1:
        raise ReplyError(f"the reply holds {len(finals)} Harmony final messages; give exactly one")
    message = text[finals[0].end():]
    end = _HARMONY_END.search(message)
    return message[: end.start()] if end else message


def _object_spans(text: str) -> list[tuple[int, int]]:
    """Where the complete JSON objects of `text` lie (outermost, left to right)."""
    spans: list[tuple[int, int]] = []
    i = 0
    while (start := text.find("{", i)) != -1 and (end := _closing_brace(text, start)) != -1:
        spans.append((start, end + 1))
        i = end + 1
    return spans


def _outside(spans: list[tuple[int, int]], index: int) -> bool:
    return not any(a <= index < b for a, b in spans)


def _strip_thinking(text: str) -> str:
    """The reply without its reasoning drafts. Only tags outside JSON objects mark drafts: a tag inside one
    is text the judge quotes (a reason about a response that leaves "<think>" open), so it neither cuts the
    answer nor joins the values around it. A close with no open before it ends a draft whose open tag was
    in the prompt (a chat template that starts the reply thinking): what comes before it is dropped."""
    text = _harmony_final(text)
    if not _THINK_OPEN.search(text) and not _THINK_CLOSE.search(text):
        return text  # the common reply: no scan
    spans = _object_spans(text)
    tags = sorted((m for pattern in (_THINK_OPEN, _THINK_CLOSE) for m in pattern.finditer(text)
                   if _outside(spans, m.start())), key=lambda m: m.start())
    kept: list[str] = []
    pos, opened = 0, None
    for tag in tags:
        if _THINK_OPEN.fullmatch(tag.group()):
            if opened is None:
                kept.append(text[pos:tag.start()])
                closed = any(t.start() > tag.start() and not _THINK_OPEN.fullmatch(t.group()) for t in tags)
                answered = any(pos <= a and b <= tag.start() and _candidate(text[a:b]) is not None for a, b in spans)
                if closed and answered:
                    # Reasoning after the answer is no draft of it: kept as written, so that a take-back in it
                    # ("<think>Wait, correct-answer should be 0</think>") is read as one. (Never closed, it is
                    # reasoning cut or unfinished: an error below.)
                    return "".join(kept) + text[tag.start():]
                opened = tag
        elif opened is None:  # an unopened close: everything before it was a draft
            kept, pos = [], tag.end()
        else:
            opened, pos = None, tag.end()
    if opened is not None:
        tag = opened.group()
        close = "◁/think▷" if tag == "◁think▷" else "</" + tag[1:]
        raise ReplyError(f"the reply has a {tag} block that is never closed (reasoning cut or unfinished); "
                         f"finish the reasoning, close it with {close}, then give the JSON object")
    return "".join(kept) + text[pos:]


def _closing_brace(text: str, start: int) -> int:
    """Index of the brace closing the object that opens at `start`, or -1 if it is never closed."""
    depth = 0
    in_str = False
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _literals(span: str) -> Counter[Any]:
    """The complete number and true/false literals written outside strings in `span`.

    A number counts only when a delimiter follows it (`,`, `}`, `]`, after optional spaces): a
    number at the end of a cut text, or `0.` in `"score": 0.}`, is not a complete literal."""
    found: Counter[Any] = Counter()
    i, n = 0, len(span)
    while i < n:
        ch = span[i]
        if ch == '"':
            i += 1
            while i < n and span[i] != '"':
                i += 2 if span[i] == "\\" else 1
            i += 1
            continue
        if ch == "-" or ch.isdigit():
            if i > 0 and (span[i - 1].isalnum() or span[i - 1] in "._"):
                i += 1
                continue
            m = _NUMBER.match(span, i)
            if m:
                rest = span[m.end():].lstrip()
                if rest[:1] in (",", "}", "]"):
                    found[("number", float(m.group()))] += 1
                i = m.end() if m.end() > i else i + 1
                continue
        if ch in "tfnTFN":
            m = _LITERAL.match(span, i)
            if m and not (i > 0 and span[i - 1].isalnum()) and not span[m.end():m.end() + 1].isalnum():
                found[("literal", m.group().lower())] += 1
                i = m.end()
                continue
        i += 1
    return found


def _invented(value: Any, literals: Counter[Any], path: str = "") -> str | None:
    """The path of the first number or boolean in `value` that `literals` does not hold, or None."""
    if isinstance(value, bool):
        key: tuple[str, Any] = ("literal", "true" if value else "false")
    elif isinstance(value, int | float):
        key = ("number", float(value))
    elif isinstance(value, dict):
        for k, v in value.items():
            if (where := _invented(v, literals, f"{path}.{k}" if path else str(k))) is not None:
                return where
        return None
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if (where := _invented(v, literals, f"{path}[{i}]")) is not None:
                return where
        return None
    else:
        return None
    if literals[key] <= 0:
        return path or "(value)"
    literals[key] -= 1
    return None


def _duplicate_key(span: str, value: dict[str, Any]) -> str | None:
    """The problem with a valid JSON `span` (read as `value`) that gives a key twice in one object, or None."""
    key = duplicated_key(span.encode(), value)
    if key is None:
        return None
    return f"the JSON object gives the key {key!r} twice in one object; which value is meant is ambiguous: give each key once"


def _candidate(span: str) -> tuple[dict[str, Any], str | None] | None:
    """The object in a balanced `{...}` span and the problem with it, or None if it is not an answer."""
    try:
        value = orjson.loads(span)
    except orjson.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        return (value, _duplicate_key(span, value)) if value else None
    if ":" not in span:  # braces in prose ("{x}"), not an object
        return None
    import json_repair  # only for a reply that is not valid JSON: 21 modules no well-formed answer needs

    repaired = json_repair.repair_json(span, return_objects=True)
    if not isinstance(repaired, dict) or not repaired:
        return None
    if _lone_surrogate(repaired):  # json-repair keeps what JSON readers refuse, and no file of the run could hold it
        return repaired, ("the JSON object holds a \\uD800-\\uDFFF escape that is no character (a lone surrogate); "
                          "write the text itself")
    literals = _literals(span)
    where = _invented(repaired, literals)
    if where is not None:
        return repaired, (f"the JSON object is not valid JSON and the value of {where} is not written completely "
                          "in it; write every value out")
    # What _invented did not take is written in the reply but not in the object json-repair reads: a key given
    # twice (the reader keeps one value) or a value without a key (`"score": 1, 0`).
    dropped = sorted(v if isinstance(v, str) else f"{v:g}" for (_, v), n in literals.items() if n > 0 and v != "null")
    if dropped:
        return repaired, (f"the JSON object is not valid JSON and json-repair would drop the value {dropped[0]} written "
                          "in it (a key given twice, or a value without a key); give each key once, with one value")
    return repaired, None


def _lone_surrogate(value: Any) -> bool:
    """Whether a key or string anywhere in `value` holds a UTF-16 surrogate on its own."""
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(map(_lone_surrogate, value))
    return False


def _revision(after: str) -> str | None:
    """The words with which the text after a reply's object takes it back, or None (quotes are not the judge's)."""
    plain = _QUOTED.sub('""', after)
    found = [m for m in (_REVISION.search(plain), _REVISION_OTHER.search(plain)) if m is not None]
    first = min(found, key=lambda m: m.start(), default=None)
    return " ".join(first.group().split()).strip("*_>#-\u2022 ").lower() if first else None


def extract_json_object(text: str) -> dict[str, Any]:
    """The one JSON object of a reply (see the module doc), or a ReplyError naming what is wrong."""
    if not text or not text.strip():
        raise ReplyError("the reply was empty")
    body = _strip_thinking(text).strip()
    if body.startswith("{"):
        # The common reply (and every reply under response_format): the body is one valid object and nothing
        # else, so it is the one candidate the scan below would find, and any "<think>" is inside it.
        try:
            whole = orjson.loads(body)
        except orjson.JSONDecodeError:
            whole = None
        if isinstance(whole, dict) and whole:
            if problem := _duplicate_key(body, whole):
                raise ReplyError(problem)
            return whole
    if body.startswith("["):
        try:
            if isinstance(orjson.loads(body), list):
                raise ReplyError("the reply is a JSON array; answer with one JSON object")
        except orjson.JSONDecodeError:
            pass
    if body.startswith('"'):  # an object encoded twice: its braces are inside a string, where the scan would start
        try:
            if isinstance(orjson.loads(body), str):
                raise ReplyError("the reply is a JSON string (an object encoded twice); answer with the JSON object "
                                 "itself")
        except orjson.JSONDecodeError:
            pass
    candidates: list[tuple[dict[str, Any], str | None]] = []
    object_end = 0  # where the last candidate object ends: the text after it may take it back
    cut_at: int | None = None
    i = 0
    while (start := body.find("{", i)) != -1:
        end = _closing_brace(body, start)
        if end == -1:
            if ":" in body[start:]:
                cut_at = start
            break
        found = _candidate(body[start : end + 1])
        if found is not None:
            candidates.append(found)
            object_end = end + 1
        i = end + 1
    if cut_at is not None:
        raise ReplyError("the reply's JSON object is cut off before its closing brace; give the complete object")
    # stdlib json: any int json-repair returns (orjson refuses those beyond 64 bits)
    distinct = {json.dumps(value, sort_keys=True): (value, problem) for value, problem in candidates}
    if not distinct:
        raise ReplyError("the reply holds no JSON object")
    if len(distinct) > 1:
        raise ReplyError(f"the reply holds {len(distinct)} different JSON objects; answer with exactly one "
                         "(your final answer, and no alternatives)")
    value, problem = next(iter(distinct.values()))
    if problem:
        raise ReplyError(problem)
    # From the object on, braces of prose included ("Actually, the set {1, 2} misses 3" was read from " misses 3").
    if revision := _revision(body[object_end:]):
        raise ReplyError(f"the reply goes on after its JSON object and takes it back (\"{revision}\"): "
                         "answer again with only the JSON object you mean, corrected")
    if restated := _restated(value, body[object_end:]):
        raise ReplyError(f"the reply goes on after its JSON object and gives {restated}, not the object's value: "
                         "answer again with only the JSON object you mean")
    return value


# A criterion's verdict said again in prose: its id, a few linking words ("is", "should be", "score", ":"), then a
# value. The words a take-back opens with are many ("Scratch the above", "Erratum:", "Final verdict:"); the value it
# gives is what counts: one that differs from the object's is a second answer, whatever words come before it.
# One token an iteration, and no giving back (*+): a run of dashes or spaces split into iterations in every way
# was exponential ("correct-answer" and 24 dashes took 8 s).
_LINK = (r"(?:\s*(?:[(:=\u2192\"']|-(?!\d)|>|\b(?:is|are|was|were|be|been|being|have|has|had|should|would|could|must|will|now|"
         r"really|actually|instead|rather|then|thus|therefore|only|just|wrong|gets?|got|scores?|scored|as|at|of|to|"
         r"it|so)"
         r"\b))*+")
_SAID = re.compile(_LINK + r"\s*[\"']?(not met|not present|not satisfied|unmet|met|passed|pass|failed|fail|present|"
                   r"absent|satisfied|partially|partial|true|false|yes|no|-?\d+(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?|\s*%)?)"
                   r"(?![\w.]*\d)", re.I)


def _verdict_values(value: Any) -> dict[str, float]:
    """The verdicts of an answer, anywhere in it: criterion id -> the value given (score, or present)."""
    found: dict[str, float] = {}
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            given = node.get("score", node.get("present"))
            if isinstance(node.get("criterion_id"), str) and given is not None:
                try:
                    found[node["criterion_id"]] = normalize_score(given)
                except ReplyError:
                    pass  # the answer's own checks say what is wrong with it
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _restated(value: Any, after: str) -> str | None:
    """`ID VALUE` (as the reply says it) where the text after the object gives a criterion another value."""
    verdicts = _verdict_values(value) if after.strip() else {}
    if not verdicts:
        return None
    ids = {criterion.lower() for criterion in verdicts}
    # Quoted text is the response's, but a quoted id is the judge naming a criterion ("correct-answer": 0).
    plain = _QUOTED.sub(lambda m: m.group() if m.group()[1:-1].strip().lower() in ids else '""', after)
    for criterion, meant in verdicts.items():
        for named in re.finditer(rf"(?<![\w-]){re.escape(criterion)}(?![\w-])", plain, re.I):
            said = _SAID.match(plain, named.end())
            if said is None:
                continue
            try:
                again = normalize_score(said.group(1))
            except ReplyError:
                again = None
            if again is None or abs(again - meant) > 1e-9:
                return f"{criterion} {' '.join(said.group().split())!r}"
    return None


WORD_SCORES = {
    "yes": 1.0, "true": 1.0, "met": 1.0, "pass": 1.0, "passed": 1.0, "present": 1.0, "satisfied": 1.0,
    "no": 0.0, "false": 0.0, "not met": 0.0, "unmet": 0.0, "fail": 0.0, "failed": 0.0,
    "absent": 0.0, "not present": 0.0, "not satisfied": 0.0, "partial": 0.5, "partially": 0.5,
}
SCALE = "a score is a number from 0 to 1 (1 = fully met, or the pitfall clearly present; 0 = not met, or absent)"


# Words that say whether a check passed. As a pitfall's `present`, "pass" may mean "the response passes this check"
# (the pitfall absent) as easily as "the pitfall is there": invalid, never guessed.
PASS_WORDS = frozenset({"met", "unmet", "not met", "pass", "passed", "fail", "failed", "satisfied", "not satisfied"})


def normalize_presence(value: Any) -> float:
    """A pitfall's `present`: as a score (true/false, yes/no, present/absent, a number from 0 to 1), but never a
    word of PASS_WORDS."""
    if isinstance(value, str) and value.strip().lower() in PASS_WORDS:
        raise ReplyError(f"\"present\" is {value[:40]!r}, which says whether a check passed, not whether the "
                         "pitfall is shown: answer true or false")
    return normalize_score(value)


def normalize_score(value: Any) -> float:
    """A verdict score in [0, 1]: a number on that scale, true/false, a word of WORD_SCORES, or an
    explicit fraction ("7/10") or percentage ("85%"). Anything else is a ReplyError, never a guess."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, str):
        text = value.strip().lower()
        if text in WORD_SCORES:
            return WORD_SCORES[text]
        if m := re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)", text):
            num, den = float(m.group(1)), float(m.group(2))
            if den <= 0 or not 0 <= num <= den:
                raise ReplyError(f"score {value!r} is not a fraction between 0 and 1; {SCALE}")
            return num / den
        if m := re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*%", text):
            pct = float(m.group(1))
            if not 0 <= pct <= 100:
                raise ReplyError(f"score {value!r} is not a percentage between 0 and 100; {SCALE}")
            return pct / 100
        if not re.fullmatch(r"-?\d+(?:\.\d+)?", text):
            raise ReplyError(f"score {value!r} is not a number; {SCALE}")
        number: float = float(text)
    elif isinstance(value, int | float):
        number = float(value)
    else:
        raise ReplyError(f"score {value!r} is not a number; {SCALE}")
    if not math.isfinite(number) or not 0 <= number <= 1:
        raise ReplyError(f"score {value!r} is off the scale: {SCALE}. Scores on other scales (0-10, 0-100) "
                         "are not converted; give every score from 0 to 1")
    return number + 0.0  # -0.0 is 0
