"""Whether the scorer judges on the 0-1 scale it is asked for: checked once per run and judge, before the
first verdict of 1 is taken.

A score of 1 is "fully met" on the 0-1 scale and next to nothing on a 0-10 or 1-5 scale, and a reply whose
every score is 0 or 1 holds nothing that tells the two apart. A judge that scores on 0-10 answers a response
that meets no criterion with 1s, which amaris took as the full reward (and its 9s for a good response are off
the scale, so those failed): the policy was pushed toward wrong answers. So before such a reply is taken, the
judge scores a probe with the run's own scorer instructions: one criterion that the probe's response plainly
meets. On the 0-1 scale that is a score of at most 1; on any other scale a number above 1, which the answer
contract refuses. A judge that answered off the scale has every reply with a 1 failed, never read.

The outcome is kept per judge (model and template, single or grouped; the endpoint, without credentials, is
noted) in RUN/judge-scale.json, so a run checks each judge once (`--judge sim` has a new port in every process).
The probe is an ordinary scorer call in calls.jsonl (context `scale check`), which replays answer from the
record. A check that could not be made (the endpoint down or refusing) keeps no outcome: the reply waiting for
it fails, and the next one asks again; the file is written all the same, saying that the run checks. An
`--offline` replay of a run recorded before amaris made this check (no such file, and no call in its log that is
or may be a `scale check`) takes the replies as the recorded run took them, and says so: it repeats that run,
whose record has no answer to the probe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from amaris_cli.agents.common import AgentKit
from amaris_cli.errors import AmarisError
from amaris_cli.jsonio import read_model, write_json_atomic
from amaris_cli.llm.cache import OfflineMiss
from amaris_cli.llm.endpoint import public_url
from amaris_cli.models import Criterion, Rollout, RubricSet

if TYPE_CHECKING:
    from amaris_cli.agents.scorer import JudgeVerdict

SCALE_FILE = "judge-scale.json"
CONTEXT = "scale check"
PROBE_RUBRIC = RubricSet(version=0, anchors=[Criterion(
    id="final_answer", kind="reward", weight=1.0, text="The response's final answer equals the reference answer.")])
PROBE = Rollout(id="scale-check", step=0, input="What is 5 + 7? End with 'Final answer: N'.",
                output="5 + 7 = 12.\nFinal answer: 12", supplemental_context="12")


class ScaleOutcome(BaseModel):
    base_url: str  # where it was checked (noted, not part of the key)
    model: str
    template: str  # the scorer template's sha256
    scale: Literal["0-1", "other"]
    answer: str  # the probe's score, or why it was refused


class ScaleChecks(BaseModel):
    checks: list[ScaleOutcome] = Field(default_factory=list)


Template = Literal["scorer", "group_scorer"]


async def scale_problem(kit: AgentKit, verdicts: Iterable[JudgeVerdict], template: Template = "scorer") -> str | None:
    """Why a reply's verdicts, answered to `template`, cannot be read, or None. Only a reply that reads the same
    on the 0-1 scale and on one that starts at 0 or 1 is asked about: every score 0 or 1, one of them 1 (a reply
    of 0s means nothing met on any of them)."""
    scores = [v.score for v in verdicts if v.score is not None]
    if not scores or not all(s in (0.0, 1.0) for s in scores) or 1.0 not in scores:
        return None
    return await kit.scale_check(template).problem()


def _path(run_dir: Path) -> Path:
    return run_dir / SCALE_FILE


class ScaleCheck:
    """The check of one session's scorer with one of its templates (the grouped one may be a run's own, asking
    for another scale); `problem()` is None once the judge is known to score on 0-1 with it."""

    def __init__(self, kit: AgentKit, template: Template) -> None:
        self.kit = kit
        self.template = template
        scorer = kit.settings.agent("scorer")
        self.base_url = public_url(scorer.base_url)
        self.key = (scorer.model, kit.template(template).sha256)
        self._known: ScaleOutcome | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None  # a session runs stages on new loops

    async def problem(self) -> str | None:
        """None when the judge scores on 0-1; else why a verdict of 1 from it cannot be read."""
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        async with self._lock[1]:  # one probe, whichever reply needs it first; the others wait for its outcome
            if self._known is None:
                try:
                    self._known = self._recorded() or await self._probe()
                except OfflineMiss:
                    raise
                except Exception as exc:  # no outcome: an invalid answer, the endpoint down or refusing (a held
                    self._mark_checking()  # one sends nothing, so the log has no probe)
                    if not isinstance(exc, ScaleUnchecked):
                        raise
                    return (f"the judge's scale could not be checked ({exc}), and a reply whose scores are all 0 or "
                            "1 is not read without it (1 is next to nothing on a 0-10 scale)")
        if self._known.scale == "0-1":
            return None
        return (f"the judge scores on another scale than 0-1: asked to score a criterion the response fully meets, "
                f"it answered {self._known.answer}. A reply whose scores are all 0 or 1 cannot be read then (1 is "
                f"next to nothing on a 0-10 scale); fix the judge's model or prompt (RUN/{SCALE_FILE} holds the "
                "outcome: delete it to check again)")

    def _recorded(self) -> ScaleOutcome | None:
        checks = self._checks()
        return next((c for c in checks.checks if (c.model, c.template) == self.key), None)

    def _checks(self) -> ScaleChecks:
        """The run's recorded checks; a file that cannot be read (damaged, edited) is none: asked again, rewritten."""
        run = self.kit.run
        if run is None or not _path(run.path).exists():
            return ScaleChecks()
        try:
            return read_model(_path(run.path), ScaleChecks)
        except AmarisError:
            return ScaleChecks()

    async def _probe(self) -> ScaleOutcome:
        # No re-ask: told that its 9 is off the scale, a 0-10 judge answers 1 once, and goes on answering 1 for
        # "not met" in every first reply. Its first answer to the probe is the scale it scores on.
        try:
            score, error = await (self._ask_grouped() if self.template == "group_scorer" else self._ask_one())
        except OfflineMiss:
            if not self._recorded_before_the_check():
                raise
            self.kit.client.say("the replayed run was recorded before amaris checked the judge's scale: its replies "
                                "whose scores are all 0 or 1 are taken as it took them (--offline; unchecked)")
            return ScaleOutcome(base_url=self.base_url, model=self.key[0], template=self.key[1], scale="0-1",
                                answer="not checked: the replayed run was recorded before the check")  # not kept
        if score is not None:
            scale, said = "0-1", f"{score:g}"
        elif error is not None and "off the scale" in error:
            scale, said = "other", error
        else:
            raise ScaleUnchecked(error or "no answer")
        outcome = ScaleOutcome(base_url=self.base_url, model=self.key[0], template=self.key[1], scale=scale, answer=said)
        self._keep(outcome)
        return outcome

    def _recorded_before_the_check(self) -> bool:
        """An offline replay whose source has no judge-scale.json (a run that checked has one, also when the
        check failed) and no call that is or may be a scale check (a damaged line may be one): the recorded run
        was made before amaris checked the scale."""
        cache = self.kit.client.cache
        if cache is None or not cache.offline or cache.source_log is None:
            return False
        return not _path(cache.source_log.parent).exists() and not cache.source_may_hold(None, CONTEXT)

    async def _ask_one(self) -> tuple[float | None, str | None]:
        from amaris_cli.agents.scorer import ScorerAnswer, asks_presence, check_against, scorer_messages
        from amaris_cli.llm.schemas import scorer_contract

        messages = scorer_messages(self.kit, PROBE_RUBRIC, PROBE, 0)
        answer = await self.kit.client.ask(
            "scorer", messages, ScorerAnswer, step=None, context=CONTEXT, reasks=0,
            check=check_against(PROBE_RUBRIC, asks_presence(messages[0]["content"])),
            contract=scorer_contract(PROBE_RUBRIC))
        return (answer.value.verdicts[0].value if answer.value is not None else None), answer.error

    async def _ask_grouped(self) -> tuple[float | None, str | None]:
        from amaris_cli.agents.group_scorer import GroupAnswer, group_messages

        messages = group_messages(self.kit, PROBE_RUBRIC, PROBE, [PROBE.output])
        answer = await self.kit.client.ask("scorer", messages, GroupAnswer, step=None, context=CONTEXT, reasks=0)
        if answer.value is None or len(answer.value.responses) != 1 or len(answer.value.responses[0].verdicts) != 1:
            return None, answer.error or "not one verdict for the probe's one response"
        return answer.value.responses[0].verdicts[0].value, None

    def _mark_checking(self) -> None:
        """A check that could not be made leaves the file (without an outcome) all the same: it says that this
        run's amaris checks the scale, so an offline replay of the run never reads a probe its record lacks (one
        a held endpoint never sent) as a run recorded before the check."""
        run = self.kit.run
        if run is not None and not _path(run.path).exists():
            write_json_atomic(_path(run.path), ScaleChecks().model_dump(mode="json"))

    def _keep(self, outcome: ScaleOutcome) -> None:
        run = self.kit.run
        if run is None:
            return
        checks = self._checks()
        checks.checks = [c for c in checks.checks if (c.model, c.template) != self.key] + [outcome]
        write_json_atomic(_path(run.path), checks.model_dump(mode="json"))


class ScaleUnchecked(Exception):
    """The probe got no answer that says the judge's scale (the endpoint down, an invalid reply)."""
