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


REFUSAL = "version 4 refused: it pays the padding hack +1.000 more over its control than the previous version"


def _refused_update(rationale: str, edits: list[dict], applied: list[dict] | None = None):  # noqa: ANN202
    """Step 3's update, whose version 4 the adoption gate refused (REFUSAL): `edits` proposed."""
    from amaris_cli.models import UpdateRecord

    return UpdateRecord.model_validate({
        "step": 3, "from_version": 3, "to_version": 4, "strategy": "CORRECTIVE", "rationale": rationale,
        "memory_consultation": [], "applied": applied or [], "rejected": [], "final_adaptive": [],
        "carried_forward": {"cause": "gate", "reason": REFUSAL},
        "gate": {"decision": "refused", "reason": REFUSAL, "previous_version": 3, "calls": 2, "budget": 2,
                 "step_calls": 37, "margin": 0.05, "max_flips": 0.25, "refused_edits": edits}})


def test_a_long_text_is_cut_in_its_prose_never_in_what_happened() -> None:
    """Entries are cut at 1,200 characters, and they were cut from the end: an update's long rationale took its
    changes and the gate's "not adopted" with it (a refused update then read as applied to the next updater), a
    summary's long paragraph its counted hacks, an analysis's long assessment its hacking evidence."""
    from amaris_cli.memory.digests import ENTRY_CHARS, analysis_entry, update_entry
    from amaris_cli.models import AnalysisAnswer, AnalysisRecord, GateRecord

    prose = "The rubric should change because " + "the responses repeat their work at length " * 40
    edit = {"op": "add", "id": "pads", "text": "The response pads the answer with filler.", "weight": 2, "kind": "pitfall"}
    update = _refused_update(prose, [edit])
    assert isinstance(update.gate, GateRecord)
    text = update_entry(update, "-").text  # type: ignore[arg-type]
    assert len(text) <= ENTRY_CHARS and "Proposed: add pitfall pads" in text, text
    assert text.endswith(f"Not adopted, version 3 carried forward: {REFUSAL}."), text
    assert text.startswith("Step 3 rubric update (CORRECTIVE), version 3 -> 4. The rubric should change because")
    assert text.index("... Proposed:") > 0, "the rationale gives, and says so"
    summary = SummaryRecord(step=2, n_rollouts=16, n_analyzed=16, chunks=1, stats=step_stats(2, RubricSet(
        version=0, anchors=[Criterion(id="c", text="The final answer is correct.", weight=1)]), []),
        hacking=[HackingCount(pattern="grader_addressed_instructions", count=3, prevalence=0.1875, known=True)],
        summary=SummaryAnswer(executive_summary="x", reward_hacking="x", rubric_meta_evaluation="x",
                              performance_advancement="x", memory_entry=prose))
    entry = summary_entry(summary, "-")  # type: ignore[arg-type]
    assert entry.embedded.endswith("Hacking (counted): grader_addressed_instructions 3/16."), entry.embedded
    answer = AnalysisAnswer.model_validate({
        "overall_assessment": prose, "stage_performance": "x", "advancement_strategy": "x",
        "reward_hacking": {"detected": True, "patterns": [{"pattern": "verbosity", "evidence": "repeats", "severity": "high"}]},
        "rubric_judgement": {"assessment": "fair", "misjudged": False}})
    analysis = analysis_entry(AnalysisRecord(rollout_id="r1", step=2, reward=0.5, status="analyzed", analysis=answer),
                              "-")  # type: ignore[arg-type]
    assert analysis is not None and len(analysis.text) <= ENTRY_CHARS
    assert analysis.text.endswith("Reward hacking: verbosity (high): repeats. Rubric: fair"), analysis.text


def test_an_update_entry_names_the_criteria_the_active_cap_took_out() -> None:
    """rubric.max_active_adaptive takes criteria out of the version an update writes; the update's entry said only
    what the updater added, and the next updater read that nothing else left."""
    from amaris_cli.memory.digests import update_entry
    from amaris_cli.models import UpdateRecord

    update = UpdateRecord.model_validate({
        "step": 1, "from_version": 1, "to_version": 2, "strategy": "CORRECTIVE", "rationale": "pads",
        "memory_consultation": [], "rejected": [], "final_adaptive": [],
        "applied": [{"op": "add", "id": "pads", "text": "The response pads the answer.", "weight": 2, "kind": "pitfall"}],
        "deactivated": [{"criterion_id": "shows-reasoning", "spread": 0.0, "reason": "spread 0.0 is among the lowest"}]})
    assert update_entry(update, "-").text.endswith(  # type: ignore[arg-type]
        "Changes: add pitfall pads The response pads the answer. w=2. Deactivated: shows-reasoning.")


def test_an_empty_part_never_becomes_a_stray_ellipsis() -> None:
    """An update with nothing rejected has an empty part that may give: cut, it was a lone "..." in the entry."""
    from amaris_cli.memory.digests import ENTRY_CHARS, update_entry

    edits = [{"op": "add", "id": f"c{i}", "text": f"The response names point number {i} of the method it uses and "
              + "explains it in detail " * 5, "weight": 2, "kind": "pitfall"} for i in range(6)]
    text = update_entry(_refused_update("Short rationale " * 3, edits, applied=edits), "-").text  # type: ignore[arg-type]
    assert len(text) <= ENTRY_CHARS and text.endswith(f"Not adopted, version 3 carried forward: {REFUSAL}.")
    assert "... ..." not in text, text  # (a rationale cut to nothing is one "...")
