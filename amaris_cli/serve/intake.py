"""Request bodies to rollouts: validated, then read exactly as `amaris score` reads a line of a file.

A /score body, in amaris's shape (`ScoreRequest`: a rollout line with `metadata`) or the reference's
(`ReferenceScoreRequest`: `{"rollout": {...}, "metadata": {...}}`), is checked against its model (api.py)
and against what amaris can store exactly (jsonlimits: nesting, 64-bit integers, duplicate keys), then
its rollout is given to the rollout reader as one line, with `metadata.current_step` taken out (it
becomes the rollout's `step`, as the number of a step file does) and the TrainingMetadata fields taken
out (they describe training, not the rollout: training.py). So the stored rollout is the one `score`
would store for that line, and every problem is a 4xx whose reason names the field.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from amaris_cli.errors import InputError, InputErrors
from amaris_cli.jsonlimits import Unstorable, check_storable, json_error_reason, too_deep
from amaris_cli.models import MAX_ROLLOUT_ID_CHARS
from amaris_cli.rollouts import ALIASES, lookup, parse_rollouts
from amaris_cli.serve.api import (
    CompleteRequest,
    DiscardRequest,
    OutageRequest,
    ReferenceScoreRequest,
    ScoreRequest,
    check_step,
)
from amaris_cli.serve.core import ApiError, ScoreIntake, is_explicit
from amaris_cli.serve.openrlhf import OpenRLHFRequest
from amaris_cli.training import FIELDS as TRAINING_FIELDS
from amaris_cli.training import METADATA_FIELDS, TrainingMetadata


def _json_object(body: bytes, what: str) -> dict[str, Any]:
    if not body.strip():
        raise ApiError(400, f"{what}: the body is empty; send a JSON object")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:  # JSON too deep to read is JSON: 422, as a depth over 64 is below
        raise ApiError(422 if too_deep(exc) else 400, f"{what}: {json_error_reason(body, exc)}") from None
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


def read_score_request(body: bytes, instance_field: str | None, what: str = "POST /score") -> ScoreIntake:
    """A /score body (or /validate's, `what` naming the route in errors), in amaris's shape (a rollout line with
    `metadata`) or the reference's (`{"rollout": {...}, "metadata": {...}}`)."""
    raw = _json_object(body, what)
    if "rollout" in raw:
        reference: ReferenceScoreRequest = _validated(ReferenceScoreRequest, raw, what)
        line, metadata, top = dict(reference.rollout), reference.metadata, raw.get("metadata") or {}
        where = "rollout."
        own = line.get("metadata")
        if own is not None and not isinstance(own, dict):
            raise ApiError(422, f"{what}: rollout.metadata: must be a JSON object")
        own = _named_by_amaris(line, own, what)
        extra = {k: v for k, v in top.items() if k not in METADATA_FIELDS}
        clash = sorted(k for k in extra if k in (own or {}) and own[k] != extra[k])  # type: ignore[index]
        if clash:
            raise ApiError(422, f"{what}: metadata.{clash[0]} and rollout.metadata.{clash[0]} differ")
        kept = {**(own or {}), **extra}
    else:
        request: ScoreRequest = _validated(ScoreRequest, raw, what)
        line, metadata, where = dict(raw), request.metadata, ""
        kept = {k: v for k, v in (raw.get("metadata") or {}).items() if k not in METADATA_FIELDS}
    # The request's metadata.instance_id names the instance, in either shape (README), unless the line names one.
    if line.get("instance_id") is None and metadata.instance_id is not None and not instance_field:
        line["instance_id"] = metadata.instance_id
    step = metadata.current_step
    for key in ("step", "global_step"):
        if key in line:
            try:
                given = check_step(line[key])
            except ValueError as exc:
                raise ApiError(422, f"{what}: {where}{key}: {exc}") from None
            if step is not None and given is not None and given != step:
                raise ApiError(422, f"{what}: {where}{key} is {given} but metadata.current_step is {step}")
            step = given if step is None else step
            del line[key]
    if kept:
        line["metadata"] = kept
    else:
        line.pop("metadata", None)
    try:
        rollouts = parse_rollouts(orjson.dumps(line), Path(what), None, instance_field)
    except InputErrors as exc:
        reasons = [e.reason for e in exc.errors]
        raise ApiError(422, f"{what}: {'; '.join(reasons)}", details=reasons) from None
    except InputError as exc:
        raise ApiError(422, f"{what}: {exc.reason}") from None
    rollout = rollouts[0].model_copy(update={"step": step})
    training = TrainingMetadata.model_validate(metadata.model_dump(include=set(TRAINING_FIELDS)))
    return ScoreIntake(step, rollout, is_explicit(rollout) or _has_id(line), None if training.empty else training)


def _named_by_amaris(line: dict[str, Any], own: dict[str, Any] | None, what: str) -> dict[str, Any] | None:
    """The reference's rollout with an id amaris can name it by (its rollout metadata returned).

    The reference takes any string as an id; amaris's reader refuses an empty one and one longer than
    MAX_ROLLOUT_ID_CHARS (ids are quoted in messages, memory and the report), which would be a 422 on every call
    of a trainer written for the reference. So here an empty id is no id (the rollout gets its content id, as a
    line without one does), and a longer one is named by its first characters and a digest of all of it (a retry
    sends the same id, so it is named the same) and kept whole in the rollout's metadata as `given_id`."""
    given = line.get("id")
    if not isinstance(given, str):
        return own
    if not given.strip():
        del line["id"]
        return own
    if len(given) <= MAX_ROLLOUT_ID_CHARS:
        return own
    if own is not None and own.get("given_id", given) != given:
        raise ApiError(422, f"{what}: rollout.metadata.given_id would hold the rollout's id of {len(given)} "
                            "characters, but it holds something else")
    line["id"] = f"{given[:64]}...sha256-{hashlib.sha256(given.encode()).hexdigest()[:16]}"
    return {**(own or {}), "given_id": given}


def _has_id(line: dict[str, Any]) -> bool:
    """Whether the body gives an id (one that equals the content id is still given: a retry of it is a retry)."""
    return any(isinstance(value, str | int) and not isinstance(value, bool)
               for value in (lookup(line, source) for source in ALIASES["id"]))


def read_complete_request(body: bytes) -> CompleteRequest | None:
    """The step (and shard) a /complete names; None for the reference's /complete, which has no body: nor has an
    empty object (`json={}`, as a client of the reference may send, whose server reads no body), a 422 here."""
    if not body.strip():
        return None
    named = _json_object(body, "POST /complete")
    return _validated(CompleteRequest, named, "POST /complete") if named else None


def read_discard_request(body: bytes) -> DiscardRequest:
    return _validated(DiscardRequest, _json_object(body, "POST /discard"), "POST /discard")


def read_outage_request(body: bytes) -> OutageRequest:
    return _validated(OutageRequest, _json_object(body, "POST /outage"), "POST /outage")


def read_openrlhf_request(body: bytes, instance_field: str | None) -> list[ScoreIntake]:
    """OpenRLHF's remote reward request (openrlhf.py): one rollout per query, its response the query after
    its prompt, its reference the label; no step (each joins the open step) and no id."""
    what = "POST /get_reward"
    request: OpenRLHFRequest = _validated(OpenRLHFRequest, _json_object(body, what), what)
    intakes = []
    for i, prompt in enumerate(request.prompts):
        try:
            response = request.response(i)
        except ValueError as exc:
            raise ApiError(422, f"{what}: {exc}") from None
        line: dict[str, Any] = {"input": prompt, "output": response}
        if request.label(i) is not None:
            line["supplemental_context"] = request.label(i)
        try:
            rollout = parse_rollouts(orjson.dumps(line), Path(what), None, instance_field)[0]
        except InputErrors as exc:
            raise ApiError(422, f"{what}: query {i}: {'; '.join(e.reason for e in exc.errors)}") from None
        except InputError as exc:
            raise ApiError(422, f"{what}: query {i}: {exc.reason}") from None
        intakes.append(ScoreIntake(None, rollout, False, None))
    return intakes
