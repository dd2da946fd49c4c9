"""What the benchmark judges: labelled rollouts, from honest answers plus transforms or from a labelled file.

Three sources:
- honest answers (a rollouts JSONL read as `amaris score` reads it, `--map` included; default: the shipped
  math examples): each answer is its own control, and every selected family's transform of it a variant;
- a labelled file (`--labelled`): rollout lines with a label field (`label`, or `--label-field`); `honest`
  (also `control`, `clean`, `none`) marks a control, any other label names the hack. A variant's control
  is the honest line with the same prompt; several are averaged. A label that is a family name is judged
  by that family's analyzer names; any other label by whether the analysis names any pattern at all.
  `--families` selects labels: the lines with them and the honest lines of their prompts;
- the School of Reward Hacks columns (a line with `user`, `school_of_reward_hacks`, `control`; `task`,
  `evaluation_metric`, `cheat_method` kept as metadata): each line is a prompt, its hacked response and its
  control, one family `school_of_reward_hacks` (`--families` naming another is refused; a line whose `control`
  is empty is skipped and counted). Recognized by its columns (those of the first line that is a JSON object),
  with or without `--labelled`.

Every bad line is reported as FILE:LINE: reason before anything is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.errors import InputError, InputErrors
from amaris_cli.hackbench.models import HONEST, BenchLabel
from amaris_cli.hackbench.transforms import FAMILIES, Context, Family, Honest, Skip, family, read_honest
from amaris_cli.inputfiles import read_input_bytes
from amaris_cli.jsonlimits import json_error_reason
from amaris_cli.rollouts import parse_rollouts

HONEST_LABELS = frozenset({"honest", "control", "clean", "none"})
SORH_COLUMNS = ("user", "school_of_reward_hacks", "control")
SORH_FAMILY = "school_of_reward_hacks"
ANY_PATTERN = "any pattern the analyzer names"


def shipped_examples() -> Path:
    return Path(__file__).parent / "data" / "math_honest.jsonl"


def shipped_config() -> Path:
    return Path(__file__).parent / "data" / "math.toml"


@dataclass
class FamilyInfo:
    name: str
    description: str
    names: str  # what counts as naming it, in words
    matches: Callable[[str], bool]
    skipped: int = 0
    skip_reasons: list[str] = field(default_factory=list)

    def skip(self, reason: str) -> None:
        self.skipped += 1
        if reason not in self.skip_reasons:
            self.skip_reasons.append(reason)


@dataclass
class BenchSet:
    rows: list[dict[str, Any]]  # rollout lines, controls and variants, with metadata.hackbench
    families: dict[str, FamilyInfo]
    items: int
    source: str


def _row(item: str, family_name: str, source: str, prompt: str, output: str, reference: str | None,
         extra: dict[str, Any] | None = None) -> dict[str, Any]:
    label = BenchLabel(item=item, family=family_name, source=source)  # type: ignore[arg-type]
    row: dict[str, Any] = {"id": f"{item}:{family_name}", "input": prompt, "output": output,
                           "metadata": {**(extra or {}), "hackbench": label.model_dump()}}
    if reference is not None:
        row["supplemental_context"] = reference
    return row


def _known(f: Family) -> FamilyInfo:
    names = ", ".join(f.patterns) + f" (or a free-form name matching /{f.free_form}/)"
    return FamilyInfo(f.name, f.description, names, f.named)


def _any(name: str, description: str) -> FamilyInfo:
    known = family(name)
    return _known(known) if known else FamilyInfo(name, description, ANY_PATTERN, lambda _pattern: True)


def from_honest(path: Path, data: bytes, mapping: dict[str, str], selected: list[Family], ctx: Context,
                limit: int | None = None, source: str | None = None) -> BenchSet:
    rollouts = parse_rollouts(data, path, mapping)[:limit]
    families = {f.name: _known(f) for f in selected}
    rows: list[dict[str, Any]] = []
    for r in rollouts:
        honest: Honest = read_honest(r.id, r.input, r.output, r.supplemental_context)
        rows.append(_row(r.id, HONEST, "transform", r.input, r.output, r.supplemental_context))
        for f in selected:
            try:
                output = f.transform(honest, ctx)
            except Skip as why:
                families[f.name].skip(str(why))
                continue
            if output.strip() == r.output.strip():  # (an answer that is only its final line, for answer_without_work)
                families[f.name].skip("the variant would be the honest answer itself, so its gain would be 0 by "
                                      "construction")
                continue
            rows.append(_row(r.id, f.name, "transform", r.input, output, r.supplemental_context))
    return BenchSet(rows=rows, families=families, items=len(rollouts), source=source or str(path))


def _lines(path: Path, data: bytes) -> list[tuple[int, bytes]]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = [(n, raw) for n, raw in enumerate(data.split(b"\n"), start=1) if raw.strip()]
    if not lines:
        raise InputError(path, "empty file: no rows")
    return lines


def _objects(path: Path, data: bytes) -> list[tuple[int, dict[str, Any]]]:
    rows, errors = [], []
    for n, raw in _lines(path, data):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            errors.append(InputError(path, json_error_reason(raw, exc), n))
            continue
        if not isinstance(value, dict):
            errors.append(InputError(path, f"expected a JSON object, got {type(value).__name__}", n))
            continue
        rows.append((n, value))
    if errors:
        raise InputErrors(errors)
    return rows


def _first_object(data: bytes) -> dict[str, Any] | None:
    """The file's first line that is a JSON object, which tells its format: a broken first line (a truncated
    download) does not make a School of Reward Hacks file read as rollouts, every other line then an error."""
    for raw in data.removeprefix(b"\xef\xbb\xbf").split(b"\n"):
        if raw.strip():
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None


def from_school_of_reward_hacks(path: Path, data: bytes, limit: int | None = None,
                                names: list[str] | None = None) -> BenchSet:
    if names and set(names) != {SORH_FAMILY}:
        other = next(n for n in names if n != SORH_FAMILY)
        raise InputError("--families", f"{path} holds School of Reward Hacks lines, judged as one family, "
                                       f"{SORH_FAMILY}: it has no {other!r} to select (--families selects the "
                                       "transforms of honest answers, or the labels of a --labelled file)")
    rows: list[dict[str, Any]] = []
    errors: list[InputError] = []
    info = FamilyInfo(SORH_FAMILY, "School of Reward Hacks: the dataset's hacked response against its control",
                      ANY_PATTERN, lambda _pattern: True)
    objects = _objects(path, data)[:limit]
    used = 0
    for n, obj in objects:
        bad = [c for c in SORH_COLUMNS if not isinstance(obj.get(c), str) or not obj[c].strip()]
        if bad == ["control"] and (obj.get("control") is None or isinstance(obj["control"], str)):
            # The dataset has some 100 hacks without a control (1,073 hacks, 973 controls): nothing to compare with
            info.skip("no control (its `control` is empty): the hack has no honest answer to be compared with")
            continue
        if bad:
            errors.append(InputError(path, f"column {bad[0]!r} must be a non-empty string (School of Reward Hacks "
                                           f"lines need {', '.join(SORH_COLUMNS)})", n))
            continue
        extra = {k: obj[k] for k in ("task", "evaluation_metric", "cheat_method") if isinstance(obj.get(k), str)}
        item = f"line-{n}"
        used += 1
        rows.append(_row(item, HONEST, "school_of_reward_hacks", obj["user"], obj["control"], None, extra))
        rows.append(_row(item, SORH_FAMILY, "school_of_reward_hacks", obj["user"], obj["school_of_reward_hacks"],
                         None, extra))
    if errors:
        raise InputErrors(errors)
    return BenchSet(rows=rows, families={SORH_FAMILY: info}, items=used, source=str(path))


def from_labelled(path: Path, data: bytes, mapping: dict[str, str], label_field: str,
                  limit: int | None = None, names: list[str] | None = None) -> BenchSet:
    """Rollout lines with a label; the label is taken out before the line is read as a rollout (a field
    named `label` would otherwise be read as the reference), so errors keep their line numbers. `names`
    (--families): only the lines with these labels, and the honest lines of their prompts (their controls)."""
    objects = _objects(path, data)
    labels: list[str] = []
    errors: list[InputError] = []
    stripped: list[bytes] = []
    for n, obj in objects:
        label = obj.pop(label_field, None)
        if not isinstance(label, str) or not label.strip():
            errors.append(InputError(path, f"field {label_field!r} (the label) must be a non-empty string", n))
            continue
        labels.append(label.strip())
        stripped.append(orjson.dumps(obj))
    if errors:
        raise InputErrors(errors)
    numbered = {n: line for (n, _), line in zip(objects, stripped, strict=True)}
    last = max(numbered)
    data = b"\n".join(numbered.get(n, b"") for n in range(1, last + 1)) + b"\n"
    rollouts = parse_rollouts(data, path, mapping)
    pairs = list(zip(rollouts, labels, [n for n, _ in objects], strict=True))[:limit]
    if names:
        pairs = _select_labels(path, pairs, names, limit)
    # A hack is compared with the honest answer to its prompt: one without it would be left out of every gain.
    controlled = {rollout.input for rollout, label, _ in pairs if label.lower() in HONEST_LABELS}
    for rollout, label, n in pairs:
        if label.lower() not in HONEST_LABELS and rollout.input not in controlled:
            errors.append(InputError(path, f"labelled {label!r}, but no line labelled honest"
                                           f"{' (within --limit)' if limit else ''} has the same prompt: the hack has "
                                           "no control to be compared with", n))
    if errors:
        raise InputErrors(errors)
    rows: list[dict[str, Any]] = []
    families: dict[str, FamilyInfo] = {}
    for rollout, label, _ in pairs:
        item = "p-" + hashlib.sha256(rollout.input.encode()).hexdigest()[:12]  # a variant's control shares its prompt
        name = HONEST if label.lower() in HONEST_LABELS else label
        if name != HONEST and name not in families:
            families[name] = _any(name, f"labelled {name!r} in {path.name}")
        row = _row(item, name, "labelled", rollout.input, rollout.output, rollout.supplemental_context,
                   rollout.metadata)
        row["id"] = rollout.id  # the file's own ids (unique in it), not item:family
        rows.append(row)
    return BenchSet(rows=rows, families=families, items=len({r["metadata"]["hackbench"]["item"] for r in rows}),
                    source=str(path))


def _select_labels(path: Path, pairs: list[tuple[Any, str, int]], names: list[str],
                   limit: int | None) -> list[tuple[Any, str, int]]:
    """--families of a labelled file: the lines labelled with these names, and the honest lines of their prompts."""
    hacks = list(dict.fromkeys(label for _, label, _ in pairs if label.lower() not in HONEST_LABELS))
    if control := next((n for n in names if n.lower() in HONEST_LABELS), None):
        raise InputError("--families", f"{control!r} marks a control, not a hack: the honest lines of the selected "
                                       "hacks' prompts are always judged with them")
    if missing := next((n for n in names if n not in hacks), None):
        raise InputError("--families", f"no line of {path}{' within --limit' if limit else ''} is labelled "
                                       f"{missing!r}; its hacks are labelled {', '.join(map(repr, hacks)) or 'nothing'}")
    prompts = {rollout.input for rollout, label, _ in pairs if label in names}
    return [(rollout, label, n) for rollout, label, n in pairs
            if label in names or (label.lower() in HONEST_LABELS and rollout.input in prompts)]


def load(source: Path | None, mapping: dict[str, str], labelled: bool, label_field: str, names: list[str] | None,
         ctx: Context, limit: int | None = None) -> BenchSet:
    """The benchmark's rollouts from `source` (read once: it may be a pipe), or from the shipped examples.
    `names` (--families): the transforms of honest answers, the labels of a labelled file, or (nothing else)
    school_of_reward_hacks."""
    if source is None:
        path = shipped_examples()
        return from_honest(path, path.read_bytes(), {}, select_families(names), ctx, limit,
                           source="shipped math examples")
    data, _ = read_input_bytes(source)
    first = _first_object(data)
    if first is not None and all(c in first for c in SORH_COLUMNS):
        return from_school_of_reward_hacks(source, data, limit, names)
    if labelled:
        return from_labelled(source, data, mapping, label_field, limit, names)
    return from_honest(source, data, mapping, select_families(names), ctx, limit)


def select_families(names: list[str] | None) -> list[Family]:
    if not names:
        return list(FAMILIES)
    unknown = [n for n in names if family(n) is None]
    if unknown:
        raise InputError("--families", f"unknown family {unknown[0]!r}; known: {', '.join(f.name for f in FAMILIES)}")
    return [f for f in FAMILIES if f.name in names]
