"""The run directory: paths, manifest, rubric versions, and the one-writer lock.

The files are the source of truth; the vector memory under `memory/` is an index that can be
rebuilt from them. See DESIGN.md for the layout.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from amaris_cli import __version__
from amaris_cli.config import Settings
from amaris_cli.errors import AmarisError, RunLockedError
from amaris_cli.jsonio import read_json, write_json_atomic
from amaris_cli.models import RubricSet


class InputRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    sha256: str


class LoopRecord(BaseModel):
    """How `loop` (or `replay`) was last run on this directory: what a replay must repeat."""

    model_config = ConfigDict(extra="forbid")
    lag: int = 0
    rescore: bool = False
    on_error: str = "fail"
    judge: str = "endpoint"
    flags: dict[str, Any] = Field(default_factory=dict)


class Manifest(BaseModel):
    """run.json. The only file besides calls.jsonl that may hold wall-clock times."""

    model_config = ConfigDict(extra="forbid")
    tool: str = "amaris"
    version: str = __version__
    created_at: str
    updated_at: str
    config: dict[str, Any]
    prompt_hashes: dict[str, str] = Field(default_factory=dict)
    inputs: dict[str, InputRecord] = Field(default_factory=dict)
    steps: dict[str, list[str]] = Field(default_factory=dict)
    loop: LoopRecord | None = None
    replay_of: str | None = None

    def mark(self, step: int, stage: str) -> None:
        done = self.steps.setdefault(str(step), [])
        if stage not in done:
            done.append(stage)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def safe_instance_dir(instance_id: str) -> str:
    """A file-system-safe, collision-free directory name for an instance id."""
    clean = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in instance_id)[:48]
    if clean == instance_id and not clean.startswith("."):
        return clean
    return f"{clean}-{hashlib.sha256(instance_id.encode()).hexdigest()[:10]}"


class RunDir:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

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
    def prompts_override_dir(self) -> Path:
        return self.path / "prompts"

    def step_dir(self, step: int, instance_id: str | None = None) -> Path:
        base = self.path / "steps" / f"{step:06d}"
        if instance_id is not None:
            return base / "instances" / safe_instance_dir(instance_id)
        return base

    def rubric_dir(self, instance_id: str | None = None) -> Path:
        base = self.path / "rubrics"
        if instance_id is not None:
            return base / "instances" / safe_instance_dir(instance_id)
        return base

    def rubric_path(self, version: int, instance_id: str | None = None) -> Path:
        return self.rubric_dir(instance_id) / f"step-{version:06d}.json"

    # --- existence ----------------------------------------------------------------------
    def exists(self) -> bool:
        return self.manifest_path.exists()

    def require(self) -> None:
        if not self.exists():
            raise AmarisError(
                f"{self.path}: not an amaris run directory (no run.json); create it with `amaris init {self.path}`"
            )

    # --- manifest -----------------------------------------------------------------------
    def load_manifest(self) -> Manifest:
        self.require()
        try:
            return Manifest.model_validate(read_json(self.manifest_path))
        except Exception as exc:  # corrupt manifest: say which file
            raise AmarisError(f"{self.manifest_path}: unreadable manifest: {exc}") from None

    def save_manifest(self, manifest: Manifest) -> None:
        manifest.updated_at = now_iso()
        write_json_atomic(self.manifest_path, manifest.model_dump(mode="json"))

    def settings(self) -> Settings:
        return Settings.model_validate(self.load_manifest().config)

    # --- rubrics ------------------------------------------------------------------------
    def rubric_versions(self, instance_id: str | None = None) -> list[int]:
        directory = self.rubric_dir(instance_id)
        if not directory.is_dir():
            return []
        versions = []
        for p in directory.glob("step-*.json"):
            try:
                versions.append(int(p.stem.removeprefix("step-")))
            except ValueError:
                continue
        return sorted(versions)

    def load_rubric(self, version: int, instance_id: str | None = None) -> RubricSet:
        path = self.rubric_path(version, instance_id)
        try:
            return RubricSet.model_validate(read_json(path))
        except FileNotFoundError:
            raise AmarisError(f"{path}: rubric version {version} does not exist") from None
        except Exception as exc:
            raise AmarisError(f"{path}: invalid rubric file: {exc}") from None

    def rubric_version_for(self, step: int, lag: int = 0, instance_id: str | None = None) -> int | None:
        """The newest rubric version usable for `step`: version <= step - lag.

        Version v is the rubric produced by the update of step v-1 (version 0 comes from init),
        so with lag L step t sees only updates that finished L steps before it would in training.
        """
        usable = [v for v in self.rubric_versions(instance_id) if v <= step - lag]
        if not usable and lag > 0:
            usable = self.rubric_versions(instance_id)[:1]
        return usable[-1] if usable else None

    def save_rubric(self, rubric: RubricSet) -> None:
        write_json_atomic(
            self.rubric_path(rubric.version, rubric.instance_id), rubric.model_dump(mode="json")
        )

    # --- lock ---------------------------------------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        """One writer per run directory. The OS releases the lock when its holder dies, so a lock
        left by a killed process is recovered by simply taking it."""
        self.path.mkdir(parents=True, exist_ok=True)
        lock_path = self.path / ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "unknown process"
                raise RunLockedError(
                    f"{self.path}: the run directory is in use by another amaris process ({holder}); "
                    "wait for it to finish, or use another run directory"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {' '.join(sys.argv[:4])}".encode(), 0)
            yield
        finally:
            os.close(fd)
