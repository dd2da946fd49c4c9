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
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.errors import InputError, InputErrors
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
_PENDING_ID = "\x00pending"  # replaced by a content hash once the whole file is read


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


def lookup(record: Mapping[str, Any], path: str) -> Any:
    node: Any = record
    for part in path.split("."):
        if isinstance(node, Mapping):
            if part not in node:
                return _MISSING
            node = node[part]
        elif isinstance(node, list) and re.fullmatch(r"-?\d+", part):
            index = int(part)
            if not -len(node) <= index < len(node):
                return _MISSING
            node = node[index]
        else:
            return _MISSING
    return node


def step_from_filename(path: Path) -> int | None:
    numbers = re.findall(r"\d+", path.stem)
    return int(numbers[-1]) if numbers else None


def _render_messages(messages: list[Any]) -> str:
    parts = []
    for m in messages:
        if isinstance(m, Mapping):
            parts.append(f"[{m.get('role', 'user')}]\n{_content_text(m.get('content'))}")
        else:
            parts.append(str(m))
    return "\n\n".join(parts)


class _BadContent(ValueError):
    pass


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
        if field in self.mapping:
            return self.mapping[field], lookup(record, self.mapping[field])
        for source in ALIASES[field]:
            value = lookup(record, source)
            if value is not _MISSING and value is not None:
                return source, value
        return "", _MISSING

    def rollout(self, record: Any, line: int, file_step: int | None) -> Rollout:
        try:
            return self._rollout(record, line, file_step)
        except _BadContent as exc:
            raise InputError(self.path, str(exc), line) from None

    def _rollout(self, record: Any, line: int, file_step: int | None) -> Rollout:
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
        if step_value is _MISSING:
            step = file_step
        elif isinstance(step_value, bool) or not isinstance(step_value, int):
            if isinstance(step_value, float) and step_value.is_integer():
                step = int(step_value)
            else:
                raise bad(f"field {step_src!r} must be an integer, got {step_value!r}")
        else:
            step = step_value
        if step is not None and step < 0:
            raise bad(f"field {step_src or 'step'!r} must be >= 0, got {step}")

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
        return Rollout(
            id=rollout_id or _PENDING_ID,
            input=input_value,
            output=output_value,
            supplemental_context=reference,
            step=step,
            instance_id=instance_id,
            metadata=dict(metadata or {}),
        )


def content_id(rollout: Rollout) -> str:
    payload = orjson.dumps([rollout.input, rollout.output, rollout.supplemental_context])
    return "r-" + hashlib.sha256(payload).hexdigest()[:16]


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


def read_rollouts(
    path: Path,
    mapping: Mapping[str, str] | None = None,
    instance_field: str | None = None,
    default_step: int | None = None,
    max_line_bytes: int = 64 << 20,
) -> list[Rollout]:
    """All rollouts of one JSONL file, or InputErrors naming every bad line."""
    path = Path(path)
    if path.is_dir():
        raise InputError(path, "is a directory, expected a JSONL file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark carries no meaning in JSONL
    if not data.strip():
        raise InputError(path, "empty file: no rollouts")

    reader = _LineReader(path, mapping or {}, instance_field)
    file_step = default_step
    errors: list[InputError] = []
    rollouts: list[Rollout] = []
    explicit_ids: dict[str, int] = {}
    last_step: tuple[int, int] | None = None  # (step, line)
    for line_no, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        if len(raw) > max_line_bytes:
            errors.append(InputError(path, f"line is {len(raw)} bytes, over the {max_line_bytes}-byte limit", line_no))
            continue
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            errors.append(InputError(path, f"not valid UTF-8 (byte {exc.start}: {raw[exc.start:exc.start+1]!r})", line_no))
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            errors.append(InputError(path, f"invalid JSON: {exc}", line_no))
            continue
        try:
            rollout = reader.rollout(record, line_no, file_step)
        except InputError as exc:
            errors.append(exc)
            continue
        if rollout.step is not None:
            if last_step is not None and rollout.step < last_step[0]:
                errors.append(InputError(path, f"step {rollout.step} comes after step {last_step[0]} (line {last_step[1]}); "
                                         "lines must be in step order", line_no))
                continue
            last_step = (rollout.step, line_no)
        if rollout.id != _PENDING_ID:
            if rollout.id in explicit_ids:
                errors.append(InputError(path, f"duplicate id {rollout.id!r} (first on line {explicit_ids[rollout.id]})", line_no))
                continue
            explicit_ids[rollout.id] = line_no
        rollouts.append(rollout)
    if errors:
        raise InputErrors(errors)

    seen: dict[str, int] = {}
    for index, rollout in enumerate(rollouts):
        if rollout.id == _PENDING_ID:
            base = content_id(rollout)
            count = seen.get(base, 0)
            seen[base] = count + 1
            rollout_id = base if count == 0 else f"{base}-{count + 1}"
            if rollout_id in explicit_ids:
                rollout_id = f"{rollout_id}-auto"
            rollouts[index] = rollout.model_copy(update={"id": rollout_id})
    return rollouts


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
        found: dict[int, Path] = {}
        for p in sorted(source.iterdir()):
            if p.suffix != ".jsonl" or not p.is_file():
                continue
            step = step_from_filename(p)
            if step is None:
                raise InputError(p, "step file name carries no step number (expected e.g. 12.jsonl or step-012.jsonl)")
            if step in found:
                raise InputError(p, f"step {step} also comes from {found[step]}")
            found[step] = p
        if not found:
            raise InputError(source, "directory holds no step files (*.jsonl named by step number)")
        return dict(sorted(found.items()))
    rollouts = read_rollouts(source, mapping, instance_field)
    return dict(group_by_step(rollouts, source).items())
