"""`amaris inspect` for people: the data of inspection.inspect_run as rich tables that stay readable at
80 columns. Nothing is cut: long values wrap inside their column, headers are whole words, and every
abbreviation is explained in the table's caption."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from amaris_cli.display import add_column, count, plain_table
from amaris_cli.figures import shown_cost, shown_number, shown_percent
from amaris_cli.reader import by_agent, describe_steps
from amaris_cli.training import TrainingMetadata

BARS = " ▁▂▃▄▅▆▇█"


def sparkline(counts: list[int]) -> str:
    top = max(counts, default=0)
    if top == 0:
        return "-"
    return "".join(BARS[0 if c == 0 else max(1, round(c / top * (len(BARS) - 1)))] for c in counts)


def strategy_of(step: dict[str, Any]) -> str:
    """The update's strategy; in a per-instance run, how many instances' updates chose each."""
    if step["strategy"] or not step.get("updates"):
        return step["strategy"] or "-"
    return "per instance: " + ", ".join(f"{k} {v}" for k, v in step["strategies"].items())


def edit_counts(step: dict[str, Any]) -> str:
    if not step["strategy"] and not step.get("updates"):
        return "-"
    # an edit changes the rubric: one that restates a criterion (its own weight, its own text) is counted apart
    changed = step.get("applied_changes") or [True] * len(step["applied"])
    ops = [m["op"] for m, c in zip(step["applied"], changed, strict=True) if c]
    added, removed = ops.count("add"), ops.count("remove")
    text = f"+{added} -{removed} ~{len(ops) - added - removed}"
    if unchanged := len(changed) - len(ops):
        text += f" ({unchanged} changed nothing)"
    if step["rejected"]:
        text += f" ({len(step['rejected'])} rejected)"
    if step.get("gate") and step["gate"]["decision"] == "refused":
        text += " refused by the gate"
    elif refused := step.get("refused_by_gate"):  # a per-instance step: its instances' updates
        text += f" ({refused} of {step['updates']} refused by the gate)"
    return text


def hacking_list(step: dict[str, Any], limit: int = 4) -> str:
    shown = [f"{h['pattern']} {shown_percent(h['prevalence'])}" for h in step["hacking"][:limit]]
    more = len(step["hacking"]) - limit
    if more > 0:
        shown.append(f"and {more} more")
    return ", ".join(shown) or "-"


def rewards_table(data: dict[str, Any]) -> Table:
    table = plain_table("reward per step",
                        "rubric: the rubric versions that scored the step (in a per-instance run, each instance's "
                        "own); failed: rollouts the judge could not score; mean and sd: mean reward and its standard "
                        "deviation over the scored rollouts; distribution: rollouts in each tenth of the reward range, "
                        "from 0-0.1 to 0.9-1, as bars relative to the step's fullest tenth")
    for header, numeric in (("step", True), ("rubric", False), ("rollouts", True), ("failed", True),
                            ("mean", True), ("sd", True), ("distribution", False)):
        add_column(table, header, numeric)
    for s in data["steps"]:
        # every version, as the report lists them (a per-instance step is scored with each instance's own)
        version = ", ".join(f"v{n}" for n in s["rubric_versions"]) or "-"
        table.add_row(str(s["step"]), version, str(s["rollouts"]), str(s["failed"]), shown_number(s["mean_reward"]),
                      shown_number(s["std_reward"], 2), sparkline(s["reward_histogram"]))
    return table


def validation_table(data: dict[str, Any]) -> Table:
    table = plain_table("validation rollouts per step",
                        "a trainer's evaluation sent to `amaris serve`'s POST /validate: judged with the rubric version a "
                        "training rollout of the step gets, but in no step (RUN/validation/), so no evolution learns "
                        "from it and the step's figures above leave it out; failed: rollouts the judge could not score")
    for header, numeric in (("step", True), ("rubric", False), ("rollouts", True), ("failed", True), ("mean", True),
                            ("sd", True)):
        add_column(table, header, numeric)
    for v in data["validation"]:
        table.add_row(str(v["step"]), ", ".join(f"v{n}" for n in v["rubric_versions"]), str(v["rollouts"]),
                      str(v["failed"]), shown_number(v["mean_reward"]), shown_number(v["std_reward"], 2))
    return table


def updates_table(data: dict[str, Any]) -> Table:
    table = plain_table("update and reward hacking per step",
                        "state: new (no complete scores), stale (a file of the step was edited since written, or made "
                        "from one that changed: `--step N` names them), scored, evolved (analyzed and summarized), updated (and its "
                        "rubric updated), skipped (it could not be evaluated: the judge was unreachable, or it has failed "
                        "records under --failed-step carry; the rubric was carried forward), failed (its evolution ended in an error), running (a process writes it now); "
                        "update: the strategy of the update after the step; edits: criteria added (+), removed (-) "
                        "and changed (~) by it (an edit that restates a criterion as it is changes nothing, and is "
                        "counted apart); hacking: patterns the analyzer named, with the share of analyzed "
                        "rollouts showing each")
    add_column(table, "step", numeric=True)
    add_column(table, "state")
    add_column(table, "update")
    add_column(table, "edits")
    add_column(table, "hacking", ratio=1)
    for s in data["steps"]:
        table.add_row(str(s["step"]), s.get("state", "-"), strategy_of(s), edit_counts(s), hacking_list(s))
    return table


def usage_rows(table: Table, agents: dict[str, dict[str, float]], priced: bool) -> None:
    for agent, row in agents.items():
        table.add_row(agent, str(int(row["model_calls"])), str(int(row["prompt_tokens"])),
                      str(int(row["completion_tokens"])), str(int(row["replayed"])),
                      shown_cost(row["cost"]) if priced else "-")


def usage_table(title: str, agents: dict[str, dict[str, float]], priced: bool) -> Table:
    table = plain_table(title, "calls and tokens in/out (prompt/completion) of requests sent to a model; from record: "
                               "requests answered from a recorded run (replay), which spent no tokens")
    for header, numeric in (("agent", False), ("calls", True), ("tokens in", True), ("tokens out", True),
                            ("from record", True), ("cost $", True)):
        add_column(table, header, numeric)
    usage_rows(table, agents, priced)
    return table


def overview(data: dict[str, Any]) -> list[RenderableType]:
    origin = f", replay of {data['replay_of']}" if data.get("replay_of") else ""
    versions = describe_steps(data["rubric_versions"]) or "none"
    parts: list[RenderableType] = [
        Text(f"run {data['run']} (amaris {data['version']}{origin}): {count(len(data['steps']), 'step')}, "
             f"rubric versions {versions}", style="bold"),
        rewards_table(data),
        *([validation_table(data)] if data.get("validation") else []),
        updates_table(data),
        usage_table("tokens and cost by agent", by_agent(data["usage"]), bool(data["totals"]["priced_models"])),
    ]
    parts += alarms_part(data)
    memory = data["memory_entries"]
    parts.append(Text(f"memory entries (from the run's files): {count(memory['analysis'], 'analysis', 'analyses')}, "
                      f"{count(memory['summary'], 'summary', 'summaries')}, {count(memory['update'], 'update')}"))
    if not data["totals"]["priced_models"]:
        parts.append(Text("no prices configured: add [prices.MODEL] prompt = X, completion = Y ($ per 1M tokens) "
                          "for costs", style="dim"))
    return parts


def step_overview(data: dict[str, Any], step: int) -> list[RenderableType]:
    """The step's rows of the overview: `data` holds only them (inspect_run, whole=False)."""
    return [Text(f"run {data['run']}: step {step} of {count(data['step_count'], 'step')} (`amaris inspect` without "
                 "--step shows them all)", style="bold"), rewards_table(data),
            *([validation_table(data)] if data["validation"] else []), updates_table(data)]


def alarms_part(data: dict[str, Any]) -> list[RenderableType]:
    """Hacking-onset alarms (alarms.py): a table when there are any, else one line saying what was checked."""
    signals = data.get("alarm_signals") or {}
    checked = [name for name, on in (("judge reward against the verifiable reward", signals.get("verifiable_reward")),
                                     ("hacking patterns' prevalence", signals.get("hacking_patterns"))) if on]
    if not data.get("alarms"):
        what = " and ".join(checked) if checked else "nothing yet (no verifiable reward, no step analyzed)"
        return [Text(f"hacking-onset alarms: none (checked: {what})")]
    table = plain_table("hacking-onset alarms", "an alarm reports, it changes no reward; kind: judge_gold_divergence (the "
                        "judge rewards rollouts the verifiable reward fails, more than before) or pattern_prevalence (a "
                        "pattern the analyzer names grows); step: where it started")
    for header, numeric, ratio in (("step", True, None), ("kind", False, None), ("reason", False, 1)):
        add_column(table, header, numeric, ratio)
    for alarm in data["alarms"]:
        kind = alarm["kind"] + (f" ({alarm['pattern']})" if alarm.get("pattern") else "")
        table.add_row(str(alarm["step"]), kind, alarm["reason"])
    return [table]


def criteria_table(detail: dict[str, Any]) -> Table:
    origin = f" (statistics computed from the scores: {detail['criteria_why']})" if detail.get("criteria_from") == "scores" else ""
    table = plain_table(f"step {detail['step']}: criteria of rubric v{detail['rubric_version']}{origin}",
                        "* anchor (never edited by updates); rate: mean verdict, the pass rate of a reward criterion or "
                        "the prevalence of a pitfall (higher = worse); spread: standard deviation of the verdicts; "
                        "at 1 / at 0: share of rollouts with verdict 1 / 0")
    add_column(table, "criterion", ratio=1)
    for header in ("kind", "weight", "rate", "spread", "at 1", "at 0"):
        add_column(table, header, numeric=header != "kind")
    stats = {c["criterion_id"]: c for c in detail["criteria"]}
    for c in detail.get("rubric", []):
        st = stats.get(c["id"], {})
        name = Text(("* " if c["anchor"] else "") + c["text"])
        name.append(f"\n{c['id']}", style="dim")
        table.add_row(name, c["kind"], f"{c['weight']:g}", shown_number(st.get("mean"), 2),
                      shown_number(st.get("spread"), 2), shown_number(st.get("saturation_top"), 2),
                      shown_number(st.get("saturation_bottom"), 2))
    return table


def indented(text: Text, level: int = 1) -> Padding:
    """Wrapped lines keep the indent of the first."""
    return Padding(text, (0, 0, 0, 2 * level))


def update_lines(detail: dict[str, Any]) -> list[RenderableType]:
    if not detail["strategy"] and not detail.get("updates"):
        return [Text(f"no update after step {detail['step']}")]
    if detail["strategy"]:
        lines: list[RenderableType] = [Text(f"update after step {detail['step']}: {detail['strategy']}", style="bold"),
                                       indented(Text(f"rationale: {detail['rationale']}"))]
    else:  # a per-instance run: the instances' updates (`amaris report` shows each with its rationale)
        lines = [Text(f"updates after step {detail['step']}, {strategy_of(detail)}; their edits:", style="bold")]
    changed = detail.get("applied_changes") or [True] * len(detail["applied"])
    for m, c in zip(detail["applied"], changed, strict=True):
        line = Text(f"{m['op']} " if c else f"{m['op']} (changed nothing) ", style="green" if c else "dim")
        kind = f" {m['kind']}" if m.get("kind") else ""
        weight = f" (weight {m['weight']:g})" if m.get("weight") is not None else ""
        line.append(f"{m.get('id') or ''}{kind}{weight}: {m.get('text') or ''}", style="default")
        if m.get("reason"):
            line.append(f" - {m['reason']}", style="dim")
        lines.append(indented(line))
    for r in detail["rejected"]:
        mod = r["modification"]
        line = Text("rejected ", style="red")
        line.append(f"{mod['op']} {mod.get('id') or ''}: {r['reason']}", style="default")
        lines.append(indented(line))
    for d in detail["deactivated"]:
        lines.append(indented(Text(f"deactivated {d['criterion_id']}: {d['reason']}", style="yellow")))
    gate = detail.get("gate")
    if gate:
        line = Text(f"adoption gate: {gate['decision']}", style="red" if gate["decision"] == "refused" else "default")
        line.append(f" ({gate['calls']} judge calls; budget {gate['budget']} of the step's {gate['step_calls']}): "
                    f"{gate['reason']}", style="default")
        lines.append(indented(line))
    return lines


def retrieval_lines(retrieval: dict[str, Any] | None) -> list[RenderableType]:
    if not retrieval:
        return []
    lines: list[RenderableType] = [Text(f"retrieval: {len(retrieval['static'])} static entries, "
                                        f"{len(retrieval['queries'])} queries, {len(retrieval['dynamic'])} hits",
                                        style="bold")]
    if retrieval["static"]:
        lines.append(indented(Text("static: " + ", ".join(retrieval["static"]))))
    for i, query in enumerate(retrieval["queries"], 1):
        lines.append(indented(Text(f"query {i}: {query}")))
        for h in (h for h in retrieval["dynamic"] if h.get("query") == query):
            lines.append(indented(Text(f"{h['distance']:.3f}  step {h['step']}  {h['type']}  {h['id']}", style="dim"), 2))
    return lines


def reliability_part(detail: dict[str, Any]) -> list[RenderableType]:
    """The step's judge reliability check (reliability.py): its calls, then per rubric version each criterion's
    flip rate over the steps up to this one (what the step's updater was given)."""
    rel = detail.get("reliability") or {"measured": False, "why": "not known"}
    if not rel["measured"]:
        return [Text(f"judge reliability: not measured ({rel['why']})")]
    if rel["skipped"]:
        return [Text(f"judge reliability: not checked at step {detail['step']}: {rel['skipped']}")]
    parts: list[RenderableType] = [Text(
        f"judge reliability: {count(rel['calls'], 'scorer call')} asked again at step {detail['step']}, within a budget "
        f"of {rel['budget']} ({shown_percent(rel['max_extra'])} of its {rel['scorer_calls']} scorer calls); "
        f"{rel['failed']} without a valid answer", style="bold")]
    texts = {c["id"]: c["text"] for c in detail.get("rubric", [])}
    for version in rel["versions"]:
        instance = f" (instance {version['instance_id']})" if version["instance_id"] is not None else ""
        tolerance = ", ".join(f"{t:g}" for t in version["tolerance"])
        table = plain_table(f"flip rates of rubric v{version['rubric_version']}{instance}, re-judged at step "
                       f"{describe_steps(version['steps'])}",
                       "judged again: verdicts given again (repeat: the same request, only its block tag drawn again; "
                       f"permuted: the criteria in another order); flipped: of them, those that differ from the first "
                       f"verdict by more than {tolerance}; flip rate: flipped / judged again. A criterion that flips "
                       "is a candidate to rewrite; flips only in permuted order show position bias")
        add_column(table, "criterion", ratio=1)
        for header in ("judged again", "flipped", "flip rate", "repeat", "permuted"):
            add_column(table, header, numeric=True)
        for c in version["criteria"]:
            name = Text(texts.get(c["criterion_id"], ""))
            name.append(("\n" if name.plain else "") + c["criterion_id"], style="dim")
            table.add_row(name, str(c["n"]), str(c["flips"]), shown_percent(c["rate"]),
                          f"{c['repeat']['flips']}/{c['repeat']['n']}", f"{c['permuted']['flips']}/{c['permuted']['n']}")
        parts.append(table)
    return parts


def detail_view(detail: dict[str, Any], priced: bool) -> list[RenderableType]:
    parts: list[RenderableType] = []
    if detail.get("stale"):
        parts.append(Text(f"stale: {', '.join(detail['stale'])} (edited since written, or made from a file that has "
                          "changed since; re-run the stage to recompute)", style="bold"))
    if detail.get("rubric"):
        parts.append(criteria_table(detail))
    own = [r for r in detail.get("rubrics", []) if r["instance"] is not None]
    if own:  # a per-instance run: the instances' ids are rollout text, not printed here
        versions = describe_steps(sorted({r["version"] for r in own}))
        parts.append(Text(f"scored with the instances' own rubrics: {len(own)} instance(s), version {versions} "
                          "(rubrics/instances/ID/step-N.json; `amaris report` shows each)"))
    if detail.get("training"):
        # Each text as the agents were shown it: the whole of a long one is in training.json (and in --json).
        shown = TrainingMetadata.model_validate(detail["training"]).shown()
        given = ", ".join(f"{k} {v!r}" for k, v in shown.items())
        parts.append(Text(f"training, as the trainer's requests gave it: {given}"))
    validation = detail.get("validation")
    if validation:
        parts.append(Text(f"validation: {count(validation['rollouts'], 'rollout')} judged in no step, "
                          f"{validation['failed']} failed; mean reward {shown_number(validation['mean_reward'])} "
                          f"(sd {shown_number(validation['std_reward'], 2)})"))
    parts += reliability_part(detail)
    if detail["summary"]:
        parts.append(Text(f"summary: {detail['summary']}"))
    parts += update_lines(detail)
    parts += retrieval_lines(detail["retrieval"])
    if detail["usage"]:
        parts.append(usage_table(f"step {detail['step']}: tokens and cost by agent", dict(sorted(detail["usage"].items())),
                                 priced))
    return parts


def inspect_view(data: dict[str, Any]) -> Group:
    """Everything `inspect` prints, as one renderable: the run's overview, or (`--step N`, from inspect_run's
    `whole=False`) the step's rows of it and then the step's detail, without the other steps and the run's totals
    (found by a new-user walkthrough)."""
    detail = data.get("detail")
    parts = overview(data) if not detail else [
        *step_overview(data, detail["step"]), *detail_view(detail, bool(data["totals"]["priced_models"]))]
    spaced: list[RenderableType] = []
    for part in parts:  # a blank line before every table and section heading
        if spaced and (isinstance(part, Table) or (isinstance(part, Text) and part.style == "bold")):
            spaced.append(Text(""))
        spaced.append(part)
    return Group(*spaced)
