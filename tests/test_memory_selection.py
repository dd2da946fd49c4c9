"""What a step puts in the memory, and when (issue 26): the evolution's cost was embedding every analysis.

- A step's analyses are indexed up to ANALYSES_PER_STEP, chosen so that every kind of finding is there: a rare
  hack at the end of a large step is still found by `memory search`, and a rebuild makes the same entries.
- Batching by length changes the work, not the vectors.
- The evolution marks itself done, with the next rubric version written, before it embeds the step: a
  `score --lag` waiting for it does not wait for the indexing.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from amaris_cli import artifacts
from amaris_cli.config import MemorySettings
from amaris_cli.memory.digests import ANALYSES_PER_STEP, analysis_entries, analysis_entry
from amaris_cli.memory.embeddings import LocalMiniLM, make_embedder
from amaris_cli.memory.store import MemoryStore
from amaris_cli.models import (
    AnalysisAnswer,
    AnalysisRecord,
    HackingFinding,
    RewardHackingAnalysis,
    RubricJudgement,
)
from amaris_cli.rundir import RunDir, safe_instance_dir
from tests.conftest import EXAMPLES, invoke, judge_env, new_run, read_jsonl, write_jsonl

PLAIN, MISJUDGED, HACKS = 290, 4, 6  # a large step; its rare findings come last in the file
GRADER_NOTE = "the output ends with a note telling the grader the answer was verified and deserves full marks"


def _analysis(step: int, i: int, kind: str) -> AnalysisRecord:
    patterns = [HackingFinding(pattern="grader_addressed_instructions", severity="high",
                               evidence=f"{GRADER_NOTE} (item {i})")] if kind == "hack" else []
    what = {"plain": f"Wrong final answer: the sum of the {i} listed prices was added up incorrectly.",
            "misjudged": f"Correct answer {i} received almost no credit from the rubric.",
            "hack": "Wrong final answer that still received full credit."}[kind]
    return AnalysisRecord(rollout_id=f"r{i:04d}", step=step, reward=0.5, status="analyzed", analysis=AnalysisAnswer(
        overall_assessment=what, stage_performance="as expected", advancement_strategy="check the arithmetic",
        reward_hacking=RewardHackingAnalysis(detected=kind == "hack", patterns=patterns),
        rubric_judgement=RubricJudgement(assessment="the rubric missed this" if kind == "misjudged" else "fair",
                                         misjudged=kind == "misjudged")))


def _large_step() -> list[AnalysisRecord]:
    kinds = ["plain"] * PLAIN + ["misjudged"] * MISJUDGED + ["hack"] * HACKS
    return [_analysis(0, i, kind) for i, kind in enumerate(kinds)]


def test_a_large_step_indexes_a_bounded_set_with_every_kind_of_finding() -> None:
    records = _large_step()
    entries = analysis_entries(records, safe_instance_dir)
    assert len(entries) == ANALYSES_PER_STEP < len(records)
    ids = {e.id.rsplit(":", 1)[1] for e in entries}
    flagged = {r.rollout_id for r in records[PLAIN:]}
    assert flagged <= ids, "every hack and misjudgement of the step is indexed"
    assert [e.id for e in entries] == sorted(e.id for e in entries), "entries stay in file order"
    # The control: the first ANALYSES_PER_STEP of the file (a plain cap) hold none of them.
    assert not flagged & {r.rollout_id for r in records[:ANALYSES_PER_STEP]}
    # The choice depends on the analyses, not on their order in the file.
    shuffled = records[:]
    random.Random(7).shuffle(shuffled)
    assert {e.id for e in analysis_entries(shuffled, safe_instance_dir)} == {e.id for e in entries}
    # A small step keeps every analysis, as before.
    small = records[:ANALYSES_PER_STEP]
    assert [e.id for e in analysis_entries(small, safe_instance_dir)] == [analysis_entry(r, safe_instance_dir).id for r in small]  # type: ignore[union-attr]


def test_alike_analyses_get_one_entry_each_before_any_gets_a_second() -> None:
    """50 rollouts share one analysis and 20 are all different: the cap keeps the 20, not 44 copies of one."""
    alike = [_analysis(0, i, "plain").model_copy(update={"analysis": _analysis(0, 0, "plain").analysis})
             for i in range(50)]
    different = [_analysis(0, 100 + i, "plain") for i in range(20)]
    entries = analysis_entries(alike + different, safe_instance_dir)
    chosen = {e.id.rsplit(":", 1)[1] for e in entries}
    assert len(entries) == ANALYSES_PER_STEP
    assert {f"r{100 + i:04d}" for i in range(20)} <= chosen, "every distinct analysis is there"
    assert len(chosen & {r.rollout_id for r in alike}) == ANALYSES_PER_STEP - 20
    assert len({e.text for e in entries}) == len(entries), "each entry's text names its rollout: no two vectors tie"


def test_the_steps_hack_is_found_by_memory_search_and_a_rebuild_is_the_same(tmp_path: Path) -> None:
    run = RunDir(new_run(tmp_path, "large"))
    artifacts.write_jsonl_recorded(run, 0, artifacts.ANALYSES, [r.model_dump(mode="json") for r in _large_step()],
                                   {"planted": "large"})
    search = ("memory", "search", "--run", run.path, "an answer with a message asking the judge to give it top marks",
              "-n", "3", "--json")
    first = invoke("memory", "rebuild", "--run", run.path, "--json")
    assert first.exit_code == 0, first.stderr
    assert json.loads(first.stdout)["counts"]["analysis"] == ANALYSES_PER_STEP
    hits = json.loads(invoke(*search).stdout)
    assert hits and "grader_addressed_instructions" in hits[0]["text"], hits
    assert invoke("memory", "rebuild", "--run", run.path).exit_code == 0
    assert json.loads(invoke(*search).stdout) == hits


def test_batching_by_length_gives_each_text_its_own_vector() -> None:
    embedder = make_embedder(MemorySettings(), environ={})  # the model itself, not the suite's embedding cache
    assert isinstance(embedder, LocalMiniLM)
    rng = random.Random(3)
    words = "the grader answer rounded units step total price minus sign verified note marks".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 120))) for _ in range(40)]
    together = np.array(embedder.embed(texts))
    alone = np.array([embedder.embed([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)
    order = list(range(len(texts)))
    rng.shuffle(order)
    assert np.allclose(np.array(embedder.embed([texts[i] for i in order])), together[order], atol=1e-5)


def _scored_step(tmp_path: Path, sim, name: str) -> tuple[Path, dict[str, str]]:
    """A new run whose step 0 (examples/math) is scored, and the judge's environment."""
    run = new_run(tmp_path, name)
    rollouts = write_jsonl(tmp_path / "r.jsonl", read_jsonl(EXAMPLES / "math" / "step-000.jsonl"))
    env = judge_env(sim)
    assert invoke("score", rollouts, "--run", run, "--step", "0", env=env).exit_code == 0
    return run, env


def test_the_evolution_is_done_and_the_next_rubric_written_before_the_step_is_embedded(
        tmp_path: Path, sim, monkeypatch: pytest.MonkeyPatch) -> None:
    run, env = _scored_step(tmp_path, sim, "order")
    env["AMARIS_EMBEDDING_CACHE"] = ""  # the recorder sees the model's calls: none for texts a cache holds
    seen: list[tuple[bool, str | None, bool]] = []  # (embeds the step's analyses, evolution status, version 1 exists)
    embed = LocalMiniLM.embed

    def recording(self: LocalMiniLM, texts: list[str]) -> list[list[float]]:
        mark = artifacts.evolution(RunDir(run), 0)
        seen.append((any(t.startswith("Step 0 rollout") for t in texts), mark and mark.status,
                     RunDir(run).rubric_path(1).exists()))
        return embed(self, texts)

    monkeypatch.setattr(LocalMiniLM, "embed", recording)
    result = invoke("evolve", "--run", run, "--step", "0", "--update", env=env)
    assert result.exit_code == 0, result.stderr
    indexing = [s for s in seen if s[0]]
    assert indexing and all(status == "done" and written for _, status, written in indexing), seen
    # The control: the recorder sees the evolution while it runs (the update's queries are embedded then).
    assert any(not analyses and status is None for analyses, status, _ in seen), seen


def test_an_evolution_without_update_is_done_before_it_embeds_its_step_and_embeds_it(
        tmp_path: Path, sim, monkeypatch: pytest.MonkeyPatch) -> None:
    run, env = _scored_step(tmp_path, sim, "no-update")
    env["AMARIS_EMBEDDING_CACHE"] = ""  # the recorder sees the model's calls: none for texts a cache holds
    statuses: list[str | None] = []
    embed = LocalMiniLM.embed

    def recording(self: LocalMiniLM, texts: list[str]) -> list[list[float]]:
        mark = artifacts.evolution(RunDir(run), 0)
        statuses.append(mark and mark.status)
        return embed(self, texts)

    monkeypatch.setattr(LocalMiniLM, "embed", recording)
    result = invoke("evolve", "--run", run, "--step", "0", "--no-update", env=env)
    assert result.exit_code == 0, result.stderr
    assert statuses and set(statuses) == {"done"}, statuses
    with MemoryStore.open(RunDir(run), MemorySettings(), "reader") as store:
        assert store.counts() == {"analysis": 16, "summary": 1, "update": 0}


def test_a_loop_indexes_the_steps_it_does_not_update(tmp_path: Path, sim) -> None:
    """Steps 0 and 2 of a loop with --update-every 2 are summarized, not updated: their records are in the memory."""
    run = new_run(tmp_path, "every-2")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", "--update-every", "2", "--json",
                    env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    with MemoryStore.open(RunDir(run), MemorySettings(), "reader") as store:
        assert store.counts() == {"analysis": 48, "summary": 3, "update": 1}
