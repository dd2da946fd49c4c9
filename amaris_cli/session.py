"""One command's working set: the run directory, its settings, the client and the agents.

The judge is either the configured OpenAI-compatible endpoint or the rule-based sim-judge,
started in this process on 127.0.0.1 (`--judge sim`, or `--judge auto` when nothing is configured).
A session takes no lock: what a command writes is locked by the command (locks.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from amaris_cli import eventloop
from amaris_cli.agents.common import AgentKit
from amaris_cli.artifacts import How
from amaris_cli.config import (
    AGENTS,
    Settings,
    endpoint_configured,
    endpoint_named,
    key_without_endpoint,
    load_settings,
    unknown_variables,
    without_credentials,
)
from amaris_cli.errors import ConfigError
from amaris_cli.llm.cache import CallCache
from amaris_cli.llm.calllog import CallLog
from amaris_cli.llm.client import LLMClient
from amaris_cli.policy import FailurePolicy
from amaris_cli.rundir import RunDir

T = TypeVar("T")
JudgeChoice = Literal["endpoint", "sim", "auto"]
SIM_MODEL = "sim-judge"
# Where an offline replay of a sim-judge run says its requests go: never contacted (offline sends nothing;
# `.invalid` never resolves), it gives those requests the sim-judge's agent settings, model included.
OFFLINE_SIM_URL = "http://sim-judge.offline.invalid/v1"


@dataclass
class Session:
    run: RunDir
    settings: Settings
    client: LLMClient
    kit: AgentKit
    sim_url: str | None
    flags: dict[str, Any] = field(default_factory=dict)  # the command's flag layer, as provenance records it
    say: Callable[[str], None] = print
    replaying: RunDir | None = None  # a replay's source run: its records answer first
    offline: bool = False  # with `replaying`: what its records lack is an error, not a request

    @property
    def how(self) -> How:
        """What a replay must repeat of this command: its config flags, the kind of judge and the answer keys
        its environment set."""
        return How(flags=self.flags, judge="sim" if self.sim_url else "endpoint",
                   environment=self.settings.environment_answers)

    @property
    def policy(self) -> FailurePolicy:
        return FailurePolicy.of(self.settings)

    def execute(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a stage on a fresh event loop and close the HTTP clients on that same loop."""

        async def main() -> T:
            try:
                return await coro
            finally:
                await self.client.aclose()

        return eventloop.run(main())


@dataclass
class _OneJudge:
    stack: ExitStack  # holds the sim-judge until the command ends
    sim: Any = None  # the SimJudge the first session that needed one started
    said: bool = False  # the unknown variables and the sim-judge's banner: said by the first session


_ONE_JUDGE: ContextVar[_OneJudge | None] = ContextVar("amaris_one_judge", default=None)


@contextmanager
def one_judge() -> Iterator[None]:
    """The sessions opened within (a command of several jobs, each with its own session: `hackbench`) share one
    sim-judge, started by the first that needs it and stopped at the end, and say what a session says of its judge
    once: else each started its own and said so."""
    with ExitStack() as stack:
        token = _ONE_JUDGE.set(_OneJudge(stack))
        try:
            yield
        finally:
            _ONE_JUDGE.reset(token)


def _sim_agents(url: str) -> dict[str, Any]:
    agent = {"base_url": url, "model": SIM_MODEL, "api_key_env": "AMARIS_SIM_JUDGE_KEY"}
    return {name: dict(agent) for name in ("default", *AGENTS)}


def _unused_with_sim(flags: Mapping[str, Any] | None) -> list[str]:
    """The endpoint flags a command was given that the sim-judge's agents replace (a replay of a sim-judge run given
    --model judged its misses with the sim-judge, unsaid)."""
    default = ((flags or {}).get("agents") or {}).get("default") or {}
    return [f"--{key.replace('_', '-')}" for key in ("model", "base_url") if default.get(key) is not None]


def resolve_judge(settings: Settings, judge: JudgeChoice, environ: Mapping[str, str], offline: bool = False) -> bool:
    """True when the sim-judge must be used."""
    if judge == "sim":
        return not offline
    if judge == "auto":  # an endpoint named by a base URL: a key alone (often set for other tools) spends nothing
        return not endpoint_named(settings) and not offline
    configured = endpoint_configured(settings, environ)
    if not configured and not offline:
        raise ConfigError(
            "no judge endpoint configured: set OPENAI_BASE_URL (or agents.default.base_url in the config) "
            "and the API key variable, or pass --judge sim to use the rule-based sim-judge"
        )
    return False


def run_settings(run: RunDir, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
                 recorded_environment: Mapping[str, Any] | None = None) -> Settings:
    """A run's settings for one command: its saved config < the environment < (a replayed command's recorded
    environment <) the command's flags."""
    run.require()
    return load_settings(base=run.load_manifest().config, environ=os.environ if environ is None else environ,
                         flags=flags, source=str(run.manifest_path), recorded_environment=recorded_environment)


@contextmanager
def open_session(
    run: RunDir,
    settings: Settings,
    judge: JudgeChoice = "endpoint",
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    announce: Callable[[str], None] | None = None,
    replaying: RunDir | None = None,
    offline: bool = False,
    recheck_after: float | None = None,
    announce_judge: bool = True,
) -> Iterator[Session]:
    """Start the judge if simulated and open the call log, for `settings` (run_settings) and the command
    `flags` that made them (recorded in provenance, credentials stripped).

    Requests whose answer this run's calls.jsonl already holds are answered from it; with
    `replaying`, from that run's log first (`offline`: a request it lacks is an error, and no
    endpoint is needed; the memory reads its record of an embeddings endpoint's vectors likewise).
    `recheck_after`: a session that stays up (serve) tries an endpoint again that long after an
    answer no request could get past (llm/client.py); a command's session stops on it. `announce` gets what a
    person must see (the sim-judge, an outage); `announce_judge` False leaves out the sim-judge's banner (a
    replay's sessions after the first that started one: said once)."""
    env = os.environ if environ is None else environ
    say = announce or (lambda _text: None)
    shared = _ONE_JUDGE.get()
    if shared is not None:  # within one_judge(): said by its first session
        announce_judge, shared.said = announce_judge and not shared.said, True
    if announce_judge:  # (a replay's later sessions: said once)
        for line in unknown_variables(env, settings):
            say(line)
    with ExitStack() as stack:
        sim_url = None
        if resolve_judge(settings, judge, env, offline):
            from amaris_cli.simjudge.server import SimJudge

            # `sim`: asked for, or the judge of the run a replay repeats
            why = "Judge `sim`" if judge == "sim" else "No OpenAI-compatible endpoint is configured"
            if judge == "auto" and (key := key_without_endpoint(settings, env)) is not None:
                why += (f" (${key} is set, but no base URL: `--judge auto` judges with an endpoint only when "
                        "OPENAI_BASE_URL, --base-url or the config names one, e.g. https://api.openai.com/v1)")
            if shared is None:
                sim = stack.enter_context(SimJudge())
            elif shared.sim is None:
                sim = shared.sim = shared.stack.enter_context(SimJudge())
            else:
                sim = shared.sim
            sim_url = sim.base_url
            settings = settings.with_agent_layer(_sim_agents(sim_url), "the sim-judge")
            if announce_judge:
                say(f"{why}: using amaris's rule-based sim-judge at {sim_url}. "
                    "Its verdicts come from simple rules, not from an LLM.")
        elif offline and judge == "sim":  # the record holds the sim-judge's requests: looked up as its own
            sim_url = OFFLINE_SIM_URL
            settings = settings.with_agent_layer(_sim_agents(sim_url), "the sim-judge (offline: never called)")
        if sim_url is not None and announce_judge and (unused := _unused_with_sim(flags)):
            say(f"{' and '.join(unused)} not used: " + ("an offline replay looks up the sim-judge's recorded answers"
                if offline else "the sim-judge answers every agent (--judge endpoint sends the requests to the endpoint)"))
        call_log = CallLog(run.calls_path)
        stack.callback(call_log.close)
        cache = CallCache(run.calls_path, replaying.calls_path if replaying is not None else None, offline)
        client = LLMClient(settings, call_log, environ=env, cache=cache, say=say, recheck_after=recheck_after)
        prompt_dirs = [run.prompts_override_dir]
        if settings.prompts_dir:
            prompt_dirs.append(Path(settings.prompts_dir))
        kit = AgentKit(settings=settings, client=client, prompt_dirs=prompt_dirs, run=run)
        yield Session(run=run, settings=settings, client=client, kit=kit, sim_url=sim_url,
                      flags=without_credentials(dict(flags or {})), say=say, replaying=replaying, offline=offline)
