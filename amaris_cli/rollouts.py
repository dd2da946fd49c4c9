"""Reading rollout JSONL in the shapes trainers write, normalized to `Rollout`.

Every bad line is collected as `FILE:LINE: reason`; nothing is returned unless the whole file
is good, so a command can validate its input before it writes anything.

Field resolution, first match wins (an explicit `--map field=source` beats all of them):

  id      id, uid, example_id, request_id, extra_info.index; else a stable content hash
  input   input, prompt, query, question, or the messages before the last assistant turn
  output  output, response, completion, solution_str, or the last assistant message of a chat list
          (messages, messages_and_choices, conversation; not of an ART trajectory with additional_histories,
          whose other LLM calls the judge would not see)
  reference (supplemental_context)
          supplemental_context, reference, ground_truth, gts, reward_model.ground_truth,
          label, labels, answer, solution, target
  step    step, global_step, or the number in the file name ({step}.jsonl, step-003.jsonl)
  gold_reward (a verifiable reward, optional)
          gold_reward, metadata.gold_reward; a number, kept as metadata.gold_reward

In trainer data `answer` and `solution` are the *reference*, never the output.

Every line is also checked against what amaris can write back exactly (jsonlimits: nesting depth,
64-bit integers, duplicate keys), steps are integers 0..MAX_STEP, and a `--map` path must exist on
every line. Ids are unique: explicit ones must be, and a generated id (content hash, numbered for
repeated contents) that is another line's explicit id is an error naming both lines. Files are read
once through inputfiles (kind checked, size capped, bytes hashed); loop directories are listed by
stepfiles.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.errors import InputError, InputErrors
from amaris_cli.inputfiles import MAX_INPUT_BYTES, read_input_bytes
from amaris_cli.jsonlimits import Unstorable, check_storable, json_error_reason, whole_file_problem
from amaris_cli.models import MAX_ROLLOUT_ID_CHARS, Rollout
from amaris_cli.parquet import is_parquet, parquet_as_jsonl
from amaris_cli.stepfiles import step_files, step_from_filename, step_number
from amaris_cli.textnorm import is_invisible

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
    "gold_reward": ("gold_reward", "metadata.gold_reward"),  # kept as metadata.gold_reward (amaris_cli/alarms.py)
}
MAPPABLE = tuple(ALIASES)
# The id fields that name a prompt as often as a rollout (verl's GRPO `uid`, verifiers' `example_id`, a dataset's
# `extra_info.index`): shared by several rollouts of a file, such a value names their prompt, not a rollout.
PROMPT_ID_FIELDS = ("uid", "example_id", "extra_info.index")
CHAT_KEYS = ("messages", "messages_and_choices", "conversation")  # OpenPipe ART writes messages_and_choices
_MISSING = object()
MAX_LINE_BYTES = 64 << 20


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


def _render_messages(messages: list[Mapping[str, Any]]) -> str:
    """A chat as the judge reads it: a JSON list, one message a line (as RULER shows its judge a trajectory).
    JSON escapes each message's text, so nothing inside a turn (the policy's own words, a tool's output) can
    pass for another turn or a tool call: flattened as "[role]" headers and "[tool call]" lines, an assistant
    that wrote "[tool]" and "PASSED 12/12" on lines of their own read exactly like the environment's answer."""
    if not messages:
        return ""
    return "[\n" + ",\n".join(_message_json(m) for m in messages) + "\n]"


def _message_json(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    if not isinstance(role, str):
        raise _BadContent(f"a chat message's role must be a string, got {_short(role, 40)}")
    text, calls = _said(message)
    shown: dict[str, Any] = {"role": role, "content": text}
    if calls:
        shown["tool_calls"] = calls
    for key in ("name", "tool_call_id"):  # which tool answered, and to which call
        if (given := _named(message.get(key))) is not None:
            shown[key] = given
    try:
        return orjson.dumps(shown).decode()
    except TypeError as exc:  # a tool call's arguments given as an object that is not JSON
        raise _BadContent(f"a tool call's arguments cannot be written as JSON ({exc})") from None


def _message_text(message: Mapping[str, Any]) -> str:
    """The response of a chat: the message's text, or, when it makes tool calls (an agent's action is part of what
    is judged), the message as JSON, as a chat is shown, so that a call is never text the policy could write."""
    text, calls = _said(message)
    return _render_messages([message]) if calls else _shown_as_text(text)


# How a chat amaris shows begins: a JSON list of objects.
_CHAT_LIKE = re.compile(r"\s*\[\s*\{")


def _shown_as_text(text: str) -> str:
    """A text as the judge is shown it: as written, unless it begins as a chat shown here does (a JSON list of
    objects): then as a JSON string, so that only a chat amaris rendered reads as one (a policy whose one message
    was a chat written as JSON, a tool's "PASSED 12/12" among its turns, rendered byte for byte as a real one)."""
    start = text[:200]
    if not start.isascii():  # read as a model reads it: compatibility forms as their letters ("［｛" is "[{"),
        # invisible characters (a zero-width space, a byte-order mark) as nothing; ASCII has neither (every rollout
        # is read through here, and this costs 40 µs a text)
        start = "".join(ch for ch in unicodedata.normalize("NFKC", start) if not is_invisible(ch))
    return orjson.dumps(text).decode() if _CHAT_LIKE.match(start) else text


def _said(message: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A chat message's text and its tool calls. Audio cannot be shown as text: refused rather than judged
    without it."""
    if message.get("audio"):
        raise _BadContent(f"a chat message ({_short(message.get('role'), 40)}) carries audio, which amaris cannot "
                          "show the judge (it judges text); give the text to judge with --map input=... --map output=...")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _BadContent(f"a chat message's tool_calls must be a list, got {type(calls).__name__}")
    if message.get("function_call"):  # the legacy single call: {"name", "arguments"}
        calls = [*calls, {"function": message["function_call"]}]
    text = _content_text(message.get("content"))
    if not text and isinstance(message.get("refusal"), str):  # the model refused: its refusal is what it said
        text = message["refusal"]
    return text, [_tool_call(call) for call in calls]


def _tool_call(call: Any) -> dict[str, Any]:
    """A tool call as the judge is shown it: its name and its arguments as the model wrote them (a JSON string,
    or the object TRL keeps), and its id when it has one (a tool message's tool_call_id names it)."""
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise _BadContent("a tool call has no function name (expected {\"function\": {\"name\", \"arguments\"}})")
    shown = {"name": function["name"], "arguments": function.get("arguments", "")}
    if (given := _named(call.get("id"))) is not None:
        shown["id"] = given
    return shown


def _named(value: Any) -> str | None:
    """A name or id as given: a string, or an integer as its digits (a framework that numbers its calls); else
    None (no such field)."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else None


class _BadContent(ValueError):
    """A reason a line is bad, raised deep inside the reader and given its line number above."""


def _short(value: Any, limit: int = 60) -> str:
    """A value of the input quoted in a message, cut: an id or a role is the trainer's text, of any length."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list) and all(isinstance(p, Mapping) for p in content):  # OpenAI content parts
        for part in content:
            if not isinstance(part.get("text"), str):  # an image, audio or file part: the judge would not see it
                raise _BadContent(f"message content holds a part of type {_short(part.get('type'), 40)} that is not "
                                  "text; amaris judges text only, and a rollout judged without it would be judged wrong")
        return "".join(p["text"] for p in content)
    raise _BadContent(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def _choices_as_messages(value: Any) -> Any:
    """A chat list with the OpenAI SDK's Choice objects among its turns, as OpenPipe ART's messages_and_choices
    holds the turns it trains on (`{"finish_reason", "index", "message": {...}}`): each Choice is its message, as
    ART's own Trajectory.messages() reads it."""
    if not isinstance(value, list):
        return value
    return [item["message"] if isinstance(item, Mapping) and "role" not in item and isinstance(item.get("message"), Mapping)
            else item for item in value]


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, Mapping) and "role" in m for m in value
    )


def _split_messages(messages: list[Any]) -> tuple[str, str] | None:
    """(input, output) from a chat list whose last assistant turn is the output."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "assistant":
            if index < len(messages) - 1:  # the turns after the output would be judged as if never said
                raise _BadContent(f"the chat goes on after its last assistant turn (a {_short(messages[-1].get('role'), 40)} turn "
                                  "follows it), so that turn is not the response; end the chat with the response")
            return _render_messages(messages[:index]), _message_text(messages[index])
    return None


def _one_history(record: Mapping[str, Any]) -> None:
    """A chat read from the line is its only conversation: an OpenPipe ART Trajectory's `additional_histories` hold
    its other LLM calls (ART's LangGraph integration keeps an agent's first call in messages_and_choices and each
    later one there, the final answer in the last), which the judge would never see, and the last assistant turn of
    messages_and_choices is then not the response. RULER refuses such trajectories too."""
    others = record.get("additional_histories")
    if isinstance(others, list) and others:
        raise _BadContent(f"the trajectory has {len(others)} additional history(ies) (OpenPipe ART's "
                          "additional_histories: the agent's other LLM calls), which amaris would not show the judge, "
                          "so the last assistant turn of its chat is not the response; say where the prompt and the "
                          "response are with --map input=... --map output=...")


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

    def rollout(self, record: Any, line: int, file_step: int | None) -> tuple[Rollout, str | None]:
        """The line's rollout and the field its id came from (None: the content hash, made unique against the
        whole file later)."""
        try:
            return self._rollout(record, line, file_step)
        except _BadContent as exc:
            raise InputError(self.path, str(exc), line) from None

    def _rollout(self, record: Any, line: int, file_step: int | None) -> tuple[Rollout, str | None]:
        def bad(reason: str) -> InputError:
            return InputError(self.path, reason, line)

        if not isinstance(record, Mapping):
            raise bad(f"expected a JSON object, got {type(record).__name__}")

        in_src, input_value = self.first(record, "input")
        out_src, output_value = self.first(record, "output")
        messages = _choices_as_messages(next((record[k] for k in CHAT_KEYS if k in record), _MISSING))
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
        if "messages" in (in_src, out_src):
            _one_history(record)
        if input_value is _MISSING:
            raise bad("missing input (looked for: " + ", ".join(ALIASES["input"]) + ", messages)")
        if output_value is _MISSING:
            raise bad("missing output (looked for: " + ", ".join(ALIASES["output"]) + ", messages)")
        if _is_message_list(input_value):
            input_value = _render_messages(input_value)
        elif isinstance(input_value, str) and in_src != "messages":
            input_value = _shown_as_text(input_value)
        if _is_message_list(output_value):  # TRL conversational completions
            # An agent's completion of several messages (calls, tool results, answer) is the response as a whole.
            output_value = _message_text(output_value[0]) if len(output_value) == 1 else _render_messages(output_value)
        elif isinstance(output_value, str) and out_src != "messages":
            output_value = _shown_as_text(output_value)
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
        elif problem := _id_problem(id_value):
            raise bad(f"field {id_src!r} {problem}")
        else:
            rollout_id = str(id_value)

        instance_id: str | None = None
        if self.instance_field:
            value = lookup(record, self.instance_field)
            if value is _MISSING or value is None:
                raise bad(f"missing instance field {self.instance_field!r}")
            instance_id = value if isinstance(value, str) else orjson.dumps(value).decode()
        else:
            inst_src, value = self.first(record, "instance_id")
            if value is not _MISSING:  # (null: none) another type was dropped, and the line put in another instance
                if isinstance(value, bool) or not isinstance(value, str | int):
                    raise bad(f"field {inst_src!r} must be a string or an integer, got {type(value).__name__}")
                instance_id = str(value)

        metadata = record.get("metadata")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise bad("field 'metadata' must be an object")
        metadata = dict(metadata or {})
        gold_src, gold = self.first(record, "gold_reward")
        if gold is not _MISSING and gold is not None:
            if isinstance(gold, bool) or not isinstance(gold, int | float):
                raise bad(f"field {gold_src!r} (the verifiable reward) must be a number, got {_short(gold)}")
            metadata["gold_reward"] = gold
        rollout = Rollout(
            id=rollout_id or _content_id(input_value, output_value, reference),
            input=input_value,
            output=output_value,
            supplemental_context=reference,
            step=step,
            instance_id=instance_id,
            metadata=metadata,
        )
        return rollout, (id_src if rollout_id is not None else None)

    def sample_id(self, record: Any) -> str | None:
        """The line's own id among the id fields after a prompt's (`request_id`): what names a rollout whose `uid`,
        `example_id` or `extra_info.index` turns out to name its prompt (the fields' order in ALIASES)."""
        if not isinstance(record, Mapping):
            return None
        for source in ALIASES["id"]:
            if source in PROMPT_ID_FIELDS or source == "id":
                continue
            value = lookup(record, source)
            if value is not _MISSING and value is not None and _id_problem(value) is None:
                return str(value)
        return None


def _id_problem(value: Any) -> str | None:
    """Why a field's value cannot be a rollout's id (said after "field 'NAME'"), or None."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return f"must be a string or an integer, got {type(value).__name__}"
    text = str(value)
    if not text.strip():
        return "is empty"
    if len(text) > MAX_ROLLOUT_ID_CHARS:
        return (f"has {len(text)} characters, more than {MAX_ROLLOUT_ID_CHARS} ({_short(text)}); an id names a "
                "rollout, it does not hold it")
    return None


def _step_number(source: str, value: Any) -> int:
    try:
        return step_number(value)
    except ValueError as exc:
        raise _BadContent(f"field {source!r} {exc}") from None


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


def group_rollouts(rollouts: list[Rollout], size: int) -> list[list[Rollout]]:
    """Rollouts sharing a prompt (instance), in input order, at most `size` per group call. A group call sends
    the prompt and the reference of its first member only, so members of one instance whose prompt or reference
    differs (an `instance_id` a trainer reused) are judged in calls of their own, never against another's."""
    same_context: dict[tuple[str, str, str | None], list[Rollout]] = {}
    for key, members in group_by_instance(rollouts).items():
        for r in members:
            same_context.setdefault((key, r.input, r.supplemental_context), []).append(r)
    return [members[i : i + size] for members in same_context.values() for i in range(0, len(members), size)]


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
    step_required: bool = False,
) -> list[Rollout]:
    """All rollouts of one JSONL file, or InputErrors naming every bad line."""
    return read_rollout_file(path, mapping, instance_field, default_step, max_line_bytes,
                             step_required=step_required).rollouts


def read_rollout_file(
    path: Path,
    mapping: Mapping[str, str] | None = None,
    instance_field: str | None = None,
    default_step: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_input_bytes: int = MAX_INPUT_BYTES,
    step_required: bool = False,
) -> RolloutFile:
    """Read a file or a pipe once (kind checked, size capped, bytes hashed) and validate every line (every row of a
    `.parquet` file, parquet.py)."""
    path = Path(path)
    data, digest = read_input_bytes(path, max_input_bytes)
    lines = parquet_as_jsonl(data, path, max_input_bytes) if is_parquet(data, path) else data  # (digest: the file's)
    rollouts = parse_rollouts(lines, path, mapping, instance_field, default_step, max_line_bytes, step_required)
    return RolloutFile(path, rollouts, digest, len(data))


def parse_rollouts(
    data: bytes,
    path: Path,
    mapping: Mapping[str, str] | None = None,
    instance_field: str | None = None,
    default_step: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    step_required: bool = False,
) -> list[Rollout]:
    """The rollouts of JSONL bytes read from `path` (named in errors), or InputErrors for every bad line
    (`step_required`: one file that holds many steps, where a line without a step is a bad line)."""
    problem = whole_file_problem(data)
    if problem:
        raise InputError(path, problem)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark carries no meaning in JSONL
    if not data.strip():
        raise InputError(path, "empty file: no rollouts")

    reader = _LineReader(path, mapping or {}, instance_field)
    errors: list[InputError] = []
    rollouts: list[Rollout] = []
    generated: list[tuple[int, int]] = []  # (index, line) of rollouts whose id is the content hash
    explicit_ids: dict[str, int] = {}
    prompt_ids: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (field, value) that may name a prompt: places
    sample_ids: dict[int, str] = {}  # by index: the `request_id` of a rollout whose id may name its prompt
    last_step: tuple[int, int] | None = None  # (step, line)
    stepless: list[int] = []  # lines without the step that `step_required` asks for
    stepped = False  # a bad line that gives a step (the file is one of many steps, whatever its other lines)
    for line_no, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        if len(raw) > max_line_bytes:
            errors.append(InputError(path, f"line is {len(raw)} bytes, over the {max_line_bytes}-byte limit", line_no))
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            errors.append(InputError(path, json_error_reason(raw, exc), line_no))
            continue
        try:
            if isinstance(record, dict):
                check_storable(raw, record)
            rollout, id_source = reader.rollout(record, line_no, default_step)
        except Unstorable as exc:
            errors.append(InputError(path, str(exc), line_no))
            continue
        except InputError as exc:
            errors.append(exc)
            stepped = stepped or (isinstance(record, dict) and any(k in record for k in ALIASES["step"]))
            continue
        if rollout.step is None and step_required:
            stepless.append(line_no)
            continue
        if rollout.step is not None:
            if last_step is not None and rollout.step < last_step[0]:
                errors.append(InputError(path, f"step {rollout.step} comes after step {last_step[0]} (line {last_step[1]}); "
                                         "lines must be in step order", line_no))
                continue
            last_step = (rollout.step, line_no)
        if id_source in PROMPT_ID_FIELDS and "id" not in (mapping or {}):  # (--map id=... says it is the id)
            prompt_ids.setdefault((id_source, rollout.id), []).append((len(rollouts), line_no))
            if (own := reader.sample_id(record)) is not None:
                sample_ids[len(rollouts)] = own
        elif id_source is not None:
            if rollout.id in explicit_ids:
                errors.append(InputError(path, f"duplicate id {_short(rollout.id)} (first on line {explicit_ids[rollout.id]})", line_no))
                continue
            explicit_ids[rollout.id] = line_no
        else:
            generated.append((len(rollouts), line_no))
        rollouts.append(rollout)
    for (field, shared), places in prompt_ids.items():
        if len(places) == 1:
            if shared in explicit_ids:
                errors.append(InputError(path, f"duplicate id {_short(shared)} (also on line {explicit_ids[shared]})",
                                         places[0][1]))
            explicit_ids.setdefault(shared, places[0][1])
            continue
        # Several rollouts under one uid, example_id or dataset index: it names their prompt (a GRPO group, a
        # verifiers example sampled n times), never one of them. Each gets its own `request_id` when it has one,
        # else its content id, and keeps the value in its metadata; their instance is their prompt's, as that of a
        # prompt the file holds once.
        for index, line_no in places:
            rollout = rollouts[index]
            own = sample_ids.get(index)
            rollouts[index] = rollout.model_copy(update={"id": own or content_id(rollout),
                                                         "metadata": {field: shared, **rollout.metadata}})
            if own is None:
                generated.append((index, line_no))
            elif own in explicit_ids:
                other = explicit_ids[own]
                errors.append(InputError(path, f"duplicate id {_short(own)} ({'first' if other < line_no else 'also'} "
                                               f"on line {other})", line_no))
            else:
                explicit_ids[own] = line_no
    errors.extend(_assign_generated_ids(path, rollouts, sorted(generated), explicit_ids))
    errors.extend(_stepless_errors(path, stepless, any_step=stepped or last_step is not None))
    if errors:
        raise InputErrors(sorted(errors, key=lambda e: e.line or 0))  # in line order (some are found at the end)
    return rollouts


def _stepless_errors(path: Path, lines: list[int], any_step: bool) -> list[InputError]:
    """Lines without a step in one file that holds many steps: each named when other lines have one; one error (at
    the first) when none has: a file of one step (ART's NNNN.parquet, a step's JSONL) given where a file of many
    steps or a directory of step files is meant."""
    if not lines:
        return []
    if any_step:
        return [InputError(path, "the line has no step field (needed when one file holds many steps)", n) for n in lines]
    named = step_from_filename(path)
    where = (f"its name says it is step {named}: give `loop` the directory that holds it and the other steps' "
             f"files, or score it alone with `amaris score {shlex.quote(str(path))} --step {named}`"
             if named is not None else
             "give `loop` a directory of step files (one file a step) or add `step` to each line")
    head = "no line of the file has a step field" if len(lines) != 1 else "the line has no step field"
    return [InputError(path, f"{head}, which one file that holds many steps needs; {where}", lines[0])]


def _assign_generated_ids(path: Path, rollouts: list[Rollout], generated: list[tuple[int, int]],
                          explicit_ids: dict[str, int]) -> list[InputError]:
    """Give each rollout without an id its content hash, numbered `hash-2`, `hash-3`, ... for repeated
    contents in input order. A generated id that is another line's explicit id is an error naming both
    lines: renaming it silently would give the line an id nobody can predict from its content, and
    sharing it would give one rollout the other's verdicts."""
    errors: list[InputError] = []
    seen: dict[str, int] = {}
    for index, line_no in generated:
        base = rollouts[index].id
        seen[base] = n = seen.get(base, 0) + 1
        candidate = base if n == 1 else f"{base}-{n}"
        if candidate in explicit_ids:
            errors.append(InputError(path, f"the id amaris generates for this line ({candidate}, from its content) is the "
                                     f"explicit id of line {explicit_ids[candidate]}; give this line an id of its own",
                                     line_no))
        elif candidate != base:
            rollouts[index] = rollouts[index].model_copy(update={"id": candidate})
    return errors


def group_by_step(rollouts: list[Rollout], path: Path) -> dict[int, list[Rollout]]:
    """Split one JSONL whose lines carry `step`; every line must have one."""
    steps: dict[int, list[Rollout]] = {}
    for rollout in rollouts:
        if rollout.step is None:
            raise InputError(path, f"rollout {_short(rollout.id)} has no step field (needed when one file holds many steps)")
        steps.setdefault(rollout.step, []).append(rollout)
    return dict(sorted(steps.items()))


def discover_steps(source: Path, mapping: Mapping[str, str] | None = None,
                   instance_field: str | None = None) -> dict[int, Path | list[Rollout]]:
    """Steps of a loop input: a directory of per-step files, or one JSONL with `step` on each line.
    Directory entries are returned as paths (read lazily, one step at a time)."""
    source = Path(source)
    if source.is_dir():
        return step_files(source)
    rollouts = read_rollouts(source, mapping, instance_field, step_required=True)
    return dict(group_by_step(rollouts, source).items())


