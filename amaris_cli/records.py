"""Where each step artefact lives in the run directory, and how to read it back."""

from __future__ import annotations

from pathlib import Path

from amaris_cli.jsonio import iter_jsonl, read_json
from amaris_cli.models import AnalysisRecord, RetrievalRecord, ScoreRecord, SummaryRecord, UpdateRecord
from amaris_cli.rundir import RunDir


def scores_path(run: RunDir, step: int) -> Path:
    return run.step_dir(step) / "scores.jsonl"


def analyses_path(run: RunDir, step: int) -> Path:
    return run.step_dir(step) / "analyses.jsonl"


def summary_path(run: RunDir, step: int, instance_id: str | None = None) -> Path:
    return run.step_dir(step, instance_id) / "summary.json"


def chunk_path(run: RunDir, step: int, index: int, instance_id: str | None = None) -> Path:
    return run.step_dir(step, instance_id) / f"summary.chunk-{index:03d}.json"


def stats_path(run: RunDir, step: int, instance_id: str | None = None) -> Path:
    return run.step_dir(step, instance_id) / "stats.json"


def retrieval_path(run: RunDir, step: int, instance_id: str | None = None) -> Path:
    return run.step_dir(step, instance_id) / "retrieval.json"


def update_path(run: RunDir, step: int, instance_id: str | None = None) -> Path:
    return run.step_dir(step, instance_id) / "update.json"


def load_scores(run: RunDir, step: int) -> list[ScoreRecord]:
    return [ScoreRecord.model_validate(r) for r in iter_jsonl(scores_path(run, step))]


def load_analyses(run: RunDir, step: int) -> list[AnalysisRecord]:
    return [AnalysisRecord.model_validate(r) for r in iter_jsonl(analyses_path(run, step))]


def load_summary(run: RunDir, step: int, instance_id: str | None = None) -> SummaryRecord | None:
    path = summary_path(run, step, instance_id)
    return SummaryRecord.model_validate(read_json(path)) if path.exists() else None


def load_summaries(run: RunDir, step: int) -> list[SummaryRecord]:
    """The step's global summary and every instance's (per-instance mode), each read once."""
    paths = [summary_path(run, step), *sorted((run.step_dir(step) / "instances").glob("*/summary.json"))]
    return [SummaryRecord.model_validate(read_json(p)) for p in paths if p.exists()]


def load_update(run: RunDir, step: int, instance_id: str | None = None) -> UpdateRecord | None:
    path = update_path(run, step, instance_id)
    return UpdateRecord.model_validate(read_json(path)) if path.exists() else None


def load_retrieval(run: RunDir, step: int, instance_id: str | None = None) -> RetrievalRecord | None:
    path = retrieval_path(run, step, instance_id)
    return RetrievalRecord.model_validate(read_json(path)) if path.exists() else None


def step_numbers(run: RunDir) -> list[int]:
    base = run.path / "steps"
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())
