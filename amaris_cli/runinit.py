"""Creating a run directory: resolved settings, the manifest and the step-0 rubric."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from amaris_cli import locks
from amaris_cli.config import RubricSettings, deep_merge, load_settings
from amaris_cli.criteria import clean_criterion_text, criterion_text_problem
from amaris_cli.errors import ConfigError
from amaris_cli.models import RubricSet
from amaris_cli.rubrics import bounds_problem, initial_rubric
from amaris_cli.rundir import Manifest, RunDir, now_iso

# WEIGHT is anything written in digits (a sign, ".5", "1e-1", a space before the colon): read as the weight and
# refused when it is not a positive finite one, never kept as the start of the text beside a weight of 1. ("NaN: ..."
# and "Infinity: ..." are texts: a criterion of a numeric task may begin so, and nobody writes such a weight.)
_ANCHOR = re.compile(r"^(?:(?P<id>[A-Za-z0-9][A-Za-z0-9_.:-]*)=)?"
                     r"(?:(?P<weight>[-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*:)?"
                     r"(?P<text>.+)$", re.S)


def parse_anchor_flags(values: list[str]) -> list[dict[str, Any]]:
    """`--anchor [ID=][WEIGHT:]TEXT`, TEXT optionally prefixed with `pitfall:`. An ID with '.' or ':' is
    read as an id (and refused by the id rule, criteria.criterion_id_problem), not as part of the text."""
    anchors = []
    for index, value in enumerate(values, start=1):
        match = _ANCHOR.match(value.strip())
        if not match or not match.group("text").strip():
            raise ConfigError(f"--anchor {value!r}: expected [ID=][WEIGHT:]TEXT")
        text = match.group("text").strip()
        kind = "reward"
        if text.lower().startswith("pitfall:"):
            kind, text = "pitfall", text[len("pitfall:"):].strip()
        try:
            weight = float(match.group("weight")) if match.group("weight") else 1.0
        except ValueError:  # digits float() does not read ("1_", "1__0"): refused below
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise ConfigError(f"--anchor {value!r}: weight must be a positive number, got {match.group('weight')}")
        anchors.append({"id": match.group("id") or f"anchor-{index}", "text": text, "weight": weight, "kind": kind})
    return anchors


def read_instance_rubrics(path: Path, global_rubric: RubricSet, bounds: RubricSettings) -> list[RubricSet]:
    """Predefined rubrics per instance: JSONL lines {"instance_id", "adaptive": [...], "anchors": [...]?}.
    An instance without its own anchors uses the run's anchors; its adaptive criteria keep the run's bounds."""
    import orjson
    from pydantic import ValidationError

    from amaris_cli.errors import InputError, InputErrors
    from amaris_cli.inputfiles import read_input_bytes
    from amaris_cli.jsonlimits import Unstorable, check_storable

    data, _ = read_input_bytes(path)  # a FIFO nobody writes to, a device: refused, never waited on
    lines = data.split(b"\n")
    rubrics: list[RubricSet] = []
    errors: list[InputError] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = orjson.loads(raw)
            if isinstance(row, dict):
                check_storable(raw, row)  # a key given twice (one "adaptive" list silently replacing another)
            if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str) or not row["instance_id"]:
                raise ValueError("expected an object with a non-empty string instance_id")
            iid = row["instance_id"]
            if iid in seen:
                raise ValueError(f"duplicate instance_id {iid!r} (first on line {seen[iid]})")
            seen[iid] = number
            if "anchors" in row and not row["anchors"]:  # the run's rule (rubrics.initial_rubric), per instance
                raise ValueError("no anchor criteria: an instance's own anchors replace the run's (leave out "
                                 "\"anchors\" to use the run's)")
            rubric = RubricSet(version=0, instance_id=iid, anchors=row.get("anchors", global_rubric.anchors),
                               adaptive=row.get("adaptive", []))
            if problem := bounds_problem(bounds, rubric.adaptive):
                raise ValueError(problem)
            rubrics.append(checked_texts(rubric, "anchors" in row))
        except orjson.JSONDecodeError as exc:
            errors.append(InputError(path, f"invalid JSON: {exc}", number))
        except Unstorable as exc:
            errors.append(InputError(path, str(exc), number))
        except ValidationError as exc:
            err = exc.errors()[0]
            errors.append(InputError(path, f"{'.'.join(map(str, err['loc']))}: {err['msg']}", number))
        except ValueError as exc:
            errors.append(InputError(path, str(exc), number))
    if errors:
        raise InputErrors(errors)
    if not rubrics:
        raise InputError(path, "no instance rubrics in the file")
    return rubrics


def checked_texts(rubric: RubricSet, own_anchors: bool) -> RubricSet:
    """A predefined rubric whose criterion texts pass the trust boundary (criteria.py), cleaned; raises
    ValueError naming the criterion. The run's anchors were checked with the config."""
    sections = [("adaptive", rubric.adaptive), *([("anchors", rubric.anchors)] if own_anchors else [])]
    for section, criteria in sections:
        for c in criteria:
            if problem := criterion_text_problem(c.text, c.kind):
                raise ValueError(f"{section}: criterion {c.id!r}: {problem}")
    return rubric.model_copy(update={
        section: [c.model_copy(update={"text": clean_criterion_text(c.text)}) for c in criteria]
        for section, criteria in sections})


def init_run(path: Path, config_file: Path | None, flags: dict[str, Any],
             instance_rubrics: Path | None = None) -> RubricSet:
    run = RunDir(path)
    if run.exists():
        raise ConfigError(f"{path}: already an amaris run (run.json exists); choose another directory")
    if path.exists() and path.is_file():
        raise ConfigError(f"{path}: exists and is a file")
    # The file and these flags are the run's config (saved whole, agent tables included); the environment
    # is read again by every command.
    from_file = load_settings(config_file=config_file, environ={})
    settings = load_settings(base=deep_merge(from_file.model_dump(mode="json", exclude_none=True), flags), environ={},
                             source="flags")
    source = str(config_file) if config_file else "amaris init"
    rubric = initial_rubric(settings.rubric, source)  # validate before anything is written
    per_instance = read_instance_rubrics(instance_rubrics, rubric, settings.rubric) if instance_rubrics else []
    if per_instance and not settings.pipeline.per_instance:
        raise ConfigError("--instance-rubrics needs per-instance mode: pipeline.per_instance = true or --per-instance")
    run.path.mkdir(parents=True, exist_ok=True)
    with locks.brief(run.lock_path("manifest")):
        if run.exists():
            raise ConfigError(f"{path}: already an amaris run (run.json exists); choose another directory")
        run.save_rubric(rubric)
        for instance_rubric in per_instance:
            run.save_rubric(instance_rubric)
        run.save_manifest(Manifest(created_at=now_iso(), config=settings.model_dump(mode="json")))
    return rubric
