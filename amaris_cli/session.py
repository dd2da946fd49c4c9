"""One command's working set: the locked run directory, its settings, the client and the agents.

The judge is either the configured OpenAI-compatible endpoint or the rule-based sim-judge,
started in this process on 127.0.0.1 (`--judge sim`, or `--judge auto` when nothing is configured).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from amaris_cli.agents.common import AgentKit
from amaris_cli.config import AGENTS, Settings, endpoint_configured, load_settings
from amaris_cli.errors import ConfigError
from amaris_cli.llm.calllog import CallLog
from amaris_cli.llm.client import LLMClient
from amaris_cli.rundir import Manifest, RunDir

T = TypeVar("T")
JudgeChoice = Literal["endpoint", "sim", "auto"]
SIM_MODEL = "sim-judge"


@dataclass
class Session:
    run: RunDir
    settings: Settings
    client: LLMClient
    kit: AgentKit
    sim_url: str | None
    manifest: Manifest

    def save_manifest(self) -> None:
        self.run.save_manifest(self.manifest)

    def execute(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a stage on a fresh event loop and close the HTTP clients on that same loop."""

        async def main() -> T:
            try:
                return await coro
            finally:
                await self.client.aclose()

        return asyncio.run(main())


def _sim_overrides(url: str) -> dict[str, Any]:
    agent = {"base_url": url, "model": SIM_MODEL, "api_key_env": "AMARIS_SIM_JUDGE_KEY"}
    return {"agents": {name: dict(agent) for name in ("default", *AGENTS)}}


def resolve_judge(settings: Settings, judge: JudgeChoice, environ: Mapping[str, str]) -> bool:
    """True when the sim-judge must be used."""
    if judge == "sim":
        return True
    configured = endpoint_configured(settings, environ)
    if judge == "auto":
        return not configured
    if not configured:
        raise ConfigError(
            "no judge endpoint configured: set OPENAI_BASE_URL (or agents.default.base_url in the config) "
            "and the API key variable, or pass --judge sim to use the rule-based sim-judge"
        )
    return False


@contextmanager
def open_session(
    run: RunDir,
    flags: Mapping[str, Any] | None = None,
    judge: JudgeChoice = "endpoint",
    environ: Mapping[str, str] | None = None,
    announce: Any = None,
    replay: Any = None,
) -> Iterator[Session]:
    """Lock the run, resolve settings (run config < env < flags), start the judge if simulated."""
    env = os.environ if environ is None else environ
    manifest = run.load_manifest()
    settings = load_settings(base=manifest.config, environ=env, flags=flags, source=str(run.manifest_path))
    with ExitStack() as stack:
        stack.enter_context(run.lock())
        sim_url = None
        if resolve_judge(settings, judge, env):
            from amaris_cli.simjudge.server import SimJudge

            sim = stack.enter_context(SimJudge())
            sim_url = sim.base_url
            settings = load_settings(base=settings.model_dump(exclude_none=True), environ={}, flags=_sim_overrides(sim_url))
            if announce:
                announce(
                    f"No OpenAI-compatible endpoint is configured: using amaris's rule-based sim-judge at {sim_url}. "
                    "Its verdicts come from simple rules, not from an LLM."
                )
        call_log = CallLog(run.calls_path)
        stack.callback(call_log.close)
        client = LLMClient(settings, call_log, environ=env, replay=replay)
        prompt_dirs = [run.prompts_override_dir]
        if settings.prompts_dir:
            prompt_dirs.append(Path(settings.prompts_dir))
        kit = AgentKit(settings=settings, client=client, prompt_dirs=prompt_dirs)
        manifest.prompt_hashes = kit.prompt_hashes()
        yield Session(run=run, settings=settings, client=client, kit=kit, sim_url=sim_url, manifest=manifest)
