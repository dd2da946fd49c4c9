"""Settings layering (flags > env > file > defaults) and config errors that name their source."""

from __future__ import annotations

from pathlib import Path

import pytest

from amaris_cli.config import load_settings
from amaris_cli.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_defaults_apply_without_any_source() -> None:
    s = load_settings(environ={})
    assert s.agent("scorer").model == "gpt-4o-mini"
    assert s.memory.static_steps == 5 and s.memory.results_per_query == 3 and s.memory.max_queries is None


def test_precedence_flags_over_env_over_file_over_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, '[agents.default]\nmodel = "file-model"\ntemperature = 0.3\n'
                           '[agents.updater]\nmodel = "file-updater"\nmax_tokens = 99\n')
    from_file = load_settings(config_file=path, environ={})
    assert from_file.agent("scorer").model == "file-model"
    assert from_file.agent("updater").model == "file-updater"
    assert from_file.agent("updater").temperature == 0.3  # inherited from default
    env = {"AMARIS_MODEL": "env-model", "AMARIS_SCORER_TIMEOUT": "7", "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}
    from_env = load_settings(config_file=path, environ=env)
    assert from_env.agent("scorer").model == "env-model"
    assert from_env.agent("scorer").timeout == 7
    assert from_env.agent("analyzer").base_url == "http://127.0.0.1:1/v1"
    flags = {"agents": {"default": {"model": "flag-model"}}}
    from_flags = load_settings(config_file=path, environ=env, flags=flags)
    assert from_flags.agent("scorer").model == "flag-model"
    assert from_flags.agent("scorer").timeout == 7
    assert from_flags.agent("updater").max_tokens == 99


def test_unknown_key_names_the_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[memory]\nstatic_stepz = 3\n")
    with pytest.raises(ConfigError, match=r"c.toml: memory.static_stepz: unknown key"):
        load_settings(config_file=path, environ={})


def test_bad_value_and_unknown_agent_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agents.scorer.temperature"):
        load_settings(config_file=write(tmp_path, '[agents.scorer]\ntemperature = "hot"\n'), environ={})
    with pytest.raises(ConfigError, match=r"unknown agent\(s\) grader"):
        load_settings(config_file=write(tmp_path, '[agents.grader]\nmodel = "x"\n'), environ={})
    with pytest.raises(ConfigError, match=r"invalid TOML.*line 1"):
        load_settings(config_file=write(tmp_path, "[memory\n"), environ={})


def test_bad_environment_value_names_the_environment() -> None:
    with pytest.raises(ConfigError, match="environment"):
        load_settings(environ={"AMARIS_SCORER_TIMEOUT": "soon"})


def test_rubric_criteria_validated(tmp_path: Path) -> None:
    text = '[[rubric.anchors]]\nid = "a"\ntext = "x"\nweight = -1\n'
    with pytest.raises(ConfigError, match=r"rubric.anchors.0.weight"):
        load_settings(config_file=write(tmp_path, text), environ={})


def test_token_limit_param_changes_the_request_field(tmp_path: Path) -> None:
    from amaris_cli.llm.client import LLMClient
    from amaris_cli.models import QueriesAnswer

    settings = load_settings(config_file=write(tmp_path, '[agents.updater]\ntoken_limit_param = "max_completion_tokens"\n'), environ={})
    client = LLMClient(settings, environ={})
    assert "max_tokens" in client.params_for(settings.agent("scorer"), "scorer", QueriesAnswer)
    params = client.params_for(settings.agent("updater"), "updater", QueriesAnswer)
    assert params["max_completion_tokens"] == 2048 and "max_tokens" not in params
