"""What amaris can write back exactly: the checks one JSONL line passes before it is accepted.

orjson reads objects nested 1024 levels deep but writes only 254, reads integers beyond 64 bits as
(rounded) floats, and keeps the last of two equal keys. A line that relies on any of these would be
stored as something else, or crash a later write after the run was changed, so it is refused
here with a reason. Cheap byte counts decide which lines need the exact (slower) checks.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

MAX_DEPTH = 64  # levels of objects/arrays in one line, the line's own object included
INT_MIN, INT_MAX = -(2**63), 2**64 - 1  # what orjson reads and writes exactly


class Unstorable(ValueError):
    """A line amaris could not store exactly; the message is the reason."""


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def whole_file_problem(data: bytes) -> str | None:
    """Whole-file encodings that would otherwise fail on every line with a puzzling message."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "file is UTF-16 (it starts with a UTF-16 byte-order mark); JSONL must be UTF-8"
    if data.startswith(b"\x1f\x8b"):
        return "file is gzip-compressed; decompress it first (e.g. `gunzip -k FILE`)"
    return None


_JSON_POSITION = re.compile(r": line \d+ column (\d+) \(char \d+\)$")


def too_deep(exc: orjson.JSONDecodeError) -> bool:
    """JSON that orjson does not read for its depth (1024 levels): valid, but over MAX_DEPTH as well."""
    return "depth limit exceeded" in str(exc)


def json_error_reason(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"not valid UTF-8 (byte {bad.start}: {raw[bad.start:bad.start + 1]!r})"
    if too_deep(exc):
        return f"JSON nests deeper than {MAX_DEPTH} levels (the limit for one line)"
    if b"\xef\xbb\xbf" in raw:
        return "invalid JSON: a UTF-8 byte-order mark inside the file (only the file's first bytes may hold one)"
    reason = "invalid JSON: " + _JSON_POSITION.sub(r" (column \1)", str(exc))
    if b"\r" in raw.rstrip(b"\r"):
        reason += "; the line holds a carriage return (\\r) that does not end it: JSONL lines end with \\n or \\r\\n"
    elif b"\x00" in raw:
        reason += "; the line holds NUL bytes (a binary or corrupted file?)"
    return reason


_LONG_DIGITS = re.compile(rb"\d{19}")  # the shortest integer literal that may not fit 64 bits


def check_storable(raw: bytes, record: dict[str, Any]) -> None:
    """Refuse what amaris could not write back exactly: deep nesting, duplicate keys, integers
    outside 64 bits. Cheap byte counts decide; the slow exact checks run only when they flag a line."""
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and _deeper_than(raw, MAX_DEPTH):
        top = _too_deep(record, MAX_DEPTH)
        raise Unstorable(f"field {top!r} nests deeper than {MAX_DEPTH} levels (the limit for one line)")
    dumped = orjson.dumps(record)
    # An integer beyond 64 bits comes back from orjson as a float >= 9.2e18, which it writes
    # with an exponent: only then can a long digit run in the line be such an integer.
    if _keys_lost(raw, dumped) or (b"e+" in dumped and _LONG_DIGITS.search(raw)):
        reason = _strict_reason(raw)
        if reason:
            raise Unstorable(reason)


def _keys_lost(raw: bytes, dumped: bytes) -> bool:
    """Whether reading `raw` dropped a key (`dumped`: what was read, written again). Each key has one
    structural ':'; the re-serialized value has one per key it kept, plus the same ':' inside strings
    (more if `raw` escaped one as \\u003a). Fewer means a key was given twice."""
    return dumped.count(b":") < raw.count(b":") + raw.count(b"\\u003a") + raw.count(b"\\u003A")


def duplicated_key(raw: bytes, value: Any) -> str | None:
    """The key that valid JSON `raw` (read by orjson as `value`, which keeps the last value) gives twice in one
    object, or None. The colon count decides; only a flagged text is read again, by the standard library."""
    if not _keys_lost(raw, orjson.dumps(value)):
        return None
    try:
        json.loads(raw, object_pairs_hook=_unique_pairs)
    except _Duplicate as exc:
        return exc.key
    except ValueError:  # orjson read it; a quirk the standard library reads otherwise is not the writer's
        return None
    return None


class _Duplicate(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object_pairs_hook that raises _Duplicate at a key given twice."""
    keys: set[str] = set()
    for key, _ in items:
        if key in keys:
            raise _Duplicate(key)
        keys.add(key)
    return dict(items)


_KEEP_ONLY_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')


def _deeper_than(raw: bytes, limit: int) -> bool:
    """Nesting depth of a valid JSON line, with bytes operations only (no Python loop per byte).
    Escaped backslashes, then escaped quotes, are removed (left to right, as JSON pairs them), so
    each '"' left delimits a string; only quotes and brackets are kept, the strings between quotes
    dropped, then each pass strips the innermost pairs (one level: a pair emptied during a pass is
    stripped by the next), so a line of depth d is empty after exactly d passes."""
    skeleton = b""
    if b'\\"' not in raw:  # the common case: every '"' delimits a string
        # If no string holds a bracket, each string is an adjacent '""' here; a string that does
        # hold one leaves a quote behind (one pass pairs neighbours only), and the exact way runs.
        skeleton = raw.translate(None, _KEEP_ONLY_STRUCTURE).replace(b'""', b"")
    if not skeleton or b'"' in skeleton:
        skeleton = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _KEEP_ONLY_STRUCTURE)
        skeleton = b"".join(skeleton.split(b'"')[::2])
    for _ in range(limit):
        if not skeleton:
            return False
        skeleton = skeleton.replace(b"[]", b"\0").replace(b"{}", b"\0").replace(b"\0", b"")
    return bool(skeleton)


def _too_deep(record: dict[str, Any], limit: int) -> str | None:
    """The top-level key under which the line nests deeper than `limit` levels, else None.
    Iterative, so no depth can exhaust the stack."""
    stack: list[tuple[Any, int, str]] = [(v, 2, k) for k, v in record.items() if isinstance(v, dict | list)]
    while stack:
        node, depth, top = stack.pop()
        if depth > limit:
            return top
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, top))
    return None


def _strict_reason(raw: bytes) -> str | None:
    """Re-parse a flagged line with the standard library, which sees every key and exact integers."""
    def integer(text: str) -> int:
        if len(text.lstrip("-")) > 20 or not INT_MIN <= int(text) <= INT_MAX:
            shown = text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text.lstrip('-'))} digits)"
            raise Unstorable(f"integer {shown} does not fit 64 bits (JSON readers would round it); "
                              "write it as a string")
        return int(text)

    try:
        json.loads(raw, object_pairs_hook=_unique_pairs, parse_int=integer)
    except _Duplicate as exc:
        return f"duplicate key {_short_repr(exc.key)} in one JSON object (which value is meant is ambiguous)"
    except Unstorable as exc:
        return str(exc)
    except ValueError:  # orjson accepted the line; a stricter-than-orjson quirk here is not the user's fault
        return None
    return None
