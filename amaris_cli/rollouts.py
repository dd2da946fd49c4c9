"""Reading rollout JSONL in the shapes trainers write, normalized to `Rollout`.

Every bad line is collected as `FILE:LINE: reason`; nothing is returned unless the whole file
is good, so a command can validate its input before it writes anything.

Field resolution, first match wins (an explicit `--map field=source` beats all of them):

  id      id, uid, example_id, request_id, extra_info.index; else a stable content hash
  input   input, prompt, query, question, or the messages before the last assistant turn
  output  output, response, completion, solution_str, or the last assistant message of a chat list
          (messages, messages_and_choices, conversation)
  reference (supplemental_context)
          supplemental_context, reference, ground_truth, gts, reward_model.ground_truth,
          label, labels, answer, solution, target
  step    step, global_step, or the number in the file name ({step}.jsonl, step-003.jsonl)

In trainer data `answer` and `solution` are the *reference*, never the output.

Limits, checked per line before anything is written (each breach is `FILE:LINE: reason`): at most
MAX_DEPTH levels of nesting (orjson reads 1024 but writes 255), steps are integers 0..MAX_STEP,
integers fit 64 bits (orjson would silently turn larger ones into floats), no key twice in one
object (JSON parsers silently keep the last), a `--map` path must exist on every line. Ids are
unique: explicit ones must be, and a generated one never takes an id already used in the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.errors import InputError, InputErrors
from amaris_cli.inputfiles import MAX_INPUT_BYTES, describe_kind, read_input_bytes, stat_problem
from amaris_cli.models import Rollout

ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "uid", "example_id", "request_id", "extra_info.index"),
    "input": ("input", "prompt", "query", "question"),
    "output": ("output", "response", "completion", "solution_str"),
    "supplemental_context": (
        "supplemental_context",
        "reference",
        "ground_truth",
        "gts",
        "reward_model.ground_truth",
        "label",
        "labels",
        "answer",
        "solution",
        "target",
    ),
    "step": ("step", "global_step"),
    "instance_id": ("instance_id",),
}
MAPPABLE = tuple(ALIASES)
CHAT_KEYS = ("messages", "messages_and_choices", "conversation")  # OpenPipe ART writes messages_and_choices
_MISSING = object()
MAX_DEPTH = 64  # levels of objects/arrays in one line, the line's own object included
MAX_STEP = 10**9
INT_MIN, INT_MAX = -(2**63), 2**64 - 1  # what orjson reads and writes exactly
MAX_LINE_BYTES = 64 << 20
NOTE_SUFFIXES = (".md", ".txt", ".rst", ".log")  # regular files a loop directory may hold besides steps
STEP_FILE_RE = re.compile(r"(?:(?:global_)?step[-_]?)?(\d+)\.jsonl")
STEP_FILE_NAMES = "N.jsonl, step-N.jsonl, step_N.jsonl, stepN.jsonl, global_step_N.jsonl (N = 0..1000000000)"


def parse_mapping(items: Sequence[str]) -> dict[str, str]:
    """`--map field=source` pairs; source is a dotted path (`extra_info.index`, `messages.-1.content`)."""
    mapping: dict[str, str] = {}
    for item in items:
        field, sep, source = item.partition("=")
        field, source = field.strip(), source.strip()
        if not sep or not field or not source:
            raise InputError("--map", f"expected FIELD=SOURCE, got {item!r}")
        if field not in MAPPABLE:
            raise InputError("--map", f"unknown field {field!r}; one of: {', '.join(MAPPABLE)}")
        mapping[field] = source
    return mapping


def resolve_path(record: Mapping[str, Any], path: str) -> tuple[Any, str]:
    """(value, "") for a dotted path, or (_MISSING, why it is not there)."""
    node: Any = record
    parts = path.split(".")
    for depth, part in enumerate(parts):
        if isinstance(node, dict):
            if part in node:
                node = node[part]
                continue
            why = f"has no key {part!r}"
        elif isinstance(node, list) and re.fullmatch(r"-?\d+", part):
            index = int(part)
            if -len(node) <= index < len(node):
                node = node[index]
                continue
            why = f"has no index {part} (it holds {len(node)} item(s))"
        else:
            why = f"is {type(node).__name__}, not an object or list, so it has no {part!r}"
        return _MISSING, f"{'.'.join(parts[:depth]) or 'the line'} {why}"
    return node, ""


def lookup(record: Mapping[str, Any], path: str) -> Any:
    if "." not in path:  # the common case: one key of the line
        return record.get(path, _MISSING) if isinstance(record, dict) else _MISSING
    return resolve_path(record, path)[0]


def step_from_filename(path: Path) -> int | None:
    """The step a step file's name gives (see STEP_FILE_NAMES), or None when the name is not one."""
    match = STEP_FILE_RE.fullmatch(Path(path).name)
    if match is None or len(match.group(1).lstrip("0")) > len(str(MAX_STEP)):
        return None
    step = int(match.group(1))
    return step if step <= MAX_STEP else None


def _render_messages(messages: list[Any]) -> str:
    parts = []
    for m in messages:
        if isinstance(m, Mapping):
            parts.append(f"[{m.get('role', 'user')}]\n{_content_text(m.get('content'))}")
        else:
            parts.append(str(m))
    return "\n\n".join(parts)


class _BadContent(ValueError):
    """A reason a line is bad, raised deep inside the reader and given its line number above."""


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list) and all(isinstance(p, Mapping) and isinstance(p.get("text", ""), str) for p in content):
        return "".join(p.get("text", "") for p in content)  # OpenAI content parts
    raise _BadContent(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, Mapping) and "role" in m for m in value
    )


def _split_messages(messages: list[Any]) -> tuple[str, str] | None:
    """(input, output) from a chat list whose last assistant turn is the output."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            return _render_messages(messages[:index]), _content_text(messages[index].get("content"))
    return None


class _LineReader:
    def __init__(self, path: Path, mapping: Mapping[str, str], instance_field: str | None) -> None:
        self.path = path
        self.mapping = mapping
        self.instance_field = instance_field

    def first(self, record: Mapping[str, Any], field: str) -> tuple[str, Any]:
        if field in self.mapping:  # the user said where the field is: not finding it there is an error
            value, why = resolve_path(record, self.mapping[field])
            if value is _MISSING:
                raise _BadContent(f"--map {field}={self.mapping[field]}: path not found: {why}")
            return self.mapping[field], value
        for source in ALIASES[field]:
            value = lookup(record, source)
            if value is not _MISSING and value is not None:
                return source, value
        return "", _MISSING

    def rollout(self, record: Any, line: int, file_step: int | None) -> tuple[Rollout, bool]:
        """The line's rollout and whether its id is explicit (else it is the content hash, made
        unique against the whole file later)."""
        try:
            return self._rollout(record, line, file_step)
        except _BadContent as exc:
            raise InputError(self.path, str(exc), line) from None

    def _rollout(self, record: Any, line: int, file_step: int | None) -> tuple[Rollout, bool]:
        def bad(reason: str) -> InputError:
            return InputError(self.path, reason, line)

        if not isinstance(record, Mapping):
            raise bad(f"expected a JSON object, got {type(record).__name__}")

        in_src, input_value = self.first(record, "input")
        out_src, output_value = self.first(record, "output")
        messages = next((record[k] for k in CHAT_KEYS if k in record), _MISSING)
        if _is_message_list(input_value) and output_value is _MISSING:
            messages, input_value = input_value, _MISSING  # a full chat stored under "prompt"
        if output_value is _MISSING and messages is not _MISSING:
            if not _is_message_list(messages):
                raise bad("field 'messages' must be a list of {role, content} objects")
            split = _split_messages(messages)
            if split is None:
                raise bad("'messages' has no assistant turn to use as the output")
            chat_input, output_value = split
            out_src = "messages"
            if input_value is _MISSING:
                input_value, in_src = chat_input, "messages"
        if input_value is _MISSING:
            raise bad("missing input (looked for: " + ", ".join(ALIASES["input"]) + ", messages)")
        if output_value is _MISSING:
            raise bad("missing output (looked for: " + ", ".join(ALIASES["output"]) + ", messages)")
        if _is_message_list(input_value):
            input_value = _render_messages(input_value)
        if _is_message_list(output_value):  # TRL conversational completions
            output_value = _content_text(output_value[-1].get("content"))
        if not isinstance(input_value, str):
            raise bad(f"field {in_src!r} must be a string, got {type(input_value).__name__}")
        if not isinstance(output_value, str):
            raise bad(f"field {out_src!r} must be a string, got {type(output_value).__name__}")

        ref_src, ref = self.first(record, "supplemental_context")
        if ref is _MISSING or ref is None:
            reference = None
        elif isinstance(ref, str):
            reference = ref
        elif isinstance(ref, bool) or not isinstance(ref, int | float | list | dict):
            raise bad(f"field {ref_src!r} must be a string, number, list or object")
        else:
            reference = ref if isinstance(ref, str) else orjson.dumps(ref).decode()
            if isinstance(ref, int | float):
                reference = str(ref)

        step_src, step_value = self.first(record, "step")
        step = file_step if step_value is _MISSING else _step_number(step_src, step_value)

        id_src, id_value = self.first(record, "id")
        if id_value is _MISSING:
            rollout_id = None
        elif isinstance(id_value, bool) or not isinstance(id_value, str | int):
            raise bad(f"field {id_src!r} must be a string or an integer, got {type(id_value).__name__}")
        else:
            rollout_id = str(id_value)
            if not rollout_id.strip():
                raise bad(f"field {id_src!r} is empty")

        instance_id: str | None = None
        if self.instance_field:
            value = lookup(record, self.instance_field)
            if value is _MISSING or value is None:
                raise bad(f"missing instance field {self.instance_field!r}")
            instance_id = value if isinstance(value, str) else orjson.dumps(value).decode()
        else:
            _, value = self.first(record, "instance_id")
            if isinstance(value, str | int) and not isinstance(value, bool):
                instance_id = str(value)

        metadata = record.get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise bad("field 'metadata' must be an object")
        rollout = Rollout(
            id=rollout_id or _content_id(input_value, output_value, reference),
            input=input_value,
            output=output_value,
            supplemental_context=reference,
            step=step,
            instance_id=instance_id,
            metadata=dict(metadata or {}),
        )
        return rollout, rollout_id is not None


def _step_number(source: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float) and not value.is_integer()):
        raise _BadContent(f"field {source!r} must be an integer, got {_short(value)}")
    if not 0 <= value <= MAX_STEP:  # compared before int(): 1e300 must not become a 301-digit step
        raise _BadContent(f"field {source!r} must be an integer from 0 to {MAX_STEP}, got {_short(value)}")
    return int(value)


def _content_id(input_text: str, output: str, reference: str | None) -> str:
    payload = orjson.dumps([input_text, output, reference])
    return "r-" + hashlib.sha256(payload).hexdigest()[:16]


def content_id(rollout: Rollout) -> str:
    """The id a rollout without one gets (before a `-N` suffix that keeps ids unique in a file)."""
    return _content_id(rollout.input, rollout.output, rollout.supplemental_context)


def instance_key(rollout: Rollout) -> str:
    """The instance a rollout belongs to: its explicit id, else a stable hash of its input."""
    if rollout.instance_id:
        return rollout.instance_id
    return "i-" + hashlib.sha256(rollout.input.encode()).hexdigest()[:12]


def group_by_instance(rollouts: Sequence[Rollout]) -> dict[str, list[Rollout]]:
    """Rollouts that share a prompt (instance), in input order: the groups of group scoring,
    per-instance mode and within-group statistics."""
    groups: dict[str, list[Rollout]] = {}
    for r in rollouts:
        groups.setdefault(instance_key(r), []).append(r)
    return groups


@dataclass(frozen=True)
class RolloutFile:
    """The rollouts of one input and the SHA-256 of the exact bytes they were read from (a pipe
    cannot be read twice, so the hash to record is this one, not a second read of the path)."""

    path: Path
    rollouts: list[Rollout]
    sha256: str
    size: int


def read_rollouts(
    path: Path,
    mapping: Mapping[str, str] | None = None,
    instance_field: str | None = None,
    default_step: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[Rollout]:
    """All rollouts of one JSONL file, or InputErrors naming every bad line."""
    return read_rollout_file(path, mapping, instance_field, default_step, max_line_bytes).rollouts


def read_rollout_file(
    path: Path,
    mapping: Mapping[str, str] | None = None,
    instance_field: str | None = None,
    default_step: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_input_bytes: int = MAX_INPUT_BYTES,
) -> RolloutFile:
    """Read a file or a pipe once (kind checked, size capped, bytes hashed) and validate every line."""
    path = Path(path)
    data, digest = read_input_bytes(path, max_input_bytes)
    rollouts = parse_rollouts(data, path, mapping, instance_field, default_step, max_line_bytes)
    return RolloutFile(path, rollouts, digest, len(data))


def parse_rollouts(
    data: bytes,
    path: Path,
    mapping: Mapping[str, str] | None = None,
    instance_field: str | None = None,
    default_step: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[Rollout]:
    """The rollouts of JSONL bytes read from `path` (named in errors), or InputErrors for every bad line."""
    _check_encoding(data, path)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark carries no meaning in JSONL
    if not data.strip():
        raise InputError(path, "empty file: no rollouts")

    reader = _LineReader(path, mapping or {}, instance_field)
    errors: list[InputError] = []
    rollouts: list[Rollout] = []
    generated: list[int] = []  # indexes of rollouts whose id is the content hash
    explicit_ids: dict[str, int] = {}
    last_step: tuple[int, int] | None = None  # (step, line)
    for line_no, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        if len(raw) > max_line_bytes:
            errors.append(InputError(path, f"line is {len(raw)} bytes, over the {max_line_bytes}-byte limit", line_no))
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            errors.append(InputError(path, _json_error(raw, exc), line_no))
            continue
        try:
            if isinstance(record, dict):
                _check_storable(raw, record)
            rollout, explicit = reader.rollout(record, line_no, default_step)
        except _BadContent as exc:
            errors.append(InputError(path, str(exc), line_no))
            continue
        except InputError as exc:
            errors.append(exc)
            continue
        if rollout.step is not None:
            if last_step is not None and rollout.step < last_step[0]:
                errors.append(InputError(path, f"step {rollout.step} comes after step {last_step[0]} (line {last_step[1]}); "
                                         "lines must be in step order", line_no))
                continue
            last_step = (rollout.step, line_no)
        if explicit:
            if rollout.id in explicit_ids:
                errors.append(InputError(path, f"duplicate id {rollout.id!r} (first on line {explicit_ids[rollout.id]})", line_no))
                continue
            explicit_ids[rollout.id] = line_no
        else:
            generated.append(len(rollouts))
        rollouts.append(rollout)
    if errors:
        raise InputErrors(errors)
    _assign_generated_ids(rollouts, generated, set(explicit_ids))
    return rollouts


def _assign_generated_ids(rollouts: list[Rollout], generated: list[int], taken: set[str]) -> None:
    """Give each rollout without an id its content hash, or `hash-N` with the smallest N >= 2 not
    yet used by any id of the file (explicit ones included), in input order: deterministic, and
    no two rollouts ever share an id. Without collisions this is hash, hash-2, hash-3, ... per content."""
    next_suffix: dict[str, int] = {}
    for index in generated:
        base = rollouts[index].id
        n = next_suffix.get(base, 1)
        candidate = base if n == 1 else f"{base}-{n}"
        while candidate in taken:
            n += 1
            candidate = f"{base}-{n}"
        next_suffix[base] = n + 1
        taken.add(candidate)
        if candidate != base:
            rollouts[index] = rollouts[index].model_copy(update={"id": candidate})


def _check_encoding(data: bytes, path: Path) -> None:
    """Whole-file encodings that would otherwise fail on every line with a puzzling message."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(path, "file is UTF-16 (it starts with a UTF-16 byte-order mark); JSONL must be UTF-8")
    if data.startswith(b"\x1f\x8b"):
        raise InputError(path, "file is gzip-compressed; decompress it first (e.g. `gunzip -k FILE`)")


_JSON_POSITION = re.compile(r": line \d+ column (\d+) \(char \d+\)$")


def _json_error(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"not valid UTF-8 (byte {bad.start}: {raw[bad.start:bad.start + 1]!r})"
    if "depth limit exceeded" in str(exc):  # orjson stops at 1024 levels
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


def _check_storable(raw: bytes, record: dict[str, Any]) -> None:
    """Refuse what amaris could not write back exactly: deep nesting, duplicate keys, integers
    outside 64 bits. Cheap byte counts decide; the slow exact checks run only when they flag a line."""
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH:
        top = _too_deep(record, MAX_DEPTH)
        if top is not None:
            raise _BadContent(f"field {top!r} nests deeper than {MAX_DEPTH} levels (the limit for one line)")
    # Each key has one structural ':'; the re-serialized record has one per key it kept, plus the
    # same ':' inside strings (more if the line escaped one as \u003a). Fewer means a key was dropped.
    dumped = orjson.dumps(record)
    colons = raw.count(b":") + raw.count(b"\\u003a") + raw.count(b"\\u003A")
    # An integer beyond 64 bits comes back from orjson as a float >= 9.2e18, which it writes
    # with an exponent: only then can a long digit run in the line be such an integer.
    if dumped.count(b":") < colons or (b"e+" in dumped and _LONG_DIGITS.search(raw)):
        reason = _strict_reason(raw)
        if reason:
            raise _BadContent(reason)


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


class _Unstorable(ValueError):
    pass


def _strict_reason(raw: bytes) -> str | None:
    """Re-parse a flagged line with the standard library, which sees every key and exact integers."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys: set[str] = set()
        for key, _ in items:
            if key in keys:
                raise _Unstorable(f"duplicate key {_short(key)} in one JSON object (which value is meant is ambiguous)")
            keys.add(key)
        return dict(items)

    def integer(text: str) -> int:
        if len(text.lstrip("-")) > 20 or not INT_MIN <= int(text) <= INT_MAX:
            shown = text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(text.lstrip('-'))} digits)"
            raise _Unstorable(f"integer {shown} does not fit 64 bits (JSON readers would round it); "
                              "write it as a string")
        return int(text)

    try:
        json.loads(raw, object_pairs_hook=pairs, parse_int=integer)
    except _Unstorable as exc:
        return str(exc)
    return None


def group_by_step(rollouts: list[Rollout], path: Path) -> dict[int, list[Rollout]]:
    """Split one JSONL whose lines carry `step`; every line must have one."""
    steps: dict[int, list[Rollout]] = {}
    for rollout in rollouts:
        if rollout.step is None:
            raise InputError(path, f"rollout {rollout.id!r} has no step field (needed when one file holds many steps)")
        steps.setdefault(rollout.step, []).append(rollout)
    return dict(sorted(steps.items()))


def discover_steps(source: Path, mapping: Mapping[str, str] | None = None,
                   instance_field: str | None = None) -> dict[int, Path | list[Rollout]]:
    """Steps of a loop input: a directory of per-step files, or one JSONL with `step` on each line.
    Directory entries are returned as paths (read lazily, one step at a time)."""
    source = Path(source)
    if source.is_dir():
        return step_files(source)
    rollouts = read_rollouts(source, mapping, instance_field)
    return dict(group_by_step(rollouts, source).items())


def step_files(directory: Path) -> dict[int, Path]:
    """The step files of a loop directory by step. Every entry is used or reported: hidden entries
    and notes (regular files ending in NOTE_SUFFIXES) are ignored; anything else that is not a
    regular file named like a step file (STEP_FILE_NAMES) is an error naming it."""
    found: dict[int, Path] = {}
    errors: list[InputError] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise InputError(directory, stat_problem(directory, exc)) from None
    for name in names:
        if name.startswith("."):
            continue
        entry = directory / name
        try:
            mode = os.stat(entry).st_mode
        except OSError as exc:
            errors.append(InputError(entry, stat_problem(entry, exc)))
            continue
        is_file = stat.S_ISREG(mode)
        if name.lower().endswith(NOTE_SUFFIXES) and is_file:
            continue
        if not name.endswith(".jsonl"):
            if name.lower().endswith(".jsonl"):
                reason = f"step files end in lowercase '.jsonl' (rename it to {name[:-6] + '.jsonl'!r})"
            else:
                reason = (f"not a step file ({describe_kind(mode)}); a loop directory holds step files "
                          f"({STEP_FILE_NAMES}), notes ({', '.join(NOTE_SUFFIXES)}) and hidden entries only")
            errors.append(InputError(entry, reason))
            continue
        if not is_file:
            why = " (a step file is read once to validate it and again to score it)" if stat.S_ISFIFO(mode) else ""
            errors.append(InputError(entry, f"is a {describe_kind(mode)}, not a regular file{why}"))
            continue
        step = step_from_filename(entry)
        if step is None:
            numbers = re.findall(r"\d+", name)
            if len(numbers) > 1:
                why = f"the name holds {len(numbers)} numbers, so its step is ambiguous"
            elif STEP_FILE_RE.fullmatch(name):
                why = f"step {numbers[0] if len(numbers[0]) <= 30 else numbers[0][:27] + '...'} in the name is over {MAX_STEP}"
            else:
                why = "the name is not a step-file name"
            errors.append(InputError(entry, f"{why}; step files are named {STEP_FILE_NAMES}"))
            continue
        if step in found:
            errors.append(InputError(entry, f"step {step} also comes from {found[step]}"))
            continue
        found[step] = entry
    if errors:
        raise InputErrors(errors)
    if not found:
        raise InputError(directory, f"directory holds no step files ({STEP_FILE_NAMES})")
    return dict(sorted(found.items()))
