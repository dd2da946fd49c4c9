"""The `amaris` command line: parses flags, prints, and calls the jobs. No logic lives here.

A pipeline command's flags are the fields of its options class (options.py), declared once there and
turned into typer parameters by `command`; the body gets the options object whole and hands it to its
job, as a Python user would. Heavy modules (openai, chromadb, onnxruntime) are imported inside the
commands that need them, so `amaris --help` stays fast.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import fields
from enum import StrEnum
from inspect import Parameter, Signature
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from amaris_cli import __version__
from amaris_cli.clihelp import install as _plain_help
from amaris_cli.options import (
    AnalyzeOptions,
    EvolveOptions,
    HackbenchOptions,
    LoopOptions,
    Memory,
    Opt,
    Options,
    ReplayOptions,
    RewardFormat,
    ScoreOptions,
    ServeOptions,
    SummarizeOptions,
    UpdateOptions,
    plain_type,
    required,
)
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

JsonOpt = Annotated[bool, typer.Option("--json", help="Print a machine-readable result on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or tables on stderr.")]
RunOpt = Annotated[Path, typer.Option("--run", "-r", help="Run directory (created by `amaris init`).")]
StepOpt = Annotated[int, typer.Option("--step", "-s", min=0, help="Training step number.")]
FIRST = ("source", "rollouts", "out", "run", "step")  # shown first in --help, in this order
TERMINATED = 143  # 128 + SIGTERM
_terminated = False  # this command got SIGTERM (main resets it: the serve worker runs many commands)
_in_body = False  # a command's body runs (inside `_errors`); outside it click parses arguments or has finished


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

    global _in_body
    _in_body = True
    try:
        yield
    except AmarisError as exc:
        from rich.text import Text

        # The message is plain text: brackets in it (e.g. [[rubric.anchors]]) are not markup.
        err.print(Text.assemble(("error: ", "bold red"), str(exc)), soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        _say_stopped("terminated" if _terminated else "interrupted")
        raise typer.Exit(TERMINATED if _terminated else 130) from None
    except OSError as exc:  # disk full, read-only or unwritable directory, ...: one line, not a traceback
        from rich.text import Text

        where = f"{exc.filename}: " if exc.filename else ""
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        err.print(Text.assemble(("error: ", "bold red"), f"{where}{reason}"), soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        _in_body = False


def _say_stopped(said: str) -> None:
    from amaris_cli.display import err

    err.print(f"[yellow]{said}[/]: re-run the same command to continue where it stopped", markup=True)


def _choice(kind: type[StrEnum]) -> dict[str, Any]:
    """An enum option's parser: typer 0.29 checks an enum's value in a pydantic validator and prints its error as
    "Invalid value for '--judge': Value error, 'sims' is not one of ...". Parsed here, the error is the sentence."""
    names = [member.value for member in kind]

    def parse(value: Any) -> StrEnum:
        try:
            return kind(value)
        except ValueError:
            from pydantic_core import PydanticCustomError  # only when the value is bad: kept out of start-up

            said = f"{str(value)!r} is not one of {', '.join(map(repr, names))}."
            raise PydanticCustomError("choice", "{said}", {"said": said}) from None

    return {"parser": parse, "metavar": "|".join(names)}


def _parameter(name: str, decl: Opt, annotation: Any, default: Any) -> Parameter:
    extra: dict[str, Any] = {k: v for k, v in (("min", decl.min), ("max", decl.max)) if v is not None}
    kind = plain_type(annotation)
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        extra.update(_choice(kind))
    metavar = decl.metavar or extra.pop("metavar", None)
    info = (typer.Argument(help=decl.help, metavar=metavar) if decl.positional else
            typer.Option(*decl.flags, help=decl.help, metavar=metavar, **extra))
    return Parameter(name, Parameter.KEYWORD_ONLY, default=default,
                             annotation=Annotated[annotation, info])


def command(options_cls: type[Options], name: str | None = None, output: bool = True) -> Callable[..., Any]:
    """Register `body(options, json_out, quiet)` as a command whose flags are the fields of `options_cls`
    (and --json/--quiet when `output`)."""

    def register(body: Callable[..., None]) -> Callable[..., None]:
        declared = options_cls.declarations()

        def place(name: str) -> tuple[int, int]:
            # FIRST, then the command's own options, then the shared groups'
            owner = next(i for i, c in enumerate(options_cls.__mro__) if name in c.__dict__.get("__annotations__", {}))
            return (FIRST.index(name) if name in FIRST else len(FIRST), owner)

        order = sorted(declared, key=place)
        params = []
        by_name = {f.name: f for f in fields(options_cls)}
        for field_name in order:
            f = by_name[field_name]
            params.append(_parameter(field_name, declared[field_name], f.type, Parameter.empty if required(f) else f.default))
        if output:
            params += [Parameter("json_out", Parameter.KEYWORD_ONLY, default=False, annotation=JsonOpt),
                       Parameter("quiet", Parameter.KEYWORD_ONLY, default=False, annotation=QuietOpt)]

        def cli_command(**values: Any) -> None:
            flags = {k: values.pop(k) for k in ("json_out", "quiet") if k in values}
            with _errors():
                body(options_cls(**values), **flags)

        cli_command.__signature__ = Signature(params)  # type: ignore[attr-defined]
        cli_command.__annotations__ = {p.name: p.annotation for p in params}
        cli_command.__doc__, cli_command.__name__ = body.__doc__, body.__name__
        app.command(name)(cli_command)
        return body

    return register


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


# --- the pipeline ---------------------------------------------------------------------------------


@command(ScoreOptions)
def score(options: ScoreOptions, json_out: bool, quiet: bool) -> None:
    """Judge every rollout of one step against the run's rubric: writes steps/N/rollouts.jsonl and scores.jsonl."""
    from amaris_cli.commands import run_score

    run_score(options, json_out, quiet)


@command(AnalyzeOptions)
def analyze(options: AnalyzeOptions, json_out: bool, quiet: bool) -> None:
    """Analyze every scored rollout of a step (hacking, stage performance, rubric judgement): writes analyses.jsonl."""
    from amaris_cli.commands import run_analyze

    run_analyze(options, json_out, quiet)


@command(SummarizeOptions)
def summarize(options: SummarizeOptions, json_out: bool, quiet: bool) -> None:
    """Summarize a step's analyses (in chunks when large) and store them in the memory: writes summary.json and stats.json."""
    from amaris_cli.commands import run_summarize

    run_summarize(options, json_out, quiet)


@command(UpdateOptions)
def update(options: UpdateOptions, json_out: bool, quiet: bool) -> None:
    """Retrieve history and rewrite the adaptive criteria: writes retrieval.json, update.json and rubrics/step-(N+1)."""
    from amaris_cli.commands import run_update

    run_update(options, json_out, quiet)


@command(EvolveOptions)
def evolve(options: EvolveOptions, json_out: bool, quiet: bool) -> None:
    """Analyze, summarize and update one step in one process, to run in the background (`&`) beside training.

    Evolutions run in step order: this waits (saying so) while an earlier step's evolution is still running,
    and while a `score` of this step is. Re-run the same command to resume."""
    from amaris_cli.commands import run_evolve

    run_evolve(options, json_out, quiet)


@command(LoopOptions)
def loop(options: LoopOptions, json_out: bool, quiet: bool) -> None:
    """Run score -> analyze -> summarize -> update over many steps. Re-run the same command to resume."""
    from amaris_cli.commands import run_loop_command

    run_loop_command(options, json_out, quiet)


@command(ReplayOptions)
def replay(options: ReplayOptions, json_out: bool, quiet: bool) -> None:
    """Re-execute a recorded run; requests the record holds are answered from its calls.jsonl (no model call, no cost).
    The source is only read."""
    from amaris_cli.commands import run_replay

    run_replay(options, json_out, quiet)


# --- readers ------------------------------------------------------------------------------------


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Run directories to put side by side.")],
    json_out: JsonOpt = False,
) -> None:
    """Runs side by side: mean reward per step (with its failed rollouts, and whether the runs' means are
    comparable), the last rubric's size, update strategies, edits, reversals, tokens, calls made vs reused."""
    with _errors():
        from amaris_cli.commands import run_compare

        run_compare(runs, json_out)


@command(HackbenchOptions)
def hackbench(options: HackbenchOptions, json_out: bool, quiet: bool) -> None:
    """A labelled reward-hacking benchmark: per hack family, the analyzer's precision and recall and the hack gain
    at the initial rubric (they measure the judge), the gain after K updates and the honest drift (they measure
    amaris), with 95% bootstrap intervals, and the calls and tokens spent."""
    from amaris_cli.commands import run_hackbench

    run_hackbench(options, json_out, quiet)


def _finite_reward(value: float | None) -> float | None:
    # JSON has no NaN or infinity: such a reward was written as null, where a number was asked for
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"a reward must be a finite number, got {value}")
    return value


@app.command()
def rewards(
    run: RunOpt,
    step: StepOpt,
    format_: Annotated[RewardFormat, typer.Option("--format", **_choice(RewardFormat), help="jsonl: {id, reward, status} per rollout; list: a JSON list in input order.")] = RewardFormat.jsonl,
    rescored: Annotated[bool, typer.Option("--rescored", help="Rewards from rescores.jsonl (the step's own update's rubric).")] = False,
    failed_as: Annotated[float | None, typer.Option("--failed-as", callback=_finite_reward, help="Reward for rollouts that could not be judged and have none (default null; under --on-error neutral they have the neutral reward).")] = None,
    output: Annotated[Path | None, typer.Option("--out", "--output", "-o", metavar="FILE", help="Write to this file (atomically) instead of stdout.")] = None,
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
    json_out: JsonOpt = False,
) -> None:
    """A self-contained HTML report with plots (reward, criteria pass rates, rubric size, hacking) and PNG exports.
    Prints the paths it wrote, one a line (with --json: {"report", "figures"})."""
    with _errors():
        from amaris_cli.display import emit_json
        from amaris_cli.report import write_report
        from amaris_cli.rundir import RunDir

        html, *figures = write_report(RunDir(run), out or run / "report.html")
        if json_out:
            emit_json({"report": str(html), "figures": [str(path) for path in figures]})
        else:
            for path in (html, *figures):
                typer.echo(str(path))


memory_app = typer.Typer(help="Maintain and query the evaluation memory.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
MemoryUrlOpt = Annotated[str | None, typer.Option("--memory-url", metavar="URL", help=Memory.declarations()["memory_url"].help)]


@memory_app.command("rebuild")
def memory_rebuild(run: RunOpt, memory_url: MemoryUrlOpt = None, json_out: JsonOpt = False) -> None:
    """Re-create the vector index from the run's files (the source of truth)."""
    with _errors():
        from amaris_cli.commands import run_memory_rebuild

        run_memory_rebuild(run, json_out, Memory(memory_url=memory_url))


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

        run_memory_search(run, text, n, before_step, json_out, Memory(memory_url=memory_url))


# --- serve ----------------------------------------------------------------------------------------


@command(ServeOptions, output=False)
def serve(options: ServeOptions) -> None:
    """Serve the AMARIS reference server's API over a run directory: POST /score per rollout, POST /complete,
    GET /rubric_status/wait. Each complete step is written as `score` writes it and evolved in the background
    (`amaris evolve`). Stop with Ctrl-C or SIGTERM; a restart goes on where it stopped."""
    from amaris_cli.commands import run_serve

    raise typer.Exit(run_serve(options))


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


def _interrupt() -> None:
    raise KeyboardInterrupt


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (`kill`, `timeout`, a scheduler's preemption, CI) takes Ctrl-C's path; `_errors` then says it was
    terminated and exits 143. The SIGINT handler in place is called: asyncio's runner's while the event loop runs (it
    cancels the command's task, which cleans up; a second signal raises), Python's outside (KeyboardInterrupt). Not
    SIGINT sent again: a job a script starts with `&` ignores SIGINT, and would ignore SIGTERM too. There the running loop
    raises KeyboardInterrupt between two callbacks (raised here, it may land in any code, even a callback that swallows
    it) and the runner's close cancels the tasks, which clean up; outside the loop it is raised here."""
    global _terminated
    _terminated = True
    if not _in_body:  # click parses the arguments: it reads a KeyboardInterrupt as Ctrl-C (exit 130, no word)
        _say_stopped("terminated")
        raise SystemExit(TERMINATED)
    on_sigint = signal.getsignal(signal.SIGINT)
    if callable(on_sigint):
        on_sigint(signal.SIGINT, frame)
        return
    asyncio = sys.modules.get("asyncio")  # no loop runs where it was never imported
    try:
        loop = asyncio.get_running_loop() if asyncio is not None else None
    except RuntimeError:
        loop = None
    if loop is None:
        raise KeyboardInterrupt
    loop.call_soon_threadsafe(_interrupt)


def main() -> None:
    global _terminated
    _terminated = False
    # Installed only over the default (a parent that ignores SIGTERM keeps it ignored, as Python keeps an ignored
    # SIGINT) and in the main thread, and put back after: the serve worker calls main() per job. `serve` replaces it
    # while uvicorn serves.
    ours = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if ours:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        app()
    except BrokenPipeError:
        sys.exit(1)
    except Exception:  # noqa: BLE001 - an unexpected error (a bug): its traceback, as Python would print it
        import traceback

        from amaris_cli.terminal import terminal_safe

        # its message may carry a rollout's or an agent's text: nothing raw for the terminal (typer's printer
        # wrote an OSC 52 clipboard write or a screen clear in it as it was)
        sys.stderr.write(terminal_safe(traceback.format_exc()))
        sys.exit(1)
    finally:
        if ours:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
