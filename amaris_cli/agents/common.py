"""What every agent needs: the client, its template, and the trusted context text."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.config import AGENTS, Settings
from amaris_cli.llm.client import LLMClient
from amaris_cli.models import RubricSet
from amaris_cli.prompts import Template, load_template


def compact_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def json_lines(rows: list[Any]) -> str:
    return "\n".join(compact_json(r) for r in rows) if rows else "(none)"


@dataclass
class AgentKit:
    settings: Settings
    client: LLMClient
    prompt_dirs: list[Path] = field(default_factory=list)
    _templates: dict[str, Template] = field(default_factory=dict)

    def template(self, agent: str) -> Template:
        if agent not in self._templates:
            self._templates[agent] = load_template(agent, self.prompt_dirs)
        return self._templates[agent]

    def prompt_hashes(self) -> dict[str, str]:
        return {a: self.template(a).sha256 for a in (*AGENTS, "group_scorer")}

    @property
    def max_chars(self) -> int:
        return self.settings.pipeline.max_text_chars

    def training(self) -> str:
        """The training context every agent's system message holds: the same at every step, so the
        system message is a stable prefix (prefix caching) and verdicts cannot depend on a step label.
        The step itself goes into the user message (`stage`), and the scorer is not told it at all."""
        t = self.settings.training
        lines = [
            f"- goal: {t.goal or 'not stated'}",
            f"- policy model size: {t.model_size or 'not stated'}",
        ]
        if t.context:
            lines.append(f"- other context: {t.context}")
        return "\n".join(lines)

    def stage(self, step: int) -> str:
        """Where training is, for the agents that judge progress (never the scorer)."""
        total = self.settings.training.total_steps
        return f"step {step} of {total}" if total else f"step {step}"

    def progress(self, step: int) -> dict[str, Any]:
        """The trusted fields of the agents that judge a step's progress (all but the scorers): the stable
        training context, where training is, and the step."""
        return {"training": self.training(), "stage": self.stage(step), "step": step}


def rubric_json(rubric: RubricSet) -> str:
    rows = [{"id": c.id, "kind": c.kind, "weight": c.weight, "anchor": True, "text": c.text} for c in rubric.anchors]
    rows += [{"id": c.id, "kind": c.kind, "weight": c.weight, "anchor": False, "text": c.text} for c in rubric.adaptive]
    return orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode()


def rubric_for_judge(rubric: RubricSet) -> str:
    """The scorer sees ids, kinds and texts; weights are ours to apply, not the judge's."""
    rows = [{"id": c.id, "kind": c.kind, "text": c.text} for c in rubric.criteria]
    return orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode()
