"""Getting one JSON object out of what a real judge answers.

Judges wrap JSON in code fences, prefix `<think>` drafts, add chatter, truncate, and give scores
on 0-10 or 0-100 scales or as "8/10" and "40%". We strip thinking and fences, parse strictly,
then with json-repair, then take the last balanced object; scores are normalized to [0, 1].
"""

from __future__ import annotations

import re
from typing import Any

import json_repair
import orjson

_THINK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.S | re.I)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)


class ReplyError(ValueError):
    """The reply holds no usable answer; the message is sent back to the model on a re-ask."""


def _strip_thinking(text: str) -> str:
    text = _THINK.sub("", text)
    closing = re.search(r"</think(?:ing)?>", text, re.I)  # an unopened close: drop the draft before it
    return text[closing.end():] if closing else text


def _last_balanced_object(text: str) -> str | None:
    end = text.rfind("}")
    while end != -1:
        depth = 0
        in_str = False
        for i in range(end, -1, -1):
            ch = text[i]
            if in_str:
                if ch == '"' and not (i > 0 and text[i - 1] == "\\"):
                    in_str = False
                continue
            if ch == '"':
                in_str = True
            elif ch == "}":
                depth += 1
            elif ch == "{":
                depth -= 1
                if depth == 0:
                    return text[i : end + 1]
        end = text.rfind("}", 0, end)
    return None


def extract_json_object(text: str) -> dict[str, Any]:
    if not text or not text.strip():
        raise ReplyError("the reply was empty")
    body = _strip_thinking(text).strip()
    fenced = _FENCE.findall(body)
    candidates = [f.strip() for f in reversed(fenced)] + [body]
    for candidate in candidates:
        try:
            value = orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    last = _last_balanced_object(body)
    if last is not None:
        try:
            value = orjson.loads(last)
            if isinstance(value, dict):
                return value
        except orjson.JSONDecodeError:
            pass
    start = body.find("{")
    if start != -1:
        repaired = json_repair.repair_json(body[start:], return_objects=True)
        if isinstance(repaired, dict) and repaired:
            return repaired
        if isinstance(repaired, list):
            objects = [v for v in repaired if isinstance(v, dict) and v]
            if objects:
                return objects[-1]
    raise ReplyError("the reply holds no JSON object")


_WORD_SCORES = {
    "yes": 1.0, "true": 1.0, "met": 1.0, "pass": 1.0, "passed": 1.0, "present": 1.0, "satisfied": 1.0,
    "no": 0.0, "false": 0.0, "not met": 0.0, "unmet": 0.0, "fail": 0.0, "failed": 0.0,
    "absent": 0.0, "not present": 0.0, "not satisfied": 0.0, "partial": 0.5, "partially": 0.5,
}


def normalize_score(value: Any) -> float:
    """A verdict score in [0, 1] from what judges write: 0.7, 7 (of 10), 70 (of 100), "7/10",
    "70%", true, "met". Anything else is an error, never a guess."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _WORD_SCORES:
            return _WORD_SCORES[text]
        if m := re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)", text):
            num, den = float(m.group(1)), float(m.group(2))
            if den <= 0 or not 0 <= num <= den:
                raise ReplyError(f"score {value!r} is not a fraction between 0 and 1")
            return num / den
        if m := re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*%", text):
            pct = float(m.group(1))
            if not 0 <= pct <= 100:
                raise ReplyError(f"score {value!r} is not a percentage between 0 and 100")
            return pct / 100
        try:
            value = float(text)
        except ValueError:
            raise ReplyError(f"score {value!r} is not a number") from None
    if isinstance(value, int | float):
        x = float(value)
        if x != x or x < 0:
            raise ReplyError(f"score {value!r} is negative or not a number")
        if x <= 1:
            return x
        if x <= 10:
            return x / 10
        if x <= 100:
            return x / 100
        raise ReplyError(f"score {value!r} is out of range (expected 0 to 1)")
    raise ReplyError(f"score {value!r} is not a number")
