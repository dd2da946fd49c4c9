"""Creating a run directory: resolved settings, the manifest and the step-0 rubric."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from amaris_cli.config import load_settings
from amaris_cli.errors import AmarisError, ConfigError
from amaris_cli.models import RubricSet
from amaris_cli.rubrics import initial_rubric
from amaris_cli.rundir import Manifest, RunDir, now_iso

_ANCHOR = re.compile(r"^(?:(?P<id>[A-Za-z0-9][A-Za-z0-9_.:-]*)=)?(?:(?P<weight>\d+(?:\.\d+)?):)?(?P<text>.+)$", re.S)


def parse_anchor_flags(values: list[str]) -> list[dict[str, Any]]:
    """`--anchor [ID=][WEIGHT:]TEXT`, TEXT optionally prefixed with `pitfall:`."""
    anchors = []
    for index, value in enumerate(values, start=1):
        match = _ANCHOR.match(value.strip())
        if not match or not match.group("text").strip():
            raise ConfigError(f"--anchor {value!r}: expected [ID=][WEIGHT:]TEXT")
        text = match.group("text").strip()
        kind = "reward"
        if text.lower().startswith("pitfall:"):
            kind, text = "pitfall", text[len("pitfall:"):].strip()
        weight = float(match.group("weight")) if match.group("weight") else 1.0
        if weight <= 0:
            raise ConfigError(f"--anchor {value!r}: weight must be positive")
        anchors.append({"id": match.group("id") or f"anchor-{index}", "text": text, "weight": weight, "kind": kind})
    return anchors


def init_run(path: Path, config_file: Path | None, flags: dict[str, Any]) -> RubricSet:
    run = RunDir(path)
    if run.exists():
        raise AmarisError(f"{path}: already an amaris run (run.json exists); choose another directory")
    if path.exists() and path.is_file():
        raise AmarisError(f"{path}: exists and is a file")
    settings = load_settings(config_file=config_file, flags=flags)
    rubric = initial_rubric(settings.rubric)  # validate before anything is written
    with run.lock():
        run.save_rubric(rubric)
        stamp = now_iso()
        run.save_manifest(Manifest(created_at=stamp, updated_at=stamp, config=settings.model_dump(mode="json")))
    return rubric
