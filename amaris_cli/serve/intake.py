"""Request bodies to rollouts: validated, then read exactly as `amaris score` reads a line of a file.

A /score body is checked against `ScoreRequest` (api.py) and against what amaris can store exactly
(jsonlimits: nesting, 64-bit integers, duplicate keys), then given to the rollout reader as one line,
with `metadata.current_step` taken out (it becomes the rollout's `step`, as the number of a step file
does). So the stored rollout is the one `score` would store for that line, and every problem is a 4xx
whose reason names the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from amaris_cli.errors import InputError, InputErrors
from amaris_cli.jsonlimits import Unstorable, check_storable, json_error_reason
from amaris_cli.models import Rollout
from amaris_cli.rollouts import ALIASES, lookup, parse_rollouts
from amaris_cli.serve.api import CompleteRequest, ScoreRequest, check_step
from amaris_cli.serve.core import ApiError, is_explicit

WHERE = Path("POST /score")


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    if not body.strip():
        raise ApiError(400, f"{what}: the body is empty; send a JSON object")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"{what}: {json_error_reason(body, exc)}") from None
    if not isinstance(value, dict):
        raise ApiError(422, f"{what}: the body must be a JSON object, got {type(value).__name__}")
    try:
        check_storable(body, value)
    except Unstorable as exc:
        raise ApiError(422, f"{what}: {exc}") from None
    return value


def _validated(model: type[BaseModel], value: dict[str, Any], what: str) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        details = [f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()]
        raise ApiError(422, f"{what}: {details[0]}" + (f" (and {len(details) - 1} more)" if len(details) > 1 else ""),
                       details=details) from None


def read_score_request(body: bytes, instance_field: str | None) -> tuple[int, Rollout, bool]:
    """(step, rollout, whether its id was given) of a /score body."""
    what = "POST /score"
    raw = _json_object(body, what)
    request: ScoreRequest = _validated(ScoreRequest, raw, what)
    step = request.metadata.current_step
    for key in ("step", "global_step"):
        if key in raw:
            try:
                given = check_step(raw[key])
            except ValueError as exc:
                raise ApiError(422, f"{what}: {key}: {exc}") from None
            if step is not None and given is not None and given != step:
                raise ApiError(422, f"{what}: {key} is {given} but metadata.current_step is {step}")
            step = given if step is None else step
    if step is None:
        raise ApiError(422, f"{what}: metadata.current_step is required (the training step this rollout belongs to)")
    line = dict(raw)
    metadata = dict(raw.get("metadata") or {})
    metadata.pop("current_step", None)
    if line.get("instance_id") is None and metadata.get("instance_id") is not None and not instance_field:
        line["instance_id"] = metadata["instance_id"]
    if metadata:
        line["metadata"] = metadata
    else:
        line.pop("metadata", None)
    try:
        rollouts = parse_rollouts(orjson.dumps(line), WHERE, None, instance_field, default_step=step)
    except InputErrors as exc:
        reasons = [e.reason for e in exc.errors]
        raise ApiError(422, f"{what}: {'; '.join(reasons)}", details=reasons) from None
    except InputError as exc:
        raise ApiError(422, f"{what}: {exc.reason}") from None
    rollout = rollouts[0].model_copy(update={"step": step})
    return step, rollout, is_explicit(rollout) or _has_id(line)


def _has_id(line: dict[str, Any]) -> bool:
    """Whether the body gives an id (one that equals the content id is still given: a retry of it is a retry)."""
    return any(isinstance(value, str | int) and not isinstance(value, bool)
               for value in (lookup(line, source) for source in ALIASES["id"]))


def read_complete_request(body: bytes) -> int:
    request: CompleteRequest = _validated(CompleteRequest, _json_object(body, "POST /complete"), "POST /complete")
    return request.step
