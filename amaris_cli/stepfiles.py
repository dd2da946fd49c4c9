"""Step files of a `loop` directory: explicit names, and every entry either used or reported."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from amaris_cli.errors import InputError, InputErrors
from amaris_cli.inputfiles import describe_kind, stat_problem

MAX_STEP = 10**9


def step_number(value: Any) -> int:
    """A step as JSON gives it: an integer 0..MAX_STEP (3.0 is 3; "3", true and 2.5 are not). Raises
    ValueError with the reason (`must be an integer ..., got ...`), for a rollout line and a request alike."""
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if isinstance(value, bool) or not isinstance(value, int | float) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"must be an integer, got {shown}")
    if not 0 <= value <= MAX_STEP:  # compared before int(): 1e300 must not become a 301-digit step
        raise ValueError(f"must be an integer from 0 to {MAX_STEP}, got {shown}")
    return int(value)
NOTE_SUFFIXES = (".md", ".txt", ".rst", ".log")  # regular files a loop directory may hold besides steps
STEP_FILE_SUFFIXES = (".jsonl", ".parquet")  # Parquet: OpenPipe ART's trajectories/SPLIT/NNNN.parquet (parquet.py)
STEP_FILE_RE = re.compile(r"(?:(?:global_)?step[-_]?)?(\d+)\.(?:jsonl|parquet)")
STEP_FILE_NAMES = ("N.jsonl, step-N.jsonl, step_N.jsonl, stepN.jsonl, global_step_N.jsonl, global_step-N.jsonl, "
                   f"or the same ending in .parquet (N = 0..{MAX_STEP})")


def step_from_filename(path: Path) -> int | None:
    """The step a step file's name gives (see STEP_FILE_NAMES), or None when the name is not one."""
    match = STEP_FILE_RE.fullmatch(Path(path).name)
    if match is None or len(match.group(1).lstrip("0")) > len(str(MAX_STEP)):
        return None
    step = int(match.group(1))
    return step if step <= MAX_STEP else None


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
        if not name.endswith(STEP_FILE_SUFFIXES):
            if name.lower().endswith(STEP_FILE_SUFFIXES):
                suffix = next(x for x in STEP_FILE_SUFFIXES if name.lower().endswith(x))
                reason = (f"step files end in lowercase '{suffix}' (rename it to "
                          f"{name[:-len(suffix)] + suffix!r})")
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
