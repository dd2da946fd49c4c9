"""The run directory: its root paths, the manifest and the rubric versions.

The files are the source of truth; the vector memory under `memory/` is an index that can be
rebuilt from them. Step files and what they derive from: artifacts.py. Who may write what at the
same time: locks.py.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from amaris_cli import __version__
from amaris_cli.config import Settings, validate_settings
from amaris_cli.errors import AmarisError, ConfigError
from amaris_cli.jsonio import read_model, write_json_atomic
from amaris_cli.models import RubricSet, SummaryRecord


class Manifest(BaseModel):
    """run.json, written once by `init` (or by `replay` for its new run). The only file besides
    calls.jsonl that holds a wall-clock time. Keys of older versions (steps, inputs, loop) are ignored:
    what each step was derived from, and how it was run, is in the step's provenance.json."""

    model_config = ConfigDict(extra="ignore")
    tool: str = "amaris"
    version: str = __version__
    created_at: str
    config: dict[str, Any]
    replay_of: str | None = None

    @field_validator("config")
    @classmethod
    def _as_it_ran(cls, config: dict[str, Any]) -> dict[str, Any]:
        """A run made before a setting existed goes on as it ran (`init` records every setting): its commands, and
        a replay of it, keep the behaviour its steps were made with."""
        pipeline = config.get("pipeline")
        if isinstance(pipeline, dict) and "carry_scope" not in pipeline:  # `carry` skipped whole per-instance steps
            config = {**config, "pipeline": {**pipeline, "carry_scope": "step"}}
        gate = config.get("gate")
        if isinstance(gate, dict) and "fill" not in gate:  # the gate's items stopped at the first that did not fit
            config = {**config, "gate": {**gate, "fill": "prefix"}}
        return config


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# The end of a hashed directory name (`safe_instance_dir`): an id that ends so is hashed too, or the id
# "a_b-<hash of 'a b'>" would name the directory of the instance "a b" and share its rubrics and history.
_HASHED_END = re.compile(r"-[0-9a-f]{10}\Z")


def _cleaned(instance_id: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in instance_id)[:48]


def _plain(instance_id: str) -> bool:
    """Whether an id is safe as a directory name as it is (the whole rule of earlier versions, whose runs keep
    such ids under these names: RunDir._kept_name)."""
    return _cleaned(instance_id) == instance_id and not instance_id.startswith(".")


def _portable(instance_id: str) -> bool:
    """Whether an id names its directory alone also where the file system ignores case (macOS's, by default;
    it also ignores Unicode normalization): "Q1" and "q1" (or a composed and a decomposed "é") would be one
    directory there, and two instances would share one rubric and write over each other's step files."""
    return instance_id.isascii() and instance_id == instance_id.lower()


def safe_instance_dir(instance_id: str) -> str:
    """A file-system-safe, collision-free directory name for an instance id: the id itself when it is a plain,
    lower-case ASCII name that no other id's hashed name can be, else its cleaned prefix and a hash of it (two
    hashed names differ in their lower-case hex digits, so they stay two on a case-insensitive file system)."""
    if _plain(instance_id) and _portable(instance_id) and not _HASHED_END.search(instance_id):
        return instance_id
    return f"{_cleaned(instance_id)}-{hashlib.sha256(instance_id.encode()).hexdigest()[:10]}"


def numbered(name: str, prefix: str = "", suffix: str = "") -> int | None:
    """The number in a name amaris writes (`{prefix}{n:06d}{suffix}`: a step directory, a rubric file), or
    None for any other name (`2`, `step-2.json`, a backup, a non-ASCII digit): only amaris's own names count,
    so a stray entry never shows as a second copy of a step or a version."""
    digits = name.removeprefix(prefix).removesuffix(suffix) if name.startswith(prefix) and name.endswith(suffix) else ""
    if not (digits.isascii() and digits.isdigit()) or f"{prefix}{int(digits):06d}{suffix}" != name:
        return None
    return int(digits)


def _owner(path: Path, model: type[RubricSet] | type[SummaryRecord]) -> str | None:
    """The instance a rubric or summary file belongs to; None when the file cannot be read."""
    try:
        return model.model_validate_json(path.read_bytes()).instance_id
    except ValueError:
        return None


class RunDir:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._instance_names: dict[str, str] = {}  # a run keeps an instance under one name: looked up once
        self._rubric_paths: dict[tuple[int, str | None], Path] = {}

    # --- paths --------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.path / "run.json"

    @property
    def calls_path(self) -> Path:
        return self.path / "calls.jsonl"

    @property
    def memory_path(self) -> Path:
        return self.path / "memory"

    @property
    def embeddings_path(self) -> Path:
        """The vectors an embeddings endpoint gave the memory (memory/embeddings.py)."""
        return self.path / "embeddings"

    @property
    def prompts_override_dir(self) -> Path:
        return self.path / "prompts"

    def step_dir(self, step: int, instance_id: str | None = None) -> Path:
        base = self.path / "steps" / f"{step:06d}"
        if instance_id is not None:
            return base / "instances" / self.instance_dir(instance_id)
        return base

    def rubric_dir(self, instance_id: str | None = None) -> Path:
        base = self.path / "rubrics"
        if instance_id is not None:
            return base / "instances" / self.instance_dir(instance_id)
        return base

    def instance_dir(self, instance_id: str) -> str:
        """The name of an instance's directories (rubrics/instances/NAME, steps/*/instances/NAME): the one this
        run keeps the instance under, else `safe_instance_dir`."""
        if instance_id not in self._instance_names:
            self._instance_names[instance_id] = self._kept_name(instance_id) or safe_instance_dir(instance_id)
        return self._instance_names[instance_id]

    def _kept_name(self, instance_id: str) -> str | None:
        """The plain name an earlier amaris gave an id that is hashed now (one that ends like a hashed name,
        `q-1700000000`, or has capitals or non-ASCII letters, `Q1`), when this run keeps the instance there: its
        rubrics, history and each step's provenance.json name that directory, so it stays the instance's (read
        under the new name, the instance would be scored with the run's global rubric, silently). A directory
        of that name that another instance owns (the hashed name of `q 17...`, or `q1` where case is ignored)
        is not this instance's."""
        instances = self.path / "rubrics" / "instances"
        new = safe_instance_dir(instance_id)
        if not _plain(instance_id) or new == instance_id or (instances / new).exists():
            return None
        kept = instances / instance_id
        first = min(kept.glob("step-*.json"), default=None) if kept.is_dir() else None
        if first is not None:
            return instance_id if _owner(first, RubricSet) == instance_id else None
        # Before its first update an instance has no rubric file: the summaries in its step directories say whose
        # they are (a plain name holds no glob character).
        summary = min((self.path / "steps").glob(f"*/instances/{instance_id}/summary.json"), default=None)
        return instance_id if summary is not None and _owner(summary, SummaryRecord) == instance_id else None

    def rubric_path(self, version: int, instance_id: str | None = None) -> Path:
        # Remembered: a stale check asks for each instance's rubric once per file of every instance (artifacts).
        key = (version, instance_id)
        if (path := self._rubric_paths.get(key)) is None:
            path = self._rubric_paths[key] = self.rubric_dir(instance_id) / f"step-{version:06d}.json"
        return path

    def lock_path(self, name: str) -> Path:
        from amaris_cli.locks import lock_path

        return lock_path(self.path, name)

    def step_lock_path(self, step: int) -> Path:
        from amaris_cli.locks import step_lock_name

        return self.lock_path(step_lock_name(step))

    # --- existence ----------------------------------------------------------------------
    def exists(self) -> bool:
        return self.manifest_path.exists()

    def require(self, advice: str | None = None) -> None:
        """`advice`: what to do instead, where creating the run is not the answer (a replay's source). A path that is
        not a run is bad input (exit 2), as the README's exit codes say."""
        if not self.exists():
            raise ConfigError(f"{self.path}: not an amaris run directory (no run.json); "
                              f"{advice or f'create it with `amaris init {self.path} --config FILE`'}")

    # --- manifest -----------------------------------------------------------------------
    def load_manifest(self) -> Manifest:
        self.require()
        return read_model(self.manifest_path, Manifest, "a readable manifest")

    def save_manifest(self, manifest: Manifest) -> None:
        write_json_atomic(self.manifest_path, manifest.model_dump(mode="json"))

    def settings(self) -> Settings:
        return validate_settings(self.load_manifest().config, str(self.manifest_path))

    # --- rubrics ------------------------------------------------------------------------
    def rubric_versions(self, instance_id: str | None = None) -> list[int]:
        directory = self.rubric_dir(instance_id)
        if not directory.is_dir():
            return []
        return sorted(v for p in directory.glob("step-*.json") if (v := numbered(p.name, "step-", ".json")) is not None)

    def load_rubric(self, version: int, instance_id: str | None = None) -> RubricSet:
        path = self.rubric_path(version, instance_id)
        try:
            return read_model(path, RubricSet, "a valid rubric file")
        except FileNotFoundError:
            raise AmarisError(f"{path}: rubric version {version} does not exist") from None

    def save_rubric(self, rubric: RubricSet) -> None:
        write_json_atomic(
            self.rubric_path(rubric.version, rubric.instance_id), rubric.model_dump(mode="json")
        )
