"""The answer contract as a JSON schema, for endpoints that enforce one (`response_format = "json_schema"`, or
`"auto"` where the endpoint takes it): the schema is the contract, as RULER and verifiers send theirs.

OpenAI's strict structured outputs take a subset of JSON schema: every object closed
(`additionalProperties: false`), every property required (an optional one says so by admitting null), no
defaults, titles or validation keywords beyond types and enums. `strict` turns a pydantic model's schema
into that form; `scorer_contract` is the exact shape of one rubric's verdicts: one object per criterion, its
id from the rubric, `score` (a number) for a reward criterion and `present` (a boolean) for a pitfall. An
endpoint that does not enforce a schema gets the same answer contract checked on the way back
(llm/parsing.py, agents/scorer.py), so nothing depends on the endpoint honouring it.
"""

from __future__ import annotations

from typing import Any

from amaris_cli.models import RubricSet

_DROP = {"default", "title", "description", "examples", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
         "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "uniqueItems", "discriminator"}


def strict(schema: Any) -> Any:
    """`schema` in the strict subset (see the module doc); `$defs` and `$ref` are kept."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items() if k not in _DROP}
    if out.get("type") == "object" or "properties" in out:
        out["type"] = "object"
        out["properties"] = out.get("properties", {})
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def scorer_contract(rubric: RubricSet) -> dict[str, Any]:
    """The scorer's answer for `rubric`, exactly: its verdicts, reason first, each criterion once by id."""
    def verdict(kind: str, key: str, value_type: str) -> dict[str, Any] | None:
        ids = [c.id for c in rubric.criteria if c.kind == kind]
        if not ids:
            return None
        return {"type": "object", "additionalProperties": False, "required": ["criterion_id", "reason", key],
                "properties": {"criterion_id": {"type": "string", "enum": ids}, "reason": {"type": "string"},
                               key: {"type": value_type}}}

    shapes = [s for s in (verdict("reward", "score", "number"), verdict("pitfall", "present", "boolean")) if s]
    items = shapes[0] if len(shapes) == 1 else {"anyOf": shapes}
    return {"type": "object", "additionalProperties": False, "required": ["verdicts"],
            "properties": {"verdicts": {"type": "array", "items": items}}}
