"""Each command's options are declared once (amaris_cli/options.py): the CLI's flags are built from the
declarations, a Python caller builds the same object, and `amaris serve` serializes it whole into its
`amaris evolve` children. These tests hold that: every option of every command round-trips through the
real CLI parser, and a served step's evolution gets every option the two commands share."""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
import typer

from amaris_cli.cli import app
from amaris_cli.options import (
    AnalyzeOptions,
    EvolveOptions,
    GroupBy,
    HackbenchOptions,
    Judge,
    LoopOptions,
    OnError,
    Options,
    ReplayOptions,
    RewardFormat,
    ScoreOptions,
    ServeMode,
    ServeOptions,
    SummarizeOptions,
    UpdateOptions,
    plain_type,
)

COMMANDS: dict[str, type[Options]] = {
    "score": ScoreOptions, "analyze": AnalyzeOptions, "summarize": SummarizeOptions, "update": UpdateOptions,
    "evolve": EvolveOptions, "loop": LoopOptions, "replay": ReplayOptions, "serve": ServeOptions,
    "hackbench": HackbenchOptions,
}


def _other_value(f: dataclasses.Field[Any]) -> Any:
    """A value of the field's type that differs from its default (and is valid for the CLI)."""
    kind = plain_type(f.type)
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        return next(m for m in kind if m != f.default)
    if kind is bool:
        return not f.default if f.default is not None else False
    if kind is int:
        return 7
    if kind is float:
        return 12.5
    if kind is Path:
        return Path(f"/tmp/{f.name}")
    if kind is str:
        return {"steps": "2:5", "host": "127.0.0.2", "base_url": "http://127.0.0.1:9/v1"}.get(f.name, f"x-{f.name}")
    if getattr(kind, "__origin__", None) is list:
        return ["a=b", "c=d"]
    raise AssertionError(f"no test value for {f.name}: {f.type}")


def _parse(command: str, argv: list[str]) -> dict[str, Any]:
    """What the real CLI parses `argv` of `command` into: the keyword arguments of its function."""
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    ctx = cmd.make_context(command, list(argv), resilient_parsing=False)
    return dict(ctx.params)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_of_every_command_round_trips_through_the_cli(command: str) -> None:
    cls = COMMANDS[command]
    values = {f.name: _other_value(f) for f in dataclasses.fields(cls)}
    options = cls(**values)
    parsed = _parse(command, options.to_argv())
    parsed.pop("json_out", None)
    parsed.pop("quiet", None)
    assert cls(**parsed) == options


def test_a_bad_choice_is_one_sentence_naming_the_choices() -> None:
    """typer 0.29 checks an enum in a pydantic validator and printed "Invalid value for '--judge': Value error,
    'sims' is not one of ..." (found by a new-user walkthrough)."""
    from tests.conftest import invoke

    enums = [(command, f, plain_type(f.type)) for command, cls in COMMANDS.items() for f in dataclasses.fields(cls)
             if isinstance(plain_type(f.type), type) and issubclass(plain_type(f.type), StrEnum)]
    cases = [(command, cls.declarations()[f.name].flags[0].split("/")[0], kind)
             for command, f, kind in enums for cls in [COMMANDS[command]]]
    cases.append(("rewards", "--format", RewardFormat))
    assert {flag for _, flag, _ in cases} >= {"--judge", "--on-error", "--group-by", "--format"}, cases
    for command, flag, kind in cases:
        said = invoke(command, flag, "sims").stderr
        choices = ", ".join(repr(m.value) for m in kind)
        assert f"Invalid value for '{flag}': 'sims' is not one of {choices}." in said and "Value error" not in said, said


def test_the_cli_shows_every_declared_option_and_nothing_else() -> None:
    group = typer.main.get_command(app)
    for command, cls in COMMANDS.items():
        params = {p.name for p in group.commands[command].params} - {"json_out", "quiet"}  # type: ignore[union-attr]
        assert params == cls.field_names(), command


def test_a_served_steps_evolution_gets_every_option_the_two_commands_share() -> None:
    """`--concurrency` reached scoring but never the evolve children when the argv was built by hand."""
    serve = ServeOptions(run=Path("runs/x"), judge=Judge.sim, model="m", base_url="http://127.0.0.1:9/v1",
                         requests_per_minute=60, tokens_per_minute=1000, concurrency=3, wait=30,
                         on_error=OnError.neutral, memory_url="http://127.0.0.1:8000", update_every=2,
                         mode=ServeMode.sync)
    child = serve.evolve_options(4)
    shared = (ServeOptions.field_names() & EvolveOptions.field_names())
    assert shared >= {"concurrency", "model", "base_url", "on_error", "update_every", "memory_url", "wait", "judge"}
    assert all(getattr(child, name) == getattr(serve, name) for name in shared)
    assert child.step == 4 and child.rescore is True
    parsed = _parse("evolve", child.to_argv())
    assert EvolveOptions(**{k: v for k, v in parsed.items() if k not in ("json_out", "quiet")}) == child
    assert child.config_layer() == {
        "agents": {"default": {"model": "m", "base_url": "http://127.0.0.1:9/v1", "requests_per_minute": 60,
                               "tokens_per_minute": 1000, "concurrency": 3}},
        "llm": {"concurrency": 3}, "pipeline": {"on_error": "neutral", "update_every": 2, "failed_step": "carry"},
        "memory": {"url": "http://127.0.0.1:8000"}}


def test_flags_are_config_paths_of_the_settings() -> None:
    """Every option that sets a setting names a key the settings have (a flag is one more layer of it)."""
    from amaris_cli.config import load_settings

    for cls in COMMANDS.values():
        values = {f.name: _other_value(f) for f in dataclasses.fields(cls)}
        if "group_by" in values:
            values["group_by"] = GroupBy.input
        if "on_error" in values:
            values["on_error"] = OnError.skip
        settings = load_settings(flags=cls(**values).config_layer(), environ={})  # an unknown key: ConfigError
        assert settings.pipeline.on_error == ("skip" if "on_error" in values else "fail")
        assert settings.memory.url == values.get("memory_url")


def test_a_python_caller_gets_the_types_the_cli_gives() -> None:
    options = ScoreOptions(rollouts="r.jsonl", run="runs/x", step=1, judge="sim", rewards_format="list")  # type: ignore[arg-type]
    assert options.rollouts == Path("r.jsonl") and options.judge is Judge.sim
    assert options.rewards_format is RewardFormat.list
