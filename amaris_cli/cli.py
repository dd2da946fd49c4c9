"""The `amaris` command line: parses flags, prints, and calls the stages. No logic lives here.

Heavy modules (openai, chromadb, onnxruntime) are imported inside the commands that need them,
so `amaris --help` stays fast.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from amaris_cli import __version__
from amaris_cli.clihelp import install as _plain_help
from amaris_cli.simjudge.faults import faults_help

_plain_help()
app = typer.Typer(
    name="amaris",
    help="Memory-augmented rubric improvement for rubric-based RL of LLMs (inspired by AMARIS, arXiv 2605.18592).\n\n"
    "Score rollouts with an LLM judge against a weighted rubric, analyze and summarize each step, keep every "
    "diagnostic in a persistent memory, and let an LLM evolve the rubric from recent and retrieved history.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


class Judge(StrEnum):
    endpoint = "endpoint"
    sim = "sim"
    auto = "auto"


class GroupBy(StrEnum):
    none = "none"
    input = "input"


GroupByOpt = Annotated[GroupBy | None, typer.Option(
    "--group-by", help="input: judge the rollouts that share a prompt in one call (RULER-style, identical outputs once); none: one call per rollout.")]


class OnError(StrEnum):
    fail = "fail"
    skip = "skip"
    neutral = "neutral"


RunOpt = Annotated[Path, typer.Option("--run", "-r", help="Run directory (created by `amaris init`).")]
StepOpt = Annotated[int, typer.Option("--step", "-s", min=0, help="Training step number.")]
JudgeOpt = Annotated[Judge, typer.Option(
    "--judge", help="endpoint: the configured OpenAI-compatible endpoint; sim: the rule-based sim-judge "
    "(no LLM); auto: the endpoint if one is configured, else the sim-judge (said plainly).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a machine-readable result on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or tables on stderr.")]
ModelOpt = Annotated[str | None, typer.Option("--model", metavar="MODEL", help="Model for every agent (overrides config and env).")]
RpmOpt = Annotated[float | None, typer.Option(
    "--requests-per-minute", min=0, metavar="N", help="The provider's request limit for every agent, honoured before "
    "sending (agents.*.requests_per_minute).")]
TpmOpt = Annotated[float | None, typer.Option(
    "--tokens-per-minute", min=0, metavar="N", help="The provider's token limit for every agent, honoured before "
    "sending (agents.*.tokens_per_minute).")]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", metavar="URL", help="OpenAI-compatible endpoint for every agent.")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"amaris {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")] = False,
) -> None:
    """amaris"""


@contextmanager
def _errors() -> Any:
    from amaris_cli.display import err
    from amaris_cli.errors import AmarisError

    try:
        yield
    except AmarisError as exc:
        from rich.text import Text

        # The message is plain text: brackets in it (e.g. [[rubric.anchors]]) are not markup.
        err.print(Text.assemble(("error: ", "bold red"), str(exc)), soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: re-run the same command to continue where it stopped", markup=True)
        raise typer.Exit(130) from None
    except OSError as exc:  # disk full, read-only or unwritable directory, ...: one line, not a traceback
        from rich.text import Text

        where = f"{exc.filename}: " if exc.filename else ""
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        err.print(Text.assemble(("error: ", "bold red"), f"{where}{reason}"), soft_wrap=True)
        raise typer.Exit(1) from None


def _agent_flags(model: str | None, base_url: str | None, concurrency: int | None = None,
                 agent: str = "default", rpm: float | None = None, tpm: float | None = None) -> dict[str, Any]:
    """The agent flags as a config layer: model, endpoint and provider limits for every agent; the
    concurrency for the stage's agent (and the overall limit)."""
    default: dict[str, Any] = {k: v for k, v in (("model", model), ("base_url", base_url),
                                                  ("requests_per_minute", rpm), ("tokens_per_minute", tpm)) if v}
    flags: dict[str, Any] = {"agents": {"default": default}} if default else {}
    if concurrency:
        flags.setdefault("agents", {}).setdefault(agent, {})["concurrency"] = concurrency
        flags["llm"] = {"concurrency": max(concurrency, 1)}
    return flags


# --- init ---------------------------------------------------------------------------------------


@app.command()
def init(
    run: Annotated[Path, typer.Argument(help="Run directory to create, e.g. runs/my-run.")],
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML config (see README).")] = None,
    anchor: Annotated[list[str] | None, typer.Option(
        "--anchor", metavar="[ID=][WEIGHT:]TEXT", help="Anchor criterion as [ID=][WEIGHT:]TEXT, repeatable; prefix TEXT with 'pitfall:' for a penalty.")] = None,
    goal: Annotated[str | None, typer.Option("--goal", help="High-level training goal.")] = None,
    model_size: Annotated[str | None, typer.Option("--model-size", help="Policy model size, e.g. 7B.")] = None,
    total_steps: Annotated[int | None, typer.Option("--total-steps", min=1, help="Total training steps.")] = None,
    per_instance: Annotated[bool, typer.Option("--per-instance", help="Keep rubrics, summaries and updates per input instance.")] = False,
    instance_rubrics: Annotated[Path | None, typer.Option("--instance-rubrics", help="JSONL of predefined rubrics: {\"instance_id\", \"adaptive\": [...], \"anchors\": [...]?} per line.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Create a run directory: manifest (resolved config, no secrets) and the step-0 rubric."""
    with _errors():
        from amaris_cli.display import emit_json, err
        from amaris_cli.runinit import init_run, parse_anchor_flags

        flags: dict[str, Any] = {}
        training = {k: v for k, v in (("goal", goal), ("model_size", model_size), ("total_steps", total_steps)) if v is not None}
        if training:
            flags["training"] = training
        if anchor:
            flags["rubric"] = {"anchors": parse_anchor_flags(anchor)}
        if per_instance:
            flags["pipeline"] = {"per_instance": True}
        rubric = init_run(Path(run), config, flags, instance_rubrics)
        if json_out:
            emit_json({"run": str(run), "rubric": rubric.model_dump(mode="json")})
        else:
            err.print(f"initialized {run}: {len(rubric.anchors)} anchor and {len(rubric.adaptive)} adaptive criteria")


# --- score ---------------------------------------------------------------------------------------

OnErrorOpt = Annotated[OnError | None, typer.Option(
    "--on-error", help="What a rollout that cannot be judged or analyzed does: fail (exit 4 once the file is written; "
    "the step goes no further), skip (left failed, reward null), neutral (left failed with pipeline.neutral_reward "
    "as its reward). Default: pipeline.on_error (fail).")]
WaitOpt = Annotated[float, typer.Option(
    "--wait", min=0, metavar="SECONDS", help="Seconds to wait for another process this one depends on (an evolution still writing the "
    "rubric version or history needed, a score of the same step, the memory's writer).")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Recompute even when the output is up to date with its inputs (requests that did not change "
    "are still answered from calls.jsonl).")]
ConcurrencyOpt = Annotated[int | None, typer.Option("--concurrency", min=1, help="Requests in flight for this stage's agent (and overall).")]
DEFAULT_WAIT = 3600.0


class RewardFormat(StrEnum):
    jsonl = "jsonl"
    list = "list"


@app.command()
def score(
    rollouts: Annotated[Path, typer.Argument(help="Rollouts JSONL (canonical or trainer shapes, see README).")],
    run: RunOpt,
    step: StepOpt,
    map_: Annotated[list[str] | None, typer.Option("--map", metavar="FIELD=SOURCE", help="FIELD=SOURCE for a field under another name (dotted path), repeatable.")] = None,
    rubric_version: Annotated[int | None, typer.Option("--rubric-version", min=0, help="Score with exactly this rubric version.")] = None,
    lag: Annotated[int, typer.Option("--lag", min=0, help="Score step t with rubric version t - LAG exactly (the newest version <= t - LAG "
                                     "the run will have), waiting while the evolution that writes it runs.")] = 0,
    rewards_out: Annotated[Path | None, typer.Option("--rewards", metavar="FILE", help="Also write the step's rewards for the trainer to this file (atomically).")] = None,
    rewards_format: Annotated[RewardFormat, typer.Option("--rewards-format", help="jsonl: {id, reward, status} per rollout; list: a JSON list in input order.")] = RewardFormat.jsonl,
    on_error: OnErrorOpt = None,
    concurrency: ConcurrencyOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace rollouts already stored for this step (everything derived from them becomes stale).")] = False,
    wait: WaitOpt = DEFAULT_WAIT,
    group_by: GroupByOpt = None,
    judge: JudgeOpt = Judge.endpoint,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Judge every rollout of one step against the run's rubric: writes steps/N/rollouts.jsonl and scores.jsonl."""
    with _errors():
        from amaris_cli.commands import run_score

        flags = _merge(_agent_flags(model, base_url, concurrency, "scorer", rpm, tpm),
                       {"pipeline": {"group_by": group_by.value}} if group_by else {})
        run_score(rollouts, run, step, mapping_items=map_ or [], rubric_version=rubric_version, lag=lag,
                  on_error=on_error.value if on_error else None, force=force, judge=judge.value, flags=flags,
                  wait=wait, rewards_out=rewards_out, rewards_format=rewards_format.value, json_out=json_out, quiet=quiet)


# --- analyze / summarize / update / evolve / loop -------------------------------------------------

StaticOpt = Annotated[bool | None, typer.Option("--static/--no-static", help="Static retrieval: the K most recent steps.")]
StaticKOpt = Annotated[int | None, typer.Option("--static-steps", min=0, help="K for static retrieval (default 5).")]
DynamicOpt = Annotated[bool | None, typer.Option("--dynamic/--no-dynamic", help="Dynamic retrieval: LLM-written queries over the memory.")]
PerQueryOpt = Annotated[int | None, typer.Option("--results-per-query", min=1, help="Memory hits per query (default 3).")]
MaxQueriesOpt = Annotated[int | None, typer.Option("--max-queries", min=1, help="Maximum queries (default: adaptive, up to 8).")]
MemoryUrlOpt = Annotated[str | None, typer.Option("--memory-url", metavar="URL", help="Use a shared Chroma server (http://HOST:PORT, `chroma run`) instead of the run's embedded memory.")]
ChunkOpt = Annotated[int | None, typer.Option("--chunk-size", min=1, help="Analyses per summarizer call.")]
UpdateEveryOpt = Annotated[int | None, typer.Option("--update-every", min=1, help="Update the rubric every N steps (summaries every step).")]


def _memory_flags(url: str | None) -> dict[str, Any]:
    return {"memory": {"url": url}} if url else {}


def _retrieval_flags(static: bool | None, static_steps: int | None, dynamic: bool | None, per_query: int | None,
                     max_queries: int | None) -> dict[str, Any]:
    memory = {k: v for k, v in (("static", static), ("static_steps", static_steps), ("dynamic", dynamic),
                                ("results_per_query", per_query), ("max_queries", max_queries)) if v is not None}
    return {"memory": memory} if memory else {}


def _pipeline_flags(**values: Any) -> dict[str, Any]:
    pipeline = {k: v for k, v in values.items() if v is not None}
    return {"pipeline": pipeline} if pipeline else {}


def _merge(*parts: dict[str, Any]) -> dict[str, Any]:
    from amaris_cli.config import deep_merge

    out: dict[str, Any] = {}
    for p in parts:
        out = deep_merge(out, p)
    return out


@app.command()
def analyze(
    run: RunOpt,
    step: StepOpt,
    on_error: OnErrorOpt = None,
    concurrency: ConcurrencyOpt = None,
    force: ForceOpt = False,
    wait: WaitOpt = DEFAULT_WAIT,
    judge: JudgeOpt = Judge.endpoint,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Analyze every scored rollout of a step (hacking, stage performance, rubric judgement): writes analyses.jsonl."""
    with _errors():
        from amaris_cli.commands import run_analyze

        run_analyze(run, step, on_error=on_error.value if on_error else None, force=force, judge=judge.value,
                    flags=_agent_flags(model, base_url, concurrency, "analyzer", rpm, tpm), wait=wait, json_out=json_out, quiet=quiet)


@app.command()
def summarize(
    run: RunOpt,
    step: StepOpt,
    chunk_size: ChunkOpt = None,
    memory_url: MemoryUrlOpt = None,
    concurrency: ConcurrencyOpt = None,
    force: ForceOpt = False,
    on_error: OnErrorOpt = None,
    wait: WaitOpt = DEFAULT_WAIT,
    judge: JudgeOpt = Judge.endpoint,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Summarize a step's analyses (in chunks when large) and store them in the memory: writes summary.json and stats.json."""
    with _errors():
        from amaris_cli.commands import run_summarize

        flags = _merge(_agent_flags(model, base_url, concurrency, "summarizer", rpm, tpm),
                       _pipeline_flags(chunk_size=chunk_size), _memory_flags(memory_url))
        run_summarize(run, step, force=force, judge=judge.value, flags=flags, wait=wait, json_out=json_out, quiet=quiet,
                      on_error=on_error.value if on_error else None)


@app.command()
def update(
    run: RunOpt,
    step: StepOpt,
    static: StaticOpt = None,
    static_steps: StaticKOpt = None,
    dynamic: DynamicOpt = None,
    results_per_query: PerQueryOpt = None,
    max_queries: MaxQueriesOpt = None,
    memory_url: MemoryUrlOpt = None,
    concurrency: ConcurrencyOpt = None,
    force: ForceOpt = False,
    on_error: OnErrorOpt = None,
    wait: WaitOpt = DEFAULT_WAIT,
    judge: JudgeOpt = Judge.endpoint,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Retrieve history and rewrite the adaptive criteria: writes retrieval.json, update.json and rubrics/step-(N+1)."""
    with _errors():
        from amaris_cli.commands import run_update

        flags = _merge(_agent_flags(model, base_url, concurrency, "updater", rpm, tpm),
                       _retrieval_flags(static, static_steps, dynamic, results_per_query, max_queries),
                       _memory_flags(memory_url))
        run_update(run, step, force=force, judge=judge.value, flags=flags, wait=wait, json_out=json_out, quiet=quiet,
                   on_error=on_error.value if on_error else None)


@app.command()
def evolve(
    run: RunOpt,
    step: StepOpt,
    update_: Annotated[bool | None, typer.Option("--update/--no-update", help="Update the rubric after this step (default: every pipeline.update_every steps).")] = None,
    rescore: Annotated[bool, typer.Option("--rescore", help="After the update, score the step again with the new rubric (rescores.jsonl).")] = False,
    static: StaticOpt = None,
    static_steps: StaticKOpt = None,
    dynamic: DynamicOpt = None,
    results_per_query: PerQueryOpt = None,
    max_queries: MaxQueriesOpt = None,
    chunk_size: ChunkOpt = None,
    update_every: UpdateEveryOpt = None,
    memory_url: MemoryUrlOpt = None,
    on_error: OnErrorOpt = None,
    concurrency: ConcurrencyOpt = None,
    force: ForceOpt = False,
    wait: WaitOpt = DEFAULT_WAIT,
    judge: JudgeOpt = Judge.endpoint,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Analyze, summarize and update one step in one process, to run in the background (`&`) beside training.

    Evolutions run in step order: this waits (saying so) while an earlier step's evolution is still running,
    and while a `score` of this step is. Re-run the same command to resume."""
    with _errors():
        from amaris_cli.commands import run_evolve

        flags = _merge(_agent_flags(model, base_url, concurrency, "default", rpm, tpm),
                       _retrieval_flags(static, static_steps, dynamic, results_per_query, max_queries),
                       _pipeline_flags(chunk_size=chunk_size, update_every=update_every), _memory_flags(memory_url))
        run_evolve(run, step, update=update_, rescore=rescore, on_error=on_error.value if on_error else None,
                   force=force, judge=judge.value, flags=flags, wait=wait, json_out=json_out, quiet=quiet)


@app.command()
def loop(
    source: Annotated[Path, typer.Argument(help="A directory of per-step JSONL files (12.jsonl, step-012.jsonl) or one JSONL whose lines carry `step`.")],
    run: RunOpt,
    steps: Annotated[str | None, typer.Option("--steps", metavar="START:END", help="Inclusive step range START:END (either side may be empty).")] = None,
    map_: Annotated[list[str] | None, typer.Option("--map", metavar="FIELD=SOURCE", help="FIELD=SOURCE for a field under another name, repeatable.")] = None,
    update_every: UpdateEveryOpt = None,
    lag: Annotated[int, typer.Option("--lag", min=0, help="Score step t with the newest rubric version <= t - LAG (asynchronous training).")] = 0,
    rescore: Annotated[bool, typer.Option("--rescore", help="After each update, re-score the step with the new rubric (rescores.jsonl).")] = False,
    static: StaticOpt = None,
    static_steps: StaticKOpt = None,
    dynamic: DynamicOpt = None,
    results_per_query: PerQueryOpt = None,
    max_queries: MaxQueriesOpt = None,
    chunk_size: ChunkOpt = None,
    memory_url: MemoryUrlOpt = None,
    group_by: GroupByOpt = None,
    on_error: OnErrorOpt = None,
    concurrency: ConcurrencyOpt = None,
    wait: WaitOpt = DEFAULT_WAIT,
    judge: JudgeOpt = Judge.endpoint,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Run score -> analyze -> summarize -> update over many steps. Re-run the same command to resume."""
    with _errors():
        from amaris_cli.commands import run_loop_command

        flags = _merge(_agent_flags(model, base_url, concurrency, "default", rpm, tpm),
                       _retrieval_flags(static, static_steps, dynamic, results_per_query, max_queries),
                       _pipeline_flags(update_every=update_every, chunk_size=chunk_size,
                                       group_by=group_by.value if group_by else None), _memory_flags(memory_url))
        run_loop_command(source, run, step_range=steps, mapping_items=map_ or [], lag=lag, rescore=rescore,
                         on_error=on_error.value if on_error else None, judge=judge.value, flags=flags, wait=wait,
                         json_out=json_out, quiet=quiet)


@app.command()
def replay(
    source: Annotated[Path, typer.Argument(help="The recorded run to re-execute.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="New run directory for the replay (re-run the same command to resume).")],
    offline: Annotated[bool, typer.Option("--offline", help="Never call a model (no endpoint needed): a request the record lacks is an error.")] = False,
    update_every: Annotated[int | None, typer.Option("--update-every", min=1, help="Override: update every N steps.")] = None,
    lag: Annotated[int | None, typer.Option("--lag", min=0, help="Override the recorded lag.")] = None,
    rescore: Annotated[bool | None, typer.Option("--rescore/--no-rescore", help="Override the recorded rescore mode.")] = None,
    static: StaticOpt = None,
    static_steps: StaticKOpt = None,
    dynamic: DynamicOpt = None,
    results_per_query: PerQueryOpt = None,
    max_queries: MaxQueriesOpt = None,
    memory_url: MemoryUrlOpt = None,
    judge: Annotated[Judge | None, typer.Option("--judge", help="Judge for requests the record lacks (default: as recorded).")] = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Re-execute a recorded run; requests the record holds are answered from its calls.jsonl (no model call, no cost).
    The source is only read."""
    with _errors():
        from amaris_cli.commands import run_replay

        flags = _merge(_agent_flags(model, base_url, rpm=rpm, tpm=tpm),
                       _retrieval_flags(static, static_steps, dynamic, results_per_query, max_queries),
                       _pipeline_flags(update_every=update_every), _memory_flags(memory_url))
        run_replay(source, out, flags=flags, judge=judge.value if judge else None, lag=lag, rescore=rescore,
                   offline=offline, json_out=json_out, quiet=quiet)


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Run directories to put side by side.")],
    json_out: JsonOpt = False,
) -> None:
    """Runs side by side: mean reward per step, rubric size, strategies, tokens, calls made vs reused."""
    with _errors():
        from amaris_cli.commands import run_compare

        run_compare(runs, json_out)


@app.command()
def hackbench(
    source: Annotated[Path | None, typer.Argument(help="Honest rollouts JSONL (each answer the control of its hacked variants), "
                                                  "a labelled file with --labelled, or School of Reward Hacks lines; "
                                                  "default: the shipped math examples.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory: the benchmark's run (OUT/run), its rollouts and "
                                      "OUT/hackbench.json (re-run the same command to resume).")] = Path("runs/hackbench"),
    config: Annotated[Path | None, typer.Option("--config", "-c", help="The amaris TOML whose rubric judges the answers "
                                                "(needed with SOURCE; default for the shipped examples: their math rubric).")] = None,
    updates: Annotated[int, typer.Option("--updates", "-k", min=0, help="K: rubric updates before the second measurement.")] = 3,
    families: Annotated[str | None, typer.Option("--families", metavar="NAME,...", help="Only these hack families (default: all 12).")] = None,
    labelled: Annotated[bool, typer.Option("--labelled", help="SOURCE is labelled: rollout lines with a label field "
                                           "(honest/control, or the hack's name).")] = False,
    label_field: Annotated[str, typer.Option("--label-field", help="The label's field in a labelled file.")] = "label",
    map_: Annotated[list[str] | None, typer.Option("--map", metavar="FIELD=SOURCE", help="FIELD=SOURCE for a field under another name, repeatable.")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Only the first N answers (or lines) of SOURCE.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap intervals.")] = 0,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=0, help="Resamples per 95% interval.")] = 2000,
    static: StaticOpt = None,
    dynamic: DynamicOpt = None,
    on_error: Annotated[OnError, typer.Option(
        "--on-error", help="What a rollout that cannot be judged does: skip (default: left out of the figures and "
        "counted), neutral, or fail (the benchmark stops, exit 4).")] = OnError.skip,
    concurrency: ConcurrencyOpt = None,
    wait: WaitOpt = DEFAULT_WAIT,
    judge: JudgeOpt = Judge.endpoint,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """A labelled reward-hacking benchmark: per hack family, the analyzer's precision and recall and the hack gain
    at the initial rubric (they measure the judge), the gain after K updates and the honest drift (they measure
    amaris), with 95% bootstrap intervals, and the calls and tokens spent."""
    with _errors():
        from amaris_cli.commands import run_hackbench

        flags = _merge(_agent_flags(model, base_url, concurrency, "default", rpm, tpm),
                       _retrieval_flags(static, None, dynamic, None, None))
        run_hackbench(source, out, config=config, updates=updates,
                      families=[f.strip() for f in families.split(",") if f.strip()] if families else None,
                      labelled=labelled, label_field=label_field, mapping_items=map_ or [], limit=limit, seed=seed,
                      bootstrap=bootstrap, on_error=on_error.value, judge=judge.value,
                      flags=flags, wait=wait, json_out=json_out, quiet=quiet)


@app.command()
def rewards(
    run: RunOpt,
    step: StepOpt,
    format_: Annotated[RewardFormat, typer.Option("--format", help="jsonl: {id, reward, status} per rollout; list: a JSON list in input order.")] = RewardFormat.jsonl,
    rescored: Annotated[bool, typer.Option("--rescored", help="Rewards from rescores.jsonl (the step's own update's rubric).")] = False,
    failed_as: Annotated[float | None, typer.Option("--failed-as", help="Reward for rollouts that could not be judged and have none (default null; under --on-error neutral they have the neutral reward).")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write to this file (atomically) instead of stdout.")] = None,
) -> None:
    """Write a step's rewards in shapes trainers consume."""
    with _errors():
        from amaris_cli.commands import run_rewards

        run_rewards(run, step, format_.value, rescored, failed_as, output)


@app.command()
def inspect(
    run: Annotated[Path, typer.Argument(help="Run directory.")],
    step: Annotated[int | None, typer.Option("--step", "-s", help="Drill into one step: criteria statistics, update, retrieval.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """What a run holds: rewards per step, failures, updates, rubric evolution, hacking patterns, memory, tokens and cost."""
    with _errors():
        from amaris_cli.commands import run_inspect

        run_inspect(run, step, json_out)


@app.command()
def report(
    run: Annotated[Path, typer.Argument(help="Run directory.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="HTML file to write (default RUN/report.html); PNG plots go next to it.")] = None,
) -> None:
    """A self-contained HTML report with plots (reward, criteria pass rates, rubric size, hacking) and PNG exports."""
    with _errors():
        from amaris_cli.report import write_report
        from amaris_cli.rundir import RunDir

        for path in write_report(RunDir(run), out or run / "report.html"):
            typer.echo(str(path))


memory_app = typer.Typer(help="Maintain and query the evaluation memory.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")


@memory_app.command("rebuild")
def memory_rebuild(run: RunOpt, memory_url: MemoryUrlOpt = None, json_out: JsonOpt = False) -> None:
    """Re-create the vector index from the run's files (the source of truth)."""
    with _errors():
        from amaris_cli.commands import run_memory_rebuild

        run_memory_rebuild(run, json_out, _memory_flags(memory_url))


@memory_app.command("search")
def memory_search(
    run: RunOpt,
    text: Annotated[str, typer.Argument(help="What to look for.")],
    n: Annotated[int, typer.Option("-n", min=1, help="Number of hits.")] = 5,
    before_step: Annotated[int | None, typer.Option("--before-step", help="Only entries of steps < this (as an update of that step sees them).")] = None,
    memory_url: MemoryUrlOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show what dynamic retrieval would return for a query."""
    with _errors():
        from amaris_cli.commands import run_memory_search

        run_memory_search(run, text, n, before_step, json_out, _memory_flags(memory_url))


# --- serve ----------------------------------------------------------------------------------------


class ServeMode(StrEnum):
    async_ = "async"
    sync = "sync"


@app.command()
def serve(
    run: RunOpt,
    host: Annotated[str, typer.Option("--host", help="Address to bind (127.0.0.1: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=0, max=65535, help="Port (0 picks a free one).")] = 8780,
    mode: Annotated[ServeMode, typer.Option(
        "--mode", help="async: step t is scored with rubric version t-1 (as `score --lag 1`) and /score answers at once; "
        "sync: step t waits for the evolution of step t-1 (lag 0) and /score answers with the value re-scored by "
        "the rubric the step's own evolution wrote (as `evolve --rescore`).")] = ServeMode.async_,
    rollouts_per_step: Annotated[int | None, typer.Option(
        "--rollouts-per-step", min=1, help="Complete a step by itself once it holds N rollouts (else POST /complete).")] = None,
    update_every: UpdateEveryOpt = None,
    memory_url: MemoryUrlOpt = None,
    on_error: OnErrorOpt = None,
    concurrency: ConcurrencyOpt = None,
    wait: WaitOpt = DEFAULT_WAIT,
    judge: JudgeOpt = Judge.endpoint,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
) -> None:
    """Serve the AMARIS reference server's API over a run directory: POST /score per rollout, POST /complete,
    GET /rubric_status/wait. Each complete step is written as `score` writes it and evolved in the background
    (`amaris evolve`). Stop with Ctrl-C or SIGTERM; a restart goes on where it stopped."""
    with _errors():
        from amaris_cli.display import err
        from amaris_cli.rundir import RunDir
        from amaris_cli.serve.core import ServeConfig
        from amaris_cli.serve.server import run_server

        evolve_options: list[str] = []
        for flag, value in (("--model", model), ("--base-url", base_url), ("--update-every", update_every),
                            ("--memory-url", memory_url), ("--on-error", on_error.value if on_error else None)):
            if value is not None:
                evolve_options += [flag, str(value)]
        lag = "t-1 (as `score --lag 1`)" if mode == ServeMode.async_ else "t, after the evolution of step t-1 (lag 0)"

        def say(text: str) -> None:
            err.print(text, markup=False, highlight=False, soft_wrap=True)

        def listening(url: str) -> None:
            # One plain, unwrapped line: scripts read the URL from it.
            print(f"amaris serve listening: {url} (run {run}, {mode.value} mode: step t is scored with rubric "
                  f"version {lag})", file=sys.stderr, flush=True)

        config = ServeConfig(run=RunDir(run), mode=mode.value, rollouts_per_step=rollouts_per_step,  # type: ignore[arg-type]
                             judge=judge.value, score_flags=_agent_flags(model, base_url, concurrency),  # type: ignore[arg-type]
                             evolve_options=evolve_options, on_error=on_error.value if on_error else None,
                             wait=wait, say=say)
        raise typer.Exit(run_server(config, host, port, listening))


# --- sim-judge ----------------------------------------------------------------------------------


@app.command("sim-judge")
def sim_judge(
    port: Annotated[int, typer.Option("--port", "-p", help="Port (0 picks a free one).")] = 8765,
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    latency: Annotated[float, typer.Option("--latency", min=0, metavar="SECONDS", help="Seconds added to every answer.")] = 0.0,
    fault_rate: Annotated[float, typer.Option("--fault-rate", min=0, max=1, help="Share of requests that get a fault.")] = 0.0,
    faults: Annotated[str | None, typer.Option("--faults", metavar="KIND,...", help=faults_help())] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the fault draw.")] = 0,
) -> None:
    """Run the rule-based sim-judge: an OpenAI-compatible server for trying amaris without a model."""
    with _errors():
        from amaris_cli.commands import run_sim_judge

        run_sim_judge(host, port, latency, fault_rate, faults, seed)


def main() -> None:
    try:
        app()
    except BrokenPipeError:
        sys.exit(1)
