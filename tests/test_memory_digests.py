"""The summary digest in the memory carries amaris's exact numbers: the hacking counts and each criterion's
rate (pass rate of a reward criterion, prevalence of a pitfall), computed from the verdicts, not estimated
by an LLM (issue 12). The vector is made without the rates, so retrieval ranks by meaning as before."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

from amaris_cli.memory.digests import summary_entry
from amaris_cli.models import (
    Criterion,
    HackingCount,
    RubricSet,
    ScoreRecord,
    SummaryAnswer,
    SummaryRecord,
    Verdict,
)
from amaris_cli.rubrics import step_stats
from amaris_cli.rundir import safe_instance_dir
from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env
from tests.test_shared_memory import chroma_server  # noqa: F401  (the fixture)

RATE = re.compile(r"([\w-]+) (pass rate|prevalence) ([0-9.]+)%")


def rates_in(text: str) -> dict[str, tuple[str, float]]:
    criteria = text.split(" Criteria: ", 1)[1]
    return {cid: (name, float(value) / 100) for cid, name, value in RATE.findall(criteria)}


def test_the_summary_digest_holds_the_exact_rates_of_a_hand_computed_step() -> None:
    rubric = RubricSet(version=0, anchors=[Criterion(id="correct-answer", text="The final answer is correct.", weight=2)],
                       adaptive=[Criterion(id="shows-work", text="The response shows its work.", weight=1),
                                 Criterion(id="asks-grader", text="The response asks the grader for a score.",
                                           weight=2, kind="pitfall")])
    scores = []
    for i in range(16):
        verdicts = [Verdict(criterion_id="correct-answer", score=1.0 if i < 11 else 0.0, reason="r"),  # 11 of 16
                    Verdict(criterion_id="shows-work", score=(1.0, 0.5, 0.5)[i % 3], reason="r"),  # 6x1 + 10x0.5
                    Verdict(criterion_id="asks-grader", score=1.0 if i % 4 == 0 else 0.0, reason="r")]  # 4 of 16
        scores.append(ScoreRecord(rollout_id=f"r{i}", step=3, rubric_version=0, status="scored", reward=0.5,
                                  verdicts=verdicts))
    scores.append(ScoreRecord(rollout_id="failed", step=3, rubric_version=0, status="failed", error="timeout"))
    record = SummaryRecord(step=3, n_rollouts=17, n_analyzed=16, chunks=1, stats=step_stats(3, rubric, scores),
                           hacking=[HackingCount(pattern="grader_addressed_instructions", count=4, prevalence=0.25,
                                                 known=True)],
                           summary=SummaryAnswer(executive_summary="x", reward_hacking="x", rubric_meta_evaluation="x",
                                                 performance_advancement="x",
                                                 memory_entry="Rollouts ask the grader for full marks."))
    entry = summary_entry(record, safe_instance_dir)
    assert entry.text.endswith(" Criteria: correct-answer pass rate 68.75%; shows-work pass rate 68.75%; "
                               "asks-grader prevalence 25% (mean verdicts of 16 scored rollouts).")
    assert "Hacking (counted): grader_addressed_instructions 4/16." in entry.text
    # What is embedded: the paragraph and the counts, as before the rates were added.
    assert entry.embedded == ("Step 3 summary. Rollouts ask the grader for full marks. "
                              "Hacking (counted): grader_addressed_instructions 4/16.")
    odd = record.model_copy(update={"stats": step_stats(3, rubric, scores[:3])})  # 2/3 of credit: not cut to 67%
    assert "shows-work pass rate 66.6667%" in summary_entry(odd, safe_instance_dir).text


def by_hand(scores_file: Path) -> dict[str, float]:
    verdicts: dict[str, list[float]] = {}
    for line in scores_file.read_text().splitlines():
        s = json.loads(line)
        for v in s["verdicts"] if s["status"] == "scored" else []:
            verdicts.setdefault(v["criterion_id"], []).append(v["score"])
    return {cid: sum(vs) / len(vs) for cid, vs in verdicts.items()}


def test_the_updater_reads_the_previous_steps_exact_rates_from_memory(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    expected = by_hand(run / "steps/000000/scores.jsonl")
    kinds = {c["id"]: c["kind"] for c in (lambda r: r["anchors"] + r["adaptive"])(
        json.loads((run / "rubrics/step-000000.json").read_text()))}
    assert len(set(expected.values())) > 1, "rates that differ"
    retrieval = json.loads((run / "steps/000001/retrieval.json").read_text())
    digest = next(e["text"] for e in retrieval["static"] if e["id"] == "summary:00000000:-")
    shown = rates_in(digest)
    assert shown.keys() == expected.keys()
    for cid, (name, rate) in shown.items():
        assert name == ("prevalence" if kinds[cid] == "pitfall" else "pass rate")
        assert abs(rate - expected[cid]) < 1e-9, (cid, rate, expected[cid])
    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    updater = next(c for c in calls if c["agent"] == "updater" and c["step"] == 1)
    assert any(digest.split(" Criteria: ")[1] in m["content"] for m in updater["messages"]), "in the updater's prompt"


def test_a_shared_memory_stores_the_rates_in_the_summary_document(tmp_path: Path, sim, chroma_server: str) -> None:  # noqa: F811
    import chromadb

    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", "--memory-url", chroma_server,
                    env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    address = urlparse(chroma_server)
    client = chromadb.HttpClient(host=address.hostname or "127.0.0.1", port=address.port or 8000)
    stored = client.get_collection("amaris-summaries").get(include=["documents"])
    [document] = [d for i, d in zip(stored["ids"], stored["documents"] or [], strict=True) if i.endswith("summary:00000000:-")]
    expected = by_hand(run / "steps/000000/scores.jsonl")
    shown = rates_in(document)
    assert shown.keys() == expected.keys()
    assert all(abs(shown[cid][1] - rate) < 1e-9 for cid, rate in expected.items()), (shown, expected)
