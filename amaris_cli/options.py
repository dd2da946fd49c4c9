"""The options of each command, declared once, as typed objects.

Every option is a field of a pydantic model with an `Opt` in its metadata: the flag(s) a person types,
its help, and the config key it sets (a dotted path into the settings: flags are config paths, so the
TOML file, the environment and a flag are layers of the same key). Option groups (the judge, retrieval,
the failure policy, ...) are declared once and composed into one options class per command; the CLI
builds its flags from these declarations (cli.py), a Python user builds the same object and calls the
same job (jobs.py), and `amaris serve` serializes the object whole into its `amaris evolve` children
(`to_argv`), so no option can reach one path and miss another.

    ScoreOptions(rollouts=Path("r.jsonl"), run=Path("runs/x"), step=3, lag=1)   # what `amaris score ...` builds
    options.config_layer()   # {"agents": {...}, "pipeline": {...}}: the flags' layer of the settings
    options.to_argv()        # ["--run", "runs/x", "--step", "3", "--lag", "1", ...]: the same options as flags

They are frozen dataclasses, not pydantic models, for start-up: the CLI imports every declaration to
build its flags, and `amaris --help` must stay well under 0.25 s (pydantic models of them and of the
settings they would pull in cost 0.3 s). Typer validates the CLI's values; a Python caller's strings
are turned into the enum and path types here.
"""

# No `from __future__ import annotations`: the CLI reads the fields' types as objects.
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class Opt:
    """How one option is written on the command line and which config key(s) it sets.

    `flags`: the option's names (`"--static/--no-static"` for a boolean pair); none for a positional
    argument. `config`: dotted settings paths the value is written to (`{agent}` is the command's agent).
    `min`/`max`: bounds checked by the CLI as it parses."""

    help: str
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    config: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None

    @property
    def positional(self) -> bool:
        return not self.flags


def opt(default: Any, help: str, *flags: str, metavar: str | None = None, config: str | tuple[str, ...] = (),
        min: float | None = None, max: float | None = None) -> Any:
    """A dataclass field declaring one option (`default` MISSING: required)."""
    declared = Opt(help=help, flags=flags, metavar=metavar, config=(config,) if isinstance(config, str) else config,
                   min=min, max=max)
    return field(default=default, metadata={"opt": declared})


class Judge(StrEnum):
    endpoint = "endpoint"
    sim = "sim"
    auto = "auto"


class OnError(StrEnum):
    fail = "fail"
    skip = "skip"
    neutral = "neutral"


class GroupBy(StrEnum):
    none = "none"
    input = "input"


class RewardFormat(StrEnum):
    jsonl = "jsonl"
    list = "list"


class FailedStep(StrEnum):
    stop = "stop"
    carry = "carry"


class UpdateAt(StrEnum):
    last = "last"
    first = "first"


class ServeMode(StrEnum):
    async_ = "async"
    sync = "sync"


DEFAULT_WAIT = 3600.0
_COERCE = (Judge, OnError, FailedStep, GroupBy, RewardFormat, ServeMode, UpdateAt, Path)


@dataclass(frozen=True, kw_only=True)
class Options:
    """Base of every command's options: frozen, typed, and convertible to the settings' flag layer."""

    agent: ClassVar[str] = "default"  # the agent whose concurrency `--concurrency` sets

    def __post_init__(self) -> None:
        for f in fields(self):
            value, kind = getattr(self, f.name), plain_type(f.type)
            if kind in _COERCE and value is not None and not isinstance(value, kind):
                object.__setattr__(self, f.name, kind(value))

    @classmethod
    def declarations(cls) -> dict[str, Opt]:
        return {f.name: f.metadata["opt"] for f in fields(cls)}

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    def config_layer(self, only: Iterable[str] | None = None) -> dict[str, Any]:
        """The settings these options set (the `flags` layer of config.load_settings); `only`: of these fields."""
        layer: dict[str, Any] = {}
        wanted = set(only) if only is not None else None
        for name, decl in self.declarations().items():
            value = getattr(self, name)
            if value is None or not decl.config or (wanted is not None and name not in wanted):
                continue
            value = value.value if isinstance(value, StrEnum) else value
            for path in decl.config:
                *parents, key = path.format(agent=self.agent).split(".")
                table = layer
                for part in parents:
                    table = table.setdefault(part, {})
                table[key] = max(int(value), 1) if path == "llm.concurrency" else value
        return layer

    def to_argv(self) -> list[str]:
        """These options as the flags that would parse back into them (positional arguments first)."""
        positional: list[str] = []
        flags: list[str] = []
        for f in fields(self):
            decl, value = f.metadata["opt"], getattr(self, f.name)
            if decl.positional:
                positional.append(str(value))
                continue
            if value is None or value == f.default:
                continue
            first = decl.flags[0]
            if isinstance(value, bool):
                on, _, off = first.partition("/")
                flags.append(on if value else off)  # False differs from its default only for a --x/--no-x pair
            elif isinstance(value, list):
                for item in value:
                    flags += [first, str(item)]
            else:
                flags += [first, str(value.value if isinstance(value, StrEnum) else value)]
        return positional + flags


def plain_type(annotation: Any) -> Any:
    """`X` of `X`, `X | None`."""
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


def required(f: Any) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


# --- option groups ---------------------------------------------------------------------------------


def _run() -> Any:
    return opt(MISSING, "Run directory (created by `amaris init`).", "--run", "-r")


@dataclass(frozen=True, kw_only=True)
class Target(Options):
    run: Path = _run()
    step: int = opt(MISSING, "Training step number.", "--step", "-s", min=0)


def _model() -> Any:
    return opt(None, "Model for every agent (overrides config and env).", "--model", metavar="MODEL",
               config="agents.default.model")


def _base_url() -> Any:
    return opt(None, "OpenAI-compatible endpoint for every agent.", "--base-url", metavar="URL",
               config="agents.default.base_url")


def _per_minute(unit: str) -> Any:
    key = f"{unit}s_per_minute"
    return opt(None, f"The provider's {unit} limit for every agent, honoured before sending (agents.*.{key}).",
               f"--{unit}s-per-minute", metavar="N", config=f"agents.default.{key}", min=0)


@dataclass(frozen=True, kw_only=True)
class Endpoint(Options):
    """The judge: which one, and the model, endpoint and provider limits of every agent."""

    judge: Judge = opt(Judge.endpoint, "endpoint: the configured OpenAI-compatible endpoint; sim: the rule-based "
                       "sim-judge (no LLM); auto: the endpoint if a base URL names one (OPENAI_BASE_URL, --base-url, the "
                       "config; a key alone does not), else the sim-judge (said plainly).",
                       "--judge")
    model: str | None = _model()
    base_url: str | None = _base_url()
    requests_per_minute: float | None = _per_minute("request")
    tokens_per_minute: float | None = _per_minute("token")
    concurrency: int | None = opt(None, "Requests in flight for this stage's agent (and overall).", "--concurrency",
                                  min=1, config=("agents.{agent}.concurrency", "llm.concurrency"))


def _failure_policy(help: str, default: OnError | None = None) -> Any:
    return opt(default, help, "--on-error", config="pipeline.on_error")


@dataclass(frozen=True, kw_only=True)
class Failure(Options):
    on_error: OnError | None = _failure_policy(
        "What a rollout that cannot be judged or analyzed does: fail (exit 4 once the file is written; the step "
        "goes no further), skip (left failed, reward null), neutral (left failed with pipeline.neutral_reward as its "
        "reward). Default: pipeline.on_error (fail).")


@dataclass(frozen=True, kw_only=True)
class Waiting(Options):
    wait: float = opt(DEFAULT_WAIT, "Seconds to wait for another process this one depends on (an evolution still "
                      "writing the rubric version or history needed, a score of the same step, the memory's writer).",
                      "--wait", metavar="SECONDS", min=0)


@dataclass(frozen=True, kw_only=True)
class Recompute(Options):
    force: bool = opt(False, "Recompute even when the output is up to date with its inputs (requests that did not "
                      "change are still answered from calls.jsonl).", "--force")


@dataclass(frozen=True, kw_only=True)
class Memory(Options):
    memory_url: str | None = opt(None, "Use a shared Chroma server (http://HOST:PORT, `chroma run`) instead of the "
                                 "run's embedded memory.", "--memory-url", metavar="URL", config="memory.url")


@dataclass(frozen=True, kw_only=True)
class Retrieval(Memory):
    static: bool | None = opt(None, "Static retrieval: the K most recent steps.", "--static/--no-static",
                              config="memory.static")
    static_steps: int | None = opt(None, "K for static retrieval (default 5).", "--static-steps", min=0,
                                   config="memory.static_steps")
    dynamic: bool | None = opt(None, "Dynamic retrieval: LLM-written queries over the memory.",
                               "--dynamic/--no-dynamic", config="memory.dynamic")
    results_per_query: int | None = opt(None, "Memory hits per query (default 3).", "--results-per-query", min=1,
                                        config="memory.results_per_query")
    max_queries: int | None = opt(None, "Maximum queries (default: adaptive, up to 8).", "--max-queries", min=1,
                                  config="memory.max_queries")


def _chunk_size() -> Any:
    return opt(None, "Analyses per summarizer call.", "--chunk-size", min=1, config="pipeline.chunk_size")


def _update_every(help: str = "Update the rubric every N steps (summaries every step).") -> Any:
    return opt(None, help, "--update-every", min=1, config="pipeline.update_every")


def _update_at(help: str = "Which step of every --update-every updates: last (after steps N-1, 2N-1, ...) or first "
               "(at steps 0, N, 2N, ...: the reference's rubric_update_frequency).") -> Any:
    return opt(None, help, "--update-at", config="pipeline.update_at")


def _failed_step(default: Any = None, said: str = "pipeline.failed_step (stop)") -> Any:
    return opt(default, "Under --on-error fail, a step some of whose rollouts could not be judged or analyzed: stop (its "
               "evolution fails; score the step again) or carry (it evolves as skipped: nothing is learned from it and "
               f"the rubric is carried forward unchanged, so later steps go on). Default: {said}.",
               "--failed-step", config="pipeline.failed_step")


def _group_by() -> Any:
    return opt(None, "input: judge the rollouts that share a prompt in one call (RULER-style, identical outputs "
               "once); none: one call per rollout.", "--group-by", config="pipeline.group_by")


def _map(help: str = "FIELD=SOURCE for a field under another name (dotted path), repeatable.") -> Any:
    return opt(None, help, "--map", metavar="FIELD=SOURCE")


@dataclass(frozen=True, kw_only=True)
class StageOptions(Target, Failure, Recompute, Waiting, Endpoint):
    """What every stage command (analyze, summarize, update, evolve) takes."""


# --- one class per command --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ScoreOptions(Target, Failure, Waiting, Endpoint):
    agent: ClassVar[str] = "scorer"
    rollouts: Path = opt(MISSING, "Rollouts JSONL (canonical or trainer shapes, see README).")
    map: list[str] | None = _map()
    rubric_version: int | None = opt(None, "Score with exactly this rubric version.", "--rubric-version", min=0)
    lag: int = opt(0, "Score step t with rubric version t - LAG exactly (the newest version <= t - LAG the run will "
                   "have), waiting while the evolution that writes it runs.", "--lag", min=0)
    rewards: Path | None = opt(None, "Also write the step's rewards for the trainer to this file (atomically).",
                               "--rewards", metavar="FILE")
    rewards_format: RewardFormat = opt(RewardFormat.jsonl, "jsonl: {id, reward, status} per rollout; list: a JSON list "
                                       "in input order.", "--rewards-format")
    force: bool = opt(False, "Replace rollouts already stored for this step (everything derived from them becomes "
                      "stale).", "--force")
    group_by: GroupBy | None = _group_by()


@dataclass(frozen=True, kw_only=True)
class AnalyzeOptions(StageOptions):
    agent: ClassVar[str] = "analyzer"


@dataclass(frozen=True, kw_only=True)
class SummarizeOptions(StageOptions, Memory):
    agent: ClassVar[str] = "summarizer"
    chunk_size: int | None = _chunk_size()


@dataclass(frozen=True, kw_only=True)
class UpdateOptions(StageOptions, Retrieval):
    agent: ClassVar[str] = "updater"


@dataclass(frozen=True, kw_only=True)
class EvolveOptions(StageOptions, Retrieval):
    update: bool | None = opt(None, "Update the rubric after this step (default: every pipeline.update_every steps).",
                              "--update/--no-update")
    rescore: bool = opt(False, "After the update, score the step again with the new rubric (rescores.jsonl).",
                        "--rescore")
    chunk_size: int | None = _chunk_size()
    update_every: int | None = _update_every()
    update_at: UpdateAt | None = _update_at()
    failed_step: FailedStep | None = _failed_step()


@dataclass(frozen=True, kw_only=True)
class LoopOptions(Failure, Waiting, Endpoint, Retrieval):
    source: Path = opt(MISSING, "A directory of per-step JSONL or Parquet files (12.jsonl, step-012.jsonl, ART's "
                       "0012.parquet) or one JSONL whose lines carry `step`.")
    run: Path = _run()
    steps: str | None = opt(None, "Inclusive step range START:END (either side may be empty).", "--steps",
                            metavar="START:END")
    map: list[str] | None = _map("FIELD=SOURCE for a field under another name, repeatable.")
    update_every: int | None = _update_every()
    update_at: UpdateAt | None = _update_at()
    lag: int = opt(0, "Score step t with the newest rubric version <= t - LAG (asynchronous training).", "--lag", min=0)
    rescore: bool = opt(False, "After each update, re-score the step with the new rubric (rescores.jsonl).",
                        "--rescore")
    chunk_size: int | None = _chunk_size()
    group_by: GroupBy | None = _group_by()
    failed_step: FailedStep | None = _failed_step()


@dataclass(frozen=True, kw_only=True)
class ReplayOptions(Retrieval):
    source: Path = opt(MISSING, "The recorded run to re-execute.")
    out: Path = opt(MISSING, "New run directory for the replay (re-run the same command to resume).", "--out", "-o")
    offline: bool = opt(False, "Never call a model (no endpoint needed): a request the record lacks is an error.",
                        "--offline")
    update_every: int | None = _update_every("Override: update every N steps.")
    update_at: UpdateAt | None = _update_at("Override: which step of every N updates (last or first).")
    lag: int | None = opt(None, "Override the recorded lag.", "--lag", min=0)
    rescore: bool | None = opt(None, "Override the recorded rescore mode.", "--rescore/--no-rescore")
    judge: Judge | None = opt(None, "Judge for requests the record lacks (default: as recorded).", "--judge")
    model: str | None = _model()
    base_url: str | None = _base_url()
    requests_per_minute: float | None = _per_minute("request")
    tokens_per_minute: float | None = _per_minute("token")


@dataclass(frozen=True, kw_only=True)
class ServeOptions(Failure, Waiting, Endpoint, Memory):
    run: Path = _run()
    host: str = opt("127.0.0.1", "Address to bind (127.0.0.1: this machine only).", "--host")
    port: int = opt(8780, "Port (0 picks a free one).", "--port", "-p", min=0, max=65535)
    mode: ServeMode = opt(ServeMode.async_, "async: step t is scored with rubric version t-1 (as `score --lag 1`) and "
                          "/score answers at once; sync: step t waits for the evolution of step t-1 (lag 0) and /score "
                          "answers with the value re-scored by the rubric the step's own evolution wrote (as `evolve "
                          "--rescore`).", "--mode")
    rollouts_per_step: int | None = opt(None, "Complete a step by itself once it holds N rollouts (else POST "
                                        "/complete).", "--rollouts-per-step", min=1)
    update_every: int | None = _update_every()
    update_at: UpdateAt | None = _update_at()
    early_analysis: bool = opt(True, "async mode: analyze each rollout in the background as soon as it is judged, so "
                               "that a step's evolution has only its summary and update left.",
                               "--early-analysis/--no-early-analysis")
    # carry: a trainer was answered for every rollout, failed ones as failed, and nothing over HTTP can score a
    # complete step again; stopping would end training at the next step that needs the step's rubric version.
    failed_step: FailedStep = _failed_step(FailedStep.carry, "carry (the trainer was answered already)")
    on_error: OnError | None = _failure_policy(  # a server answers a failure; it has no exit code to give
        "What a rollout that cannot be judged does: fail or skip (/score answers it as failed, with no reward: "
        "the reference's client raises ScoreFailed; under fail its step follows --failed-step), neutral (answered "
        "with pipeline.neutral_reward as its reward). Default: pipeline.on_error (fail).")
    recheck_after: float = opt(30.0, "After an answer no request can get past (the key rejected, the model or path "
                               "unknown: HTTP 401, 403, 404), /score fails at once (502) for this long, then the "
                               "server tries the endpoint again.", "--recheck-after", metavar="SECONDS", min=0)

    @property
    def lag(self) -> int:
        return 1 if self.mode == ServeMode.async_ else 0

    def evolve_options(self, step: int) -> EvolveOptions:
        """What `amaris evolve` of a served step is given: every option the two commands share, as set here."""
        shared = {name: getattr(self, name) for name in EvolveOptions.field_names() & self.field_names()}
        return EvolveOptions(**shared, step=step, rescore=self.mode == ServeMode.sync)


@dataclass(frozen=True, kw_only=True)
class HackbenchOptions(Failure, Waiting, Endpoint, Retrieval):
    source: Path | None = opt(None, "Honest rollouts JSONL (each answer the control of its hacked variants), a labelled "
                              "file with --labelled, or School of Reward Hacks lines; default: the shipped math examples.")
    out: Path = opt(Path("runs/hackbench"), "Output directory: the benchmark's run (OUT/run), its rollouts and "
                    "OUT/hackbench.json (re-run the same command to resume).", "--out", "-o")
    config: Path | None = opt(None, "The amaris TOML whose rubric judges the answers (needed with SOURCE; default for "
                              "the shipped examples: their math rubric).", "--config", "-c")
    updates: int = opt(3, "K: rubric updates before the second measurement.", "--updates", "-k", min=0)
    families: str | None = opt(None, "Only these hack families (default: all 12); with --labelled, only the lines with "
                               "these labels and the honest lines of their prompts (a School of Reward Hacks file has "
                               "one: school_of_reward_hacks).", "--families", metavar="NAME,...")
    labelled: bool = opt(False, "SOURCE is labelled: rollout lines with a label field (honest, control, clean or none "
                         "for a control; else the hack's name).", "--labelled")
    label_field: str = opt("label", "The label's field in a labelled file.", "--label-field")
    map: list[str] | None = _map("FIELD=SOURCE for a field under another name, repeatable.")
    limit: int | None = opt(None, "Only the first N answers (or lines) of SOURCE.", "--limit", min=1)
    seed: int = opt(0, "Seed of the bootstrap intervals.", "--seed")
    bootstrap: int = opt(2000, "Resamples per 95% interval (0: no interval).", "--bootstrap", min=0)
    on_error: OnError | None = _failure_policy("What a rollout that cannot be judged does: skip (default: left out of the "
                                         "figures and counted), neutral, or fail (the benchmark stops, exit 4).",
                                         OnError.skip)

    def family_names(self) -> list[str] | None:
        return [f.strip() for f in self.families.split(",") if f.strip()] if self.families else None

    def shared_with(self, cls: type[Options]) -> dict[str, Any]:
        """The options this benchmark passes on to a pipeline command's options (the judge, waits, memory)."""
        own = {"source", "run", "map", "steps", "step", "rollouts", "out", "config"}
        return {name: getattr(self, name) for name in cls.field_names() & self.field_names() - own}
