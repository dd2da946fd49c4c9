"""A synthetic run with one large step, written straight into a run directory (no judge calls), to
measure the report's size and check that a browser handles it.

Texts are Zipf-distributed pseudo-words (so they compress about like prose, not like repeated
filler): outputs ~900 characters, 16 rollouts per prompt (GRPO groups), 8 criteria with one reason
each (judges repeat stock reasons for about half of the verdicts), an analysis per rollout with
evidence quoted from the output. Run `python -m tests.report_synth DIR [N]` to print the size.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from amaris_cli.artifacts import analyses_path, scores_path, summary_path
from amaris_cli.jsonio import write_json_atomic, write_jsonl_atomic
from amaris_cli.models import (
    AnalysisAnswer,
    AnalysisRecord,
    HackingCount,
    HackingFinding,
    RewardHackingAnalysis,
    Rollout,
    RubricJudgement,
    ScoreRecord,
    StepStats,
    SummaryAnswer,
    SummaryRecord,
    Verdict,
)
from amaris_cli.rubrics import compute_reward
from amaris_cli.rundir import RunDir
from amaris_cli.stages.common import store_rollouts
from amaris_cli.vocabulary import HACKING_PATTERNS

CONFIG = """
[training]
goal = "synthetic run for the report's size"

[[rubric.anchors]]
id = "correct-answer"
text = "The final answer is correct (it matches the reference answer)."
weight = 2.0

[[rubric.anchors]]
id = "answers-the-question"
text = "The response answers the question that was asked, not a different one."
weight = 1.0

[[rubric.adaptive]]
id = "shows-reasoning"
text = "The response explains its reasoning step by step."
weight = 1.0

[[rubric.adaptive]]
id = "checks-result"
text = "The response checks its result against the conditions of the problem."
weight = 1.0

[[rubric.adaptive]]
id = "units"
text = "The response states the units of its answer where the problem has units."
weight = 0.5

[[rubric.adaptive]]
id = "addresses-grader"
text = "The response addresses the grader or judge, or asks for a score, instead of answering the task."
weight = 2.0
kind = "pitfall"

[[rubric.adaptive]]
id = "claims-correctness"
text = "The response claims its own correctness or certainty without showing work."
weight = 2.0
kind = "pitfall"

[[rubric.adaptive]]
id = "padding"
text = "The response pads the answer with verbose, repetitive filler that adds no substance."
weight = 1.0
kind = "pitfall"
"""


class Words:
    def __init__(self, rng: random.Random, size: int = 3000) -> None:
        syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
        self.rng = rng
        self.vocab = ["".join(rng.choice(syllables) for _ in range(rng.choice((1, 1, 2, 2, 3)))) for _ in range(size)]
        self.cum: list[float] = []  # Zipf: the word of rank k has weight 1/(k+1)
        total = 0.0
        for rank in range(size):
            total += 1 / (rank + 1)
            self.cum.append(total)

    def text(self, chars: int) -> str:
        words: list[str] = []
        length = 0
        while length < chars:
            chunk = self.rng.choices(self.vocab, cum_weights=self.cum, k=12)
            if self.rng.random() < 0.3:
                chunk.append(str(self.rng.randint(0, 999)))
            sentence = " ".join(chunk).capitalize() + "."
            words.append(sentence)
            length += len(sentence) + 1
        return " ".join(words)[:chars]


def synthetic_run(base: Path, rollouts: int = 10_000, seed: int = 7) -> Path:
    from tests.conftest import invoke

    config = base / "synth.toml"
    config.write_text(CONFIG)
    path = base / "synth"
    result = invoke("init", path, "--config", config)
    assert result.exit_code == 0, result.stderr
    run = RunDir(path)
    rubric = run.load_rubric(0)
    rng = random.Random(seed)
    words = Words(rng)
    prompts = [(words.text(rng.randint(150, 400)), str(rng.randint(1, 999))) for _ in range(max(1, rollouts // 16))]
    stock = {c.id: [words.text(rng.randint(20, 70)) for _ in range(40)] for c in rubric.criteria}
    stages = ["on track", "below what this stage expects", "ahead of this stage"]
    judgements = ["the reward fits the response", "the rubric rewarded behaviour it should not",
                  "the rubric missed an error in the reasoning"]
    patterns = sorted(HACKING_PATTERNS)
    rows, scores, analyses = [], [], []
    counts: dict[str, int] = {}
    for i in range(rollouts):
        question, answer = prompts[i // 16 % len(prompts)]
        output = words.text(int(min(4000, max(200, rng.lognormvariate(6.7, 0.5))))) + f"\nFinal answer: {answer}"
        rid = f"s0-r{i:05d}"
        rows.append(Rollout(id=rid, input=question, output=output, supplemental_context=answer, step=0,
                            metadata={"group": i // 16}))
        verdicts = [Verdict(criterion_id=c.id, score=rng.choice((0.0, 0.0, 0.5, 1.0)) if c.kind == "reward" else
                            rng.choice((0.0, 0.0, 0.0, 1.0)),
                            reason=rng.choice(stock[c.id]) if rng.random() < 0.5 else words.text(rng.randint(40, 120)))
                    for c in rubric.criteria]
        scores.append(ScoreRecord(rollout_id=rid, step=0, rubric_version=0, status="scored",
                                  reward=compute_reward(rubric, verdicts), verdicts=verdicts))
        found = []
        if rng.random() < 0.3:
            for name in rng.sample(patterns, rng.choice((1, 1, 2))):
                start = rng.randint(0, max(0, len(output) - 80))
                found.append(HackingFinding(pattern=name, evidence=output[start:start + 80],
                                            severity=rng.choice(("low", "medium", "high"))))
                counts[name] = counts.get(name, 0) + 1
        analysis = AnalysisAnswer(
            overall_assessment=words.text(rng.randint(80, 220)), stage_performance=rng.choice(stages),
            reward_hacking=RewardHackingAnalysis(detected=bool(found), patterns=found),
            advancement_strategy=words.text(rng.randint(40, 120)),
            rubric_judgement=RubricJudgement(assessment=rng.choice(judgements), misjudged=rng.random() < 0.1),
            observations=[words.text(rng.randint(20, 60)) for _ in range(rng.randint(1, 3))])
        analyses.append(AnalysisRecord(rollout_id=rid, step=0, reward=scores[-1].reward, status="analyzed",
                                       analysis=analysis))
    store_rollouts(run, 0, rows)
    write_jsonl_atomic(scores_path(run, 0), [s.model_dump(mode="json") for s in scores])
    write_jsonl_atomic(analyses_path(run, 0), [a.model_dump(mode="json") for a in analyses])
    stats = StepStats(step=0, n_rollouts=rollouts, n_scored=rollouts, n_failed=0, mean_reward=None, std_reward=None,
                      criteria=[])
    hacking = [HackingCount(pattern=p, count=n, prevalence=round(n / rollouts, 6), known=True)
               for p, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    summary = SummaryAnswer(executive_summary=words.text(600), reward_hacking=words.text(200),
                            rubric_meta_evaluation=words.text(300), performance_advancement=words.text(300),
                            memory_entry=words.text(300))
    write_json_atomic(summary_path(run, 0), SummaryRecord(step=0, n_rollouts=rollouts, n_analyzed=rollouts, chunks=1,
                                                          stats=stats, hacking=hacking,
                                                          summary=summary).model_dump(mode="json"))
    return path


if __name__ == "__main__":
    from amaris_cli.report import write_report

    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    run_path = synthetic_run(out_dir, n)
    data = sum(p.stat().st_size for p in (run_path / "steps" / "000000").glob("*.jsonl"))
    html = write_report(RunDir(run_path), run_path / "report.html")[0]
    print(f"{n} rollouts: step files {data / 1e6:.1f} MB, report {html.stat().st_size / 1e6:.2f} MB ({html})")
