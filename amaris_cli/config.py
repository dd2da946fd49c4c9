"""Settings: built-in defaults < TOML file < environment < flags, resolved in one place.

Sections other than `agents` merge key by key in that order. Agent settings resolve per key: for
agent A the first value found in flags[A], flags[default], env[A], env[default], file[A],
file[default], built-in default — so `--model` (flags[default]) beats a per-agent `model` in the
file. The file layer is what run.json saves; the environment and flag layers are kept apart in the
loaded Settings so that this order holds. Keys are never stored: only the *name* of the
environment variable that holds one.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    model_validator,
)

from amaris_cli.errors import ConfigError
from amaris_cli.llm.endpoint import strip_userinfo
from amaris_cli.models import Criterion

AGENTS = ("scorer", "analyzer", "summarizer", "meta_summarizer", "query_generator", "updater")
ResponseFormat = Literal["json_schema", "json_object", "text", "auto"]
SystemRole = Literal["system", "user"]


def _endpoint_url(url: str) -> str:
    # A URL the HTTP client cannot send to is refused where it was set: unchecked, one without a scheme or host
    # was retried as an outage for llm.outage_budget, and an unparsable one was a traceback.
    if problem := base_url_problem(url):
        raise ValueError(problem)
    return url


EndpointUrl = Annotated[str, AfterValidator(_endpoint_url)]  # an agent's or the embeddings endpoint's base URL


def base_url_problem(url: str) -> str | None:
    """Why a base URL cannot name an endpoint (said of the URL, which may hold credentials: never quoted), or None."""
    from urllib.parse import urlsplit

    if url != url.strip() or any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        return "the base URL holds a space or a control character"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number from 0 to 65535
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "expected http://HOST[:PORT]/PATH or https://... (the base URL has no http or https scheme)"
    if not parts.hostname:
        return "expected http://HOST[:PORT]/PATH or https://... (the base URL names no host)"
    return None


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentOverrides(_Section):
    """One `[agents.NAME]` table; every key optional so tables layer."""

    model: str | None = None
    base_url: EndpointUrl | None = None
    api_key_env: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    timeout: float | None = Field(default=None, gt=0)
    extra_body: dict[str, Any] | None = None
    service_tier: str | None = None
    concurrency: int | None = Field(default=None, gt=0)
    max_attempts: int | None = Field(default=None, ge=1, le=20)
    max_reasks: int | None = Field(default=None, ge=0, le=5)
    response_format: ResponseFormat | None = None
    system_role: SystemRole | None = None
    token_limit_param: Literal["max_tokens", "max_completion_tokens"] | None = None
    max_tokens_cap: int | None = Field(default=None, gt=0)
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)

    @field_serializer("base_url", when_used="json")
    def _no_credentials(self, url: str | None) -> str | None:
        # run.json holds the config as JSON: credentials in a URL are used, never written.
        return strip_userinfo(url)


# The agent keys that can change an answer: what provenance records of a derived file's agents, and what a replay
# repeats of the environment the source's commands ran with.
ANSWER_KEYS = frozenset({"model", "temperature", "max_tokens", "token_limit_param", "response_format", "extra_body",
                         "service_tier", "max_reasks", "max_tokens_cap", "system_role"})


class AgentSettings(_Section):
    """The resolved settings of one agent."""

    model: str = "gpt-4o-mini"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 2048
    timeout: float = 120.0
    extra_body: dict[str, Any] = Field(default_factory=dict)
    service_tier: str | None = None
    concurrency: int = 32
    max_attempts: int = 5
    max_reasks: int = 2
    response_format: ResponseFormat = "json_object"
    # The role of the message that carries the agent's instructions: "user" for a judge whose chat template drops
    # system messages (llama.cpp's Gemma format), which then opens the first user message with them.
    system_role: SystemRole = "system"
    # OpenAI's reasoning models accept only max_completion_tokens; most other servers only max_tokens.
    token_limit_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    # A reply cut at the token limit is re-asked with twice the budget, and a group call asks for
    # what its responses x criteria need: never more than this (nor less than max_tokens).
    max_tokens_cap: int = 8192
    # Provider tiers, honoured before sending (unset: no limit). Agents sharing endpoint, key,
    # model and limits share one budget, as the provider counts them together.
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None

    @property
    def token_cap(self) -> int:
        return max(self.max_tokens, self.max_tokens_cap)

    @field_serializer("base_url", when_used="json")
    def _no_credentials(self, url: str | None) -> str | None:
        return strip_userinfo(url)

    def answer_inputs(self) -> dict[str, Any]:
        """The keys that can change an answer (what a derived file depends on); not the endpoint,
        the key, limits or timeouts."""
        answers = self.model_dump(include=set(ANSWER_KEYS - {"system_role"}))
        # (only when set: the inputs of runs made before it existed stay what they were)
        return answers if self.system_role == "system" else {**answers, "system_role": self.system_role}


class TrainingSettings(_Section):
    goal: str = ""
    model_size: str = ""
    total_steps: int | None = Field(default=None, ge=1)
    context: str = ""


class RubricSettings(_Section):
    anchors: list[Criterion] = Field(default_factory=list)
    adaptive: list[Criterion] = Field(default_factory=list)
    max_adaptive: int = Field(default=8, ge=0)
    max_active_adaptive: int | None = Field(default=None, ge=0)
    min_weight: float = Field(default=0.1, gt=0)
    max_weight: float = Field(default=5.0, gt=0)
    # The anchors' least share of the reward criteria's weight (the reward's denominator) that updates may leave:
    # unset, eight adaptive criteria at max_weight can outweigh them until they barely count.
    min_anchor_share: float | None = Field(default=None, gt=0, le=1)

    @model_validator(mode="after")
    def _bounds(self) -> RubricSettings:
        if self.min_weight > self.max_weight:
            raise ValueError("min_weight must not exceed max_weight")
        if self.min_anchor_share is not None and self.anchors and not any(c.kind == "reward" for c in self.anchors):
            raise ValueError("min_anchor_share needs a reward criterion among the anchors (their share of the reward "
                             "criteria's weight)")
        return self


class MemorySettings(_Section):
    static: bool = True
    static_steps: int = Field(default=5, ge=0)
    dynamic: bool = True
    results_per_query: int = Field(default=3, ge=1, le=50)
    max_queries: int | None = Field(default=None, ge=1, le=20)
    embedding: Literal["local", "openai"] = "local"
    embedding_model: str = "text-embedding-3-small"
    embedding_base_url: EndpointUrl | None = None
    embedding_api_key_env: str = "OPENAI_API_KEY"
    # seconds per embeddings request: the SDK's default (600 s, 5 tries) held an evolution, and a `score --lag 1`
    # waiting for it, for most of an hour on an endpoint that accepts and never answers
    embedding_timeout: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    url: str | None = None
    namespace: str = Field(default="amaris", pattern=r"^[a-zA-Z0-9][a-zA-Z0-9._-]{1,60}$")


class PipelineSettings(_Section):
    chunk_size: int = Field(default=32, ge=1)
    merge_fan_in: int = Field(default=16, ge=2)
    update_every: int = Field(default=1, ge=1)
    # Which step of every `update_every` updates: "last" (amaris: after steps N-1, 2N-1, ...) or "first" (the
    # reference's rubric_update_frequency: at steps 0, N, 2N, ...), counted from the run's first step.
    update_at: Literal["last", "first"] = "last"
    on_error: Literal["fail", "skip", "neutral"] = "fail"
    # Under on_error = "fail", what the evolution of a step with failed records does (policy.py): "stop" (it
    # fails; score the step again) or "carry" (it evolves as skipped: the rubric is carried forward unchanged).
    failed_step: Literal["stop", "carry"] = "stop"
    # What `carry` skips in a per-instance run: the instances with failed records ("instance"), or the whole step,
    # as amaris did before (a run made then keeps it, in its later commands and its replay: rundir.Manifest).
    carry_scope: Literal["instance", "step"] = "instance"
    neutral_reward: float = Field(default=0.5, ge=0, le=1)
    max_text_chars: int = Field(default=12000, ge=200)
    per_instance: bool = False
    instance_field: str | None = None
    group_by: Literal["none", "input"] = "none"
    group_size: int = Field(default=16, ge=2, le=64)


class GateSettings(_Section):
    """The adoption gate (gate.py): a new rubric version is scored beside the previous one on hack probes and
    honest controls, and refused when it pays a hack more or turns the controls' order over."""

    enabled: bool = True
    families: list[str] = Field(default_factory=lambda: ["grader_address", "confident_wrong", "keyword_stuffing",
                                                          "padding", "format_mimicry"])
    probes_file: str | None = None
    max_call_share: float = Field(default=0.1, ge=0, le=10)
    margin: float = Field(default=0.05, ge=0, le=1)
    max_flips: float = Field(default=0.25, ge=0, le=1)
    # How the built-in items fill the budget, best first: `fit` takes each item that still fits (a later, smaller one
    # after one too large); `prefix` stops at the first that does not (as runs made before this key did: their
    # manifests keep it, rundir.Manifest, so their commands and replays ask the judge what they asked).
    fill: Literal["fit", "prefix"] = "fit"

    @model_validator(mode="after")
    def _known_families(self) -> GateSettings:
        from amaris_cli.hackbench.transforms import FAMILY_NAMES

        unknown = sorted(set(self.families) - set(FAMILY_NAMES))
        if unknown:
            raise ValueError(f"unknown probe families {', '.join(unknown)}; known: {', '.join(FAMILY_NAMES)}")
        return self


class LLMSettings(_Section):
    concurrency: int = Field(default=64, ge=1)
    retry_base_delay: float = Field(default=0.5, ge=0)
    retry_max_delay: float = Field(default=30.0, ge=0)
    # Seconds a step waits in all for an endpoint that stopped answering before its requests fail: a
    # judge restarting (a vLLM model reload takes one to two minutes) or a provider's blip costs time, not
    # rewards; a longer outage gives the failure policy's rewards rather than stalling training. 0: off.
    outage_budget: float = Field(default=120.0, ge=0)


class ReliabilitySettings(_Section):
    """The judge reliability check (reliability.py): a sample of each step's scorer requests asked again,
    run by `evolve` beside training. Off by default: it spends judge calls the user did not ask for."""

    enabled: bool = False
    # Re-judgement calls per step, as a share of the step's own scorer calls (rounded down).
    max_extra: float = Field(default=0.15, gt=0, le=1)
    # A re-judged verdict flips when it differs from the first by more than this (a pitfall's 0/1 always does).
    tolerance: float = Field(default=0.25, ge=0, lt=1)
    seed: int = Field(default=0, ge=0)


class Price(_Section):
    """US dollars per million tokens."""

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)


class Settings(_Section):
    """Everything a run needs, as saved in run.json (no secrets)."""

    training: TrainingSettings = Field(default_factory=TrainingSettings)
    rubric: RubricSettings = Field(default_factory=RubricSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    pipeline: PipelineSettings = Field(default_factory=PipelineSettings)
    gate: GateSettings = Field(default_factory=GateSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    reliability: ReliabilitySettings = Field(default_factory=ReliabilitySettings)
    agents: dict[str, AgentOverrides] = Field(default_factory=dict)  # the file layer
    prices: dict[str, Price] = Field(default_factory=dict)
    prompts_dir: str | None = None
    # Agent tables above the file, lowest first (environment, flags, ...); not saved in run.json.
    _agent_layers: list[dict[str, AgentOverrides]] = PrivateAttr(default_factory=list)
    # The answer-changing agent keys the environment set (AMARIS_SCORER_MODEL, ...): recorded in provenance, since
    # run.json holds only the file layer, so that a replay asks what the source asked whatever its own shell holds.
    # None: a replay of a record that predates this, which applies today's environment and records none.
    _environment_answers: dict[str, dict[str, Any]] | None = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _known_agents(self) -> Settings:
        unknown = sorted(set(self.agents) - {"default", *AGENTS})
        if unknown:
            raise ValueError(
                f"unknown agent(s) {', '.join(unknown)}; known: default, {', '.join(AGENTS)}"
            )
        return self

    def agent(self, name: str) -> AgentSettings:
        """Resolved settings of one agent, in the order of the module docstring."""
        merged: dict[str, Any] = {}
        for layer in (self.agents, *self._agent_layers):
            for table in (layer.get("default"), layer.get(name)):
                if table is not None:
                    merged.update(table.model_dump(exclude_none=True))
        return AgentSettings(**merged)

    @property
    def environment_answers(self) -> dict[str, dict[str, Any]] | None:
        """The answer-changing agent keys the environment set (a replay's: the ones its source recorded), as
        agent tables: `{"scorer": {"model": "m"}}`; None for a replay of a record without them."""
        return self._environment_answers

    def unrecorded_environment(self) -> Settings:
        """A copy for replaying a record made before environments were recorded: today's environment applies,
        as it did then, and the replay's records hold none, as its source's."""
        copy = self.model_copy(deep=True)
        copy._environment_answers = None
        return copy

    def with_agent_layer(self, layer: Mapping[str, Any], source: str = "flags") -> Settings:
        """A copy with one more agent layer on top of all others (e.g. the sim-judge's endpoint)."""
        copy = self.model_copy(deep=True)
        copy._agent_layers = [*self._agent_layers, _agent_tables(layer, source)]
        return copy


# --- loading ----------------------------------------------------------------------------------

_AGENT_ENV_KEYS = {
    "MODEL": "model",
    "BASE_URL": "base_url",
    "API_KEY_ENV": "api_key_env",
    "TEMPERATURE": "temperature",
    "MAX_TOKENS": "max_tokens",
    "TIMEOUT": "timeout",
    "SERVICE_TIER": "service_tier",
    "CONCURRENCY": "concurrency",
    "MAX_ATTEMPTS": "max_attempts",
    "MAX_REASKS": "max_reasks",
    "RESPONSE_FORMAT": "response_format",
    "SYSTEM_ROLE": "system_role",
    "TOKEN_LIMIT_PARAM": "token_limit_param",
    "MAX_TOKENS_CAP": "max_tokens_cap",
    "REQUESTS_PER_MINUTE": "requests_per_minute",
    "TOKENS_PER_MINUTE": "tokens_per_minute",
}


# The AMARIS_* variables read outside env_layer: by the process, not as settings, and by the shipped trainer
# examples (AMARIS_SERVE_URL: examples/serve/verl_reward.py).
PROCESS_VARIABLES = frozenset({"AMARIS_EMBEDDING_CACHE", "AMARIS_CACHE_DIR", "AMARIS_HTTP_CLIENT", "AMARIS_EVENT_LOOP",
                               "AMARIS_SIM_JUDGE_KEY", "AMARIS_SERVE_URL"})


def environment_variables() -> frozenset[str]:
    """Every AMARIS_* variable amaris reads."""
    agent_keys = {f"AMARIS_{key}" for key in _AGENT_ENV_KEYS} | {
        f"AMARIS_{agent.upper()}_{key}" for agent in AGENTS for key in _AGENT_ENV_KEYS}
    return frozenset({*agent_keys, "AMARIS_CONCURRENCY", "AMARIS_MEMORY_URL", *PROCESS_VARIABLES})


def unknown_variables(environ: Mapping[str, str], settings: Settings) -> list[str]:
    """A line for each AMARIS_* variable that is set and that amaris does not read (the API key variables the
    settings name are read): a misspelt one (AMARIS_SCORE_MODEL) was ignored without a word, and the run used
    another setting than the one written."""
    import difflib

    from amaris_cli.terminal import one_line

    keys = {settings.agent(agent).api_key_env for agent in AGENTS} | {settings.memory.embedding_api_key_env}
    known = environment_variables() | keys
    lines = []
    for name in sorted(n for n in environ if n.startswith("AMARIS_") and n not in known):
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        lines.append(f"${one_line(name, 80)} is set, but amaris reads no such variable"
                     + (f" (${near[0]}?)" if near else "") + ": it is ignored")
    return lines


def env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    """The environment as a partial settings dict.

    OPENAI_BASE_URL sets the default endpoint; AMARIS_<KEY> sets a default agent key and
    AMARIS_<AGENT>_<KEY> one agent's key (e.g. AMARIS_SCORER_MODEL); AMARIS_CONCURRENCY the
    overall limit; AMARIS_MEMORY_URL the memory's `url`.
    """
    agents: dict[str, dict[str, Any]] = {}
    if environ.get("OPENAI_BASE_URL"):
        agents.setdefault("default", {})["base_url"] = environ["OPENAI_BASE_URL"]
    for agent in ("default", *AGENTS):
        prefix = "AMARIS_" if agent == "default" else f"AMARIS_{agent.upper()}_"
        for env_key, key in _AGENT_ENV_KEYS.items():
            value = environ.get(prefix + env_key)
            if value:
                agents.setdefault(agent, {})[key] = value
    layer: dict[str, Any] = {"agents": agents} if agents else {}
    if environ.get("AMARIS_CONCURRENCY"):
        layer["llm"] = {"concurrency": environ["AMARIS_CONCURRENCY"]}
    if environ.get("AMARIS_MEMORY_URL"):
        layer["memory"] = {"url": environ["AMARIS_MEMORY_URL"]}
    return layer


def deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def without_credentials(layer: Mapping[str, Any]) -> dict[str, Any]:
    """A settings layer as it may be written (provenance records the flags a command ran with): every URL
    (`base_url`, `embedding_base_url`, the memory's `url`) without the credentials it may carry. They are used
    for requests, never written."""
    out: dict[str, Any] = {}
    for key, value in layer.items():
        if isinstance(value, Mapping):
            out[key] = without_credentials(value)
        else:
            out[key] = strip_userinfo(value) if key.endswith("url") and isinstance(value, str) else value
    return out


def read_toml(path: Path) -> dict[str, Any]:
    """A config file, read as any input is (`--config <(...)` is a pipe; a FIFO nobody writes to made init wait for
    ever, a directory or a device is refused before it is opened)."""
    from amaris_cli.errors import InputError
    from amaris_cli.inputfiles import NOT_FOUND, read_input_bytes

    try:
        data, _ = read_input_bytes(path, expected="a TOML file")
    except InputError as exc:
        raise ConfigError(f"{path}: config file not found" if exc.reason == NOT_FOUND else str(exc)) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def validate_settings(data: Mapping[str, Any], source: str, from_environment: bool = False,
                      environ: Mapping[str, str] | None = None) -> Settings:
    """`from_environment`: the environment's layer (`environ`), whose errors name the variable that set the key."""
    try:
        return Settings.model_validate(dict(data))
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            variable = environment_variable(err["loc"], environ) if from_environment else None
            lines.append(f"{source}: {variable} ({loc}): {msg}" if variable else f"{source}: {loc}: {msg}")
        raise ConfigError("\n".join(lines)) from None


def environment_variable(loc: tuple[Any, ...], environ: Mapping[str, str] | None = None) -> str | None:
    """The variable env_layer reads a setting from (`("agents", "scorer", "timeout")`: AMARIS_SCORER_TIMEOUT)."""
    if tuple(loc[:3]) == ("agents", "default", "base_url") and not (environ or {}).get("AMARIS_BASE_URL"):
        return "OPENAI_BASE_URL"  # (env_layer reads it first; AMARIS_BASE_URL, when set, replaces it)
    if len(loc) >= 3 and loc[0] == "agents":
        name = next((env for env, key in _AGENT_ENV_KEYS.items() if key == loc[2]), None)
        if name is not None:
            return f"AMARIS_{name}" if loc[1] == "default" else f"AMARIS_{str(loc[1]).upper()}_{name}"
    return {("llm", "concurrency"): "AMARIS_CONCURRENCY", ("memory", "url"): "AMARIS_MEMORY_URL"}.get(tuple(loc[:2]))


def _agent_tables(tables: Mapping[str, Any], source: str, from_environment: bool = False,
                  environ: Mapping[str, str] | None = None) -> dict[str, AgentOverrides]:
    """Validate one layer's agent tables (`{"default": {...}, "scorer": {...}}`)."""
    validate_settings({"agents": dict(tables)}, source, from_environment, environ)
    return {name: AgentOverrides.model_validate(table) for name, table in tables.items()}


def load_settings(
    base: Mapping[str, Any] | None = None,
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    source: str = "config",
    recorded_environment: Mapping[str, Any] | None = None,
) -> Settings:
    """Layer the settings. `base` is a run's saved config (the file layer, below `config_file`).
    `recorded_environment`: the answer keys of the environment a replayed command ran with (agent tables, as
    `Settings.environment_answers` records them), in place of today's environment's answer keys."""
    data: dict[str, Any] = dict(base or {})
    if config_file is not None:
        data = deep_merge(data, read_toml(config_file))
        source = str(config_file)
    # Validate the file alone first, so its errors name the file and not the environment.
    validate_settings(data, source)
    environ = os.environ if environ is None else environ
    env = env_layer(environ)
    top = dict(flags or {})
    if recorded_environment is not None:
        # A replay asks what its source asked: the endpoint, key and limits are today's, the answers the record's.
        kept = {agent: {k: v for k, v in table.items() if k not in ANSWER_KEYS} for agent, table in env.get("agents", {}).items()}
        env = {**env, "agents": deep_merge(kept, recorded_environment)}
    layers = [("environment (AMARIS_*/OPENAI_* variables)", env), ("flags", top)]
    merged = data
    for name, layer in layers:
        merged = deep_merge(merged, {k: v for k, v in layer.items() if k != "agents"})
        validate_settings(merged, name, from_environment=layer is env, environ=environ)
    settings = validate_settings(merged, source)
    settings._agent_layers = [_agent_tables(layer.get("agents", {}), name, from_environment=layer is env, environ=environ)
                              for name, layer in layers]
    settings._environment_answers = _answer_tables(settings._agent_layers[0])
    return settings


def _answer_tables(tables: Mapping[str, AgentOverrides]) -> dict[str, dict[str, Any]]:
    """Validated agent tables as JSON, with only their answer-changing keys (ANSWER_KEYS), empty tables left out."""
    kept = {agent: table.model_dump(mode="json", include=set(ANSWER_KEYS), exclude_none=True)
            for agent, table in tables.items()}
    return {agent: table for agent, table in sorted(kept.items()) if table}


def endpoint_configured(settings: Settings, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user pointed amaris at a judge (an endpoint or at least a key)."""
    env = os.environ if environ is None else environ
    return endpoint_named(settings) or any(env.get(settings.agent(agent).api_key_env) for agent in AGENTS)


def endpoint_named(settings: Settings) -> bool:
    """Whether a base URL names an endpoint for some agent (OPENAI_BASE_URL, --base-url, the config)."""
    return any(settings.agent(agent).base_url for agent in AGENTS)


def key_without_endpoint(settings: Settings, environ: Mapping[str, str]) -> str | None:
    """The variable of a key that is set while no base URL names an endpoint (the SDK would take OpenAI's), or None."""
    if endpoint_named(settings):
        return None
    return next((name for agent in AGENTS if environ.get(name := settings.agent(agent).api_key_env)), None)
