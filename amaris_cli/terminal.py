"""Text that reaches a terminal: never raw control characters.

Judges, endpoints and rollouts are untrusted text. An ANSI escape (ESC [ ...), a carriage return
or a bidirectional override in a judge's reason or an endpoint's error page can recolour, hide or
rewrite what the terminal shows. `terminal_safe` makes every such character visible as a Python
escape (`\\x1b`, `\\r`, `\\u202e`) instead; newlines and tabs are kept.
"""

from __future__ import annotations

import re

# DEL, C1 controls, and the Unicode bidi controls (Bidi_Control: the marks, embeddings, overrides and
# isolates, the Arabic letter mark U+061C included): left raw by JSON writers.
_ABOVE_C0 = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# ... and the C0 controls except \t and \n.
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f{_ABOVE_C0}]")


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r":
        return "\\r"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# In JSON, the characters of _UNSAFE that a JSON writer leaves raw (orjson escapes only those below U+0020).
_JSON_RAW_UNSAFE = re.compile(f"[{_ABOVE_C0}]")


def json_terminal_safe(text: str) -> str:
    """JSON text with the characters that could rewrite a terminal written as `\\uXXXX` escapes: the same
    JSON value for any reader (they occur only inside strings), nothing raw for a terminal (`--json` output,
    rewards on stdout)."""
    return _JSON_RAW_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def terminal_safe(text: str) -> str:
    """`text` with every control character shown as an escape (newlines and tabs stay)."""
    return _UNSAFE.sub(_visible, text)


def one_line(text: str, limit: int | None = None) -> str:
    """Whitespace collapsed to single spaces, control characters made visible, optionally cut."""
    flat = terminal_safe(" ".join(str(text).split()))
    return flat if limit is None or len(flat) <= limit else flat[: limit - 3] + "..."
