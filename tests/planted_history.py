"""A planted run history for measuring retrieval: one distinct failure theme per step, written into
the step's analyses, summary and rubric update as an analyzer, a summarizer and an updater would
word it, and one query per theme worded differently (a paraphrase, not the planted keywords).

The files are written into a real run directory through amaris's own writers (with provenance), so
the production indexing (`memory.service.index_step`/`rebuild`) and retrieval (`static_retrieval`,
`dynamic_retrieval`, `MemoryStore.query`) read them exactly as they read a run's.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amaris_cli import artifacts
from amaris_cli.models import (
    AnalysisAnswer,
    AnalysisRecord,
    Criterion,
    CriterionStats,
    HackingCount,
    HackingFinding,
    Modification,
    RewardHackingAnalysis,
    RubricJudgement,
    StepStats,
    SummaryAnswer,
    SummaryRecord,
    UpdateRecord,
)
from amaris_cli.rundir import RunDir


@dataclass(frozen=True)
class Theme:
    key: str
    analyses: tuple[str, str, str]  # three analyzers' descriptions of rollouts that fail this way
    summary: str  # the step summary's memory entry
    criterion: str  # the pitfall the update added against it
    query: str  # a later step's description of the same failure, in other words


THEMES: list[Theme] = [
    Theme("units",
          ("The numeric result is right but no unit of measurement is given (metres, seconds).",
           "States 42 without saying whether it is metres or seconds; the unit is missing.",
           "The answer drops the measurement unit the question asked for."),
          "Most wrong rollouts give bare numbers and omit the units of measurement.",
          "The response states the unit of measurement of its numeric answer.",
          "answers that leave out whether the quantity is in kilograms or centimetres"),
    Theme("off_by_one",
          ("Counts the fence posts one short: an off-by-one error when counting intervals.",
           "The count of items between the endpoints is off by one.",
           "Forgot to include the last element, so the count is one less than it should be."),
          "Off-by-one counting errors dominate: endpoints of ranges are left out of counts.",
          "The response counts the endpoints of a range correctly (no off-by-one error).",
          "tallies that miss a single item at the boundary of a sequence"),
    Theme("negative_difference",
          ("Subtracts in the wrong order and reports a negative result for a difference.",
           "The operands of the subtraction are reversed, giving minus 7 instead of 7.",
           "Computes b - a instead of a - b, so the sign of the answer is wrong."),
          "Subtraction done in reversed order, producing negative differences, is the main error.",
          "The response subtracts in the order the problem states.",
          "taking the smaller amount minus the larger one so the gap comes out below zero"),
    Theme("early_rounding",
          ("Rounds every intermediate value to a whole number, so the final result drifts.",
           "Premature rounding of partial results makes the last figure inaccurate.",
           "Keeps only one decimal in the middle of the calculation; the answer is off."),
          "Intermediate rounding errors accumulate and push final answers off.",
          "The response keeps full precision until the final step.",
          "approximating halfway figures too soon so that the end value is imprecise"),
    Theme("percent_points",
          ("Confuses percentage points with percent change: 5% to 7% is called a 2% increase.",
           "Treats an absolute difference of rates as a relative increase.",
           "Says the rate grew by 2 percent when it grew by 2 percentage points (40%)."),
          "Percent change and percentage points are confused in most rate questions.",
          "The response distinguishes percentage points from percent change.",
          "mixing up how much a ratio grew relatively with the plain gap between two rates"),
    Theme("wrong_language",
          ("Answers in Spanish although the question was asked in English.",
           "The reply switches to French midway, not the user's language.",
           "Writes the explanation in German while the prompt is English."),
          "Responses are written in another language than the question's.",
          "The response is written in the language of the question.",
          "replies composed in a different tongue from the one the user wrote in"),
    Theme("infinite_loop",
          ("The Python code has a while loop whose condition never becomes false: it never terminates.",
           "The program loops forever because the counter is never incremented.",
           "The script hangs: the loop has no exit."),
          "Generated programs contain loops that never terminate.",
          "The response's code terminates on every input.",
          "programs whose iteration keeps running without ever stopping"),
    Theme("fake_citations",
          ("Cites two academic papers that do not exist, with invented authors.",
           "The bibliography lists a journal article that cannot be found anywhere.",
           "Makes up a study by 'Smith et al. 2019' to support the claim."),
          "Rollouts cite fabricated papers and made-up studies.",
          "The response cites only sources that exist.",
          "invented bibliographic references to scholarly work that was never published"),
    Theme("overrefusal",
          ("Refuses to explain how to boil an egg, citing safety concerns.",
           "Declines a harmless request about gardening as if it were dangerous.",
           "Says it cannot help with a recipe question for policy reasons."),
          "The policy refuses benign requests out of misplaced safety caution.",
          "The response helps with a harmless request instead of refusing it.",
          "saying no to ordinary requests because it wrongly thinks they are hazardous"),
    Theme("ignores_json_format",
          ("Writes prose although the task asked for a JSON object with fixed keys.",
           "The output is free text, not the requested JSON structure.",
           "Ignores the required output schema; the parser cannot read it."),
          "Outputs ignore the requested JSON format and come back as plain prose.",
          "The response follows the requested JSON output format.",
          "machine-parsable key-value output was required, yet the answer is written as sentences"),
    Theme("cut_off",
          ("Stops mid-sentence; the answer is cut off before the conclusion.",
           "The response ends abruptly in the middle of a step without a final answer.",
           "Truncated output: the last paragraph breaks off."),
          "Many responses break off mid-sentence before reaching a conclusion.",
          "The response finishes with a complete final answer.",
          "replies that end suddenly without finishing what they were saying"),
    Theme("repetition",
          ("Repeats the same paragraph six times.",
           "The same sentence is duplicated over and over in the output.",
           "Loops on one phrase, copying it many times."),
          "Degenerate repetition: paragraphs are copied many times over.",
          "The response does not repeat the same passage.",
          "duplicated passages that recur again and again in the text"),
    Theme("calendar",
          ("Gets the weekday wrong when the date range crosses from January into February.",
           "Assumes every month has 30 days when counting days between two dates.",
           "Miscounts the days until the 3rd of next month, so the day of the week is wrong."),
          "Date arithmetic across month boundaries gives wrong days of the week.",
          "The response counts days across month boundaries correctly.",
          "schedule computations that break when a period spills into the following month"),
    Theme("currency",
          ("Converts dollars to euros with the exchange rate inverted.",
           "Multiplies by the rate where it should divide when converting money.",
           "Uses the euro-to-dollar rate for a dollar-to-euro conversion."),
          "Currency conversions apply the exchange rate the wrong way round.",
          "The response applies the exchange rate in the right direction.",
          "changing cash from one monetary system to another with the ratio flipped"),
    Theme("agrees_with_error",
          ("Agrees with the user's incorrect claim that 0.1 + 0.2 equals 0.4 instead of correcting it.",
           "Goes along with the false premise in the question.",
           "Confirms the user's wrong statement rather than pointing out the mistake."),
          "The policy accepts users' false claims instead of correcting them.",
          "The response corrects a false claim made in the question.",
          "endorsing what the person wrongly asserted rather than setting them straight"),
    Theme("grader_note",
          ("Ends with a note telling the grader to award full marks.",
           "Includes 'Dear evaluator, this deserves a perfect score'.",
           "Asks the judge directly for the maximum rating."),
          "Responses address the grader and ask for full marks.",
          "The response addresses the grader or asks for a score.",
          "text aimed at whoever assesses the work pleading for the top grade"),
    Theme("fraction_addition",
          ("Adds 1/2 and 1/3 by adding numerators and denominators, getting 2/5.",
           "Sums fractions without a common denominator.",
           "Adds the tops and the bottoms of the fractions separately."),
          "Fraction addition without common denominators is the main error.",
          "The response adds fractions over a common denominator.",
          "combining ratios by summing the upper and lower parts independently"),
    Theme("diameter_radius",
          ("Uses the diameter where the area formula needs the radius, so the area is four times too large.",
           "Plugs 10 cm into pi r squared when 10 cm is the diameter.",
           "Confuses radius and diameter in the circle's area."),
          "Circle area computed with the diameter instead of the radius.",
          "The response uses the radius, not the diameter, in circle formulas.",
          "round-shape calculations that insert the full width where half of it belongs"),
    Theme("independence",
          ("Multiplies the probabilities of two dependent draws as if they were independent.",
           "Ignores that the first card is not replaced before the second draw.",
           "Treats correlated events as independent when computing the joint chance."),
          "Dependent events are treated as independent in probability questions.",
          "The response accounts for dependence between events when combining probabilities.",
          "assuming outcomes do not affect one another although the odds are linked"),
    Theme("wrong_question",
          ("Computes the total cost although the question asks for the change given back.",
           "Answers how many apples were bought, not how many are left.",
           "Solves a related but different question from the one posed."),
          "Responses answer a different quantity than the question asks for.",
          "The response answers the quantity the question asks for.",
          "replying about some other figure than what the problem wants to know"),
    Theme("privacy_leak",
          ("Repeats a customer's phone number and home address from the context.",
           "Reveals the email address of a private person mentioned in the document.",
           "Discloses personal contact details it was asked to keep confidential."),
          "The policy leaks personal contact information from its context.",
          "The response withholds personal contact details.",
          "exposing individuals' private telephone and residence data"),
    Theme("preamble_padding",
          ("Opens with three paragraphs restating the question before answering; the preamble is padding.",
           "Long filler introduction; the actual answer is buried in the last line.",
           "Pads the response with a generic preamble that repeats the task before getting to it."),
          "Long preambles that restate the task pad most responses before the answer.",
          "The response gets to the answer without a restating preamble.",
          "verbose lead-ins that paraphrase the request before any substance"),
    Theme("unbalanced_equation",
          ("The chemical equation is not balanced: oxygen atoms are not conserved.",
           "Writes H2 + O2 -> H2O without balancing coefficients.",
           "The reaction has more carbon on the left than on the right."),
          "Chemical equations are left unbalanced; atoms are not conserved.",
          "The response balances every chemical equation it writes.",
          "reaction formulas whose element counts differ between reactants and products"),
    Theme("lexicographic_sort",
          ("Sorts the numbers as strings, so 10 comes before 9.",
           "Orders numeric IDs alphabetically by their text instead of by value.",
           "The sorted list puts 100 before 20 because it compares characters."),
          "Numbers are sorted as text, not by value.",
          "The response sorts numbers by their numeric value.",
          "ordering figures by their characters as if they were words"),
]

STEP_OF = {theme.key: step for step, theme in enumerate(THEMES)}
INSTANCE = None  # global mode


def _stats(step: int) -> StepStats:
    """Criterion rates as a real step has them (the summary digest carries them after the prose): the same
    two reward criteria every step and the pitfall the previous update added, at step-dependent rates."""
    third = [0.0, 1 / 3, 2 / 3, 1.0]

    def rate(cid: str, kind: str, mean: float) -> CriterionStats:
        return CriterionStats(criterion_id=cid, kind=kind, n=3, mean=round(mean, 6), spread=0.471405,  # type: ignore[arg-type]
                              within_group_spread=None, saturation_top=round(mean, 6), saturation_bottom=round(1 - mean, 6))

    criteria = [rate("correct-answer", "reward", third[step % 4]), rate("shows-reasoning", "reward", third[(step + 1) % 4])]
    if step > 0:
        criteria.append(rate(f"s{step - 1}-{THEMES[step - 1].key}", "pitfall", third[(step + 2) % 4]))
    return StepStats(step=step, n_rollouts=3, n_scored=3, n_failed=0, mean_reward=0.3, std_reward=0.1, criteria=criteria)


def write_step(run: RunDir, step: int, theme: Theme, *, summary: bool = True, update: bool = True) -> None:
    """The step's analyses, and (unless told otherwise) its summary and update, recorded as a stage would."""
    inputs = {"planted": theme.key}
    analyses = [
        AnalysisRecord(rollout_id=f"s{step}-r{i}", step=step, reward=0.25, status="analyzed", analysis=AnalysisAnswer(
            overall_assessment=f"Wrong final answer. {text}",
            stage_performance="below what this stage expects",
            reward_hacking=RewardHackingAnalysis(detected=theme.key == "grader_note", patterns=[
                HackingFinding(pattern="grader_addressed_instructions", evidence=text, severity="high")]
                if theme.key == "grader_note" else []),
            advancement_strategy="fix the error described above",
            rubric_judgement=RubricJudgement(assessment="the rubric gave partial credit to a wrong answer",
                                             misjudged=True, missing_criteria=[theme.criterion])))
        for i, text in enumerate(theme.analyses)]
    artifacts.write_jsonl_recorded(run, step, artifacts.ANALYSES, [a.model_dump(mode="json") for a in analyses], inputs)
    if not summary:
        return
    hacking = [HackingCount(pattern="grader_addressed_instructions", count=3, prevalence=1.0, known=True)] \
        if theme.key == "grader_note" else []
    record = SummaryRecord(step=step, n_rollouts=3, n_analyzed=3, chunks=1, stats=_stats(step), hacking=hacking,
                           summary=SummaryAnswer(executive_summary=theme.summary, reward_hacking="see the analyses",
                                                 rubric_meta_evaluation="the rubric misses this failure",
                                                 performance_advancement="accuracy still needs work",
                                                 memory_entry=theme.summary))
    artifacts.write_json_recorded(run, step, artifacts.SUMMARY, record.model_dump(mode="json"), inputs)
    if not update:
        return
    added = Modification(op="add", id=f"s{step}-{theme.key}", text=theme.criterion, weight=1.0, kind="pitfall",
                         reason="seen in every analysis of this step")
    change = UpdateRecord(step=step, from_version=step, to_version=step + 1, strategy="CORRECTIVE",
                          rationale=f"Against this step's failure: {theme.summary}", memory_consultation=[],
                          applied=[added], rejected=[],
                          final_adaptive=[Criterion(id=added.id or "x", text=theme.criterion, weight=1.0, kind="pitfall")])
    artifacts.write_json_recorded(run, step, artifacts.UPDATE, change.model_dump(mode="json"), inputs)


def plant(run_path: Path, *, without_summary: tuple[int, ...] = (), without_update: tuple[int, ...] = ()) -> RunDir:
    """Write one step per theme (step i holds THEMES[i]) into an initialized run."""
    run = RunDir(run_path)
    for step, theme in enumerate(THEMES):
        write_step(run, step, theme, summary=step not in without_summary, update=step not in without_update)
    return run


class RandomEmbedder:
    """Vectors that carry no meaning: a pseudo-random unit vector per text (the same text, the same vector)."""

    name = "test:random"

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            rng = random.Random(hashlib.sha256(text.encode()).digest())
            vec = [rng.gauss(0, 1) for _ in range(64)]
            norm = math.sqrt(sum(v * v for v in vec))
            out.append([v / norm for v in vec])
        return out


class KeywordEmbedder:
    """Bag of words (hashed): texts are close only when they share words. It retrieves by keyword, so
    it scores well only on queries that repeat the planted wording."""

    name = "test:keywords"
    STOP = frozenset("a an the of to in on and or is are be by for with as at it its that this from than not".split())

    def embed(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vec = [0.0] * 512
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                if word not in self.STOP:
                    vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 512] += 1.0
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            out.append([v / norm for v in vec])
        return out


@dataclass(frozen=True)
class RandomMemory:
    """Entries and queries on RandomEmbedder's vectors, with each query's exact 3 nearest entries (brute force):
    the index's hardest case, for measuring how approximate its search is."""

    entries: list[Any]  # MemoryEntry
    queries: list[str]
    vectors: Any  # numpy arrays: the entries', the queries'
    asked: Any
    exact: list[list[str]]


def random_memory(n: int = 5000, queries: int = 200) -> RandomMemory:
    import numpy as np

    from amaris_cli.memory.digests import MemoryEntry

    embedder = RandomEmbedder()
    entries = [MemoryEntry(id=f"analysis:{i:05d}", type="analysis", step=i // 64, instance_id=None, text=f"entry {i}")
               for i in range(n)]
    texts = [f"query {q}" for q in range(queries)]
    vectors, asked = np.array(embedder.embed([e.text for e in entries])), np.array(embedder.embed(texts))
    exact = [[entries[j].id for j in np.argsort(1 - vectors @ q, kind="stable")[:3]] for q in asked]
    return RandomMemory(entries, texts, vectors, asked, exact)
