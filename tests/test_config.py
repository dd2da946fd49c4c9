"""Settings layering (flags > env > file > defaults) and config errors that name their source."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

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


def test_a_first_init_without_a_rubric_says_both_ways_to_give_one(tmp_path: Path) -> None:
    """A new user's first `amaris init RUN` (no --config) named "--anchor flags" as the source of the error,
    and `score` on the run that was therefore not created told them to run that same init again."""
    from tests.conftest import invoke

    run = tmp_path / "run"
    made = invoke("init", run)
    assert made.exit_code == 2 and made.stderr.startswith("error: amaris init: no anchor criteria")
    assert "--config" in made.stderr and "examples/amaris.toml" in made.stderr and "--anchor 'TEXT'" in made.stderr
    scored = invoke("score", tmp_path / "rollouts.jsonl", "--run", run, "--step", "0")
    assert f"create it with `amaris init {run} --config FILE`" in scored.stderr


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


AGENT_LAYERS = ("flags[A]", "flags[default]", "env[A]", "env[default]", "file[A]", "file[default]")


@pytest.mark.parametrize("agent", ["scorer", "analyzer", "summarizer", "meta_summarizer", "query_generator", "updater"])
def test_each_agent_key_resolves_in_the_documented_order(tmp_path: Path, agent: str) -> None:
    """flags[A] > flags[default] > env[A] > env[default] > file[A] > file[default] > built-in, removing the
    top layer each time; and no other agent ever sees A's own values."""
    other = "updater" if agent != "updater" else "scorer"
    for top in range(len(AGENT_LAYERS) + 1):
        present = AGENT_LAYERS[top:]
        file_text = ""
        if "file[default]" in present:
            file_text += '[agents.default]\nmodel = "file[default]"\n'
        if "file[A]" in present:
            file_text += f'[agents.{agent}]\nmodel = "file[A]"\n'
        env = {}
        if "env[default]" in present:
            env["AMARIS_MODEL"] = "env[default]"
        if "env[A]" in present:
            env[f"AMARIS_{agent.upper()}_MODEL"] = "env[A]"
        flags: dict = {"agents": {}}
        if "flags[default]" in present:
            flags["agents"]["default"] = {"model": "flags[default]"}
        if "flags[A]" in present:
            flags["agents"][agent] = {"model": "flags[A]"}
        settings = load_settings(config_file=write(tmp_path, file_text), environ=env, flags=flags)
        expected = present[0] if present else "gpt-4o-mini"
        assert settings.agent(agent).model == expected, f"layers {present}"
        default_layers = [layer for layer in present if layer.endswith("[default]")]
        assert settings.agent(other).model == (default_layers[0] if default_layers else "gpt-4o-mini")


def test_the_cli_model_flag_beats_a_per_agent_model_in_the_file(tmp_path: Path, sim_factory) -> None:
    from tests.conftest import TEST_CONFIG, invoke, judge_env, write_jsonl

    judge = sim_factory()
    config = write(tmp_path, TEST_CONFIG + '\n[agents.scorer]\nmodel = "file-scorer"\n')
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    rollouts = write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "input": "2+2?", "output": "4", "answer": "4"}])
    result = invoke("score", rollouts, "--run", run, "--step", "0", "--model", "flag-model", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert {r["model"] for r in judge.requests} == {"flag-model"}


def documented_keys() -> set[str]:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    keys: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            cell = line.split("|")[1]
            keys.update(part.strip().strip("`") for part in cell.split(",") if part.strip().startswith("`"))
    return keys


def settings_keys() -> set[str]:
    from amaris_cli.config import AgentSettings, Settings

    keys = {f"agents.<agent>.{name}" for name in AgentSettings.model_fields}
    for section, field in Settings.model_fields.items():
        if section in ("agents",):
            continue
        if section == "prices":
            keys.add("prices.<model>")
        elif section == "prompts_dir":
            keys.add(section)
        else:
            keys.update(f"{section}.{name}" for name in field.annotation.model_fields)  # type: ignore[union-attr]
    return keys


def test_every_config_key_is_documented_and_every_documented_key_exists() -> None:
    documented, existing = documented_keys(), settings_keys()
    assert existing - documented == set(), "keys missing from the README's configuration table"
    assert documented - existing == set(), "README keys that the settings do not have"


# What each settings class is called where code names it; "" is the top level (prices, prompts_dir).
SETTINGS_CLASSES = {"AgentSettings": "agents", "TrainingSettings": "training", "RubricSettings": "rubric",
                    "MemorySettings": "memory", "PipelineSettings": "pipeline", "GateSettings": "gate",
                    "LLMSettings": "llm", "ReliabilitySettings": "reliability", "Settings": ""}
SECTIONS = {"training", "rubric", "memory", "pipeline", "gate", "llm", "reliability"}
# Keys read through a property of config.py, by the name code reads.
READ_AS = {"agents.max_tokens_cap": "agents.token_cap"}


def _sections_of(expr: ast.expr | None, bound: dict[str, set[str]]) -> set[str]:
    """Which settings (sections) an expression may evaluate to, when the code says so: `<x>.memory`,
    `<x>.settings`, `<x>.agent(name)`, a name or attribute bound to one of those or annotated with a
    settings class, an item of a dict of them. A name bound in several scopes may hold several."""
    if isinstance(expr, ast.Attribute):
        if expr.attr in SECTIONS:
            return {expr.attr}
        return {""} | bound.get(expr.attr, set()) if expr.attr == "settings" else bound.get(expr.attr, set())
    if isinstance(expr, ast.Name):
        return bound.get(expr.id, set())
    if isinstance(expr, ast.Subscript | ast.DictComp):
        return _sections_of(expr.value, bound)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "agent":
        return {"agents"}
    return set()


def _annotated(annotation: ast.expr | None) -> set[str]:
    names = set(re.findall(r"\w+", ast.unparse(annotation))) if annotation is not None else set()
    return {section for cls, section in SETTINGS_CLASSES.items() if cls in names}


def _settings_reads(tree: ast.Module) -> set[str]:
    """`section.key` for every attribute read on an expression that holds that section's settings."""
    bound: dict[str, set[str]] = {}
    for _ in range(3):  # bindings through a chain of assignments
        for node in ast.walk(tree):
            pairs: list[tuple[ast.expr, set[str]]] = []
            if isinstance(node, ast.arg) and _annotated(node.annotation):
                bound.setdefault(node.arg, set()).update(_annotated(node.annotation))
            elif isinstance(node, ast.AnnAssign):
                pairs.append((node.target, _annotated(node.annotation) | _sections_of(node.value, bound)))
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        pairs.extend((t, _sections_of(v, bound)) for t, v in zip(target.elts, node.value.elts, strict=False))
                    else:
                        pairs.append((target, _sections_of(node.value, bound)))
            for target, sections in pairs:
                if sections and isinstance(target, ast.Name | ast.Attribute):
                    bound.setdefault(target.id if isinstance(target, ast.Name) else target.attr, set()).update(sections)
    reads = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            reads.update(f"{section}.{node.attr}".lstrip(".") for section in _sections_of(node.value, bound))
    return reads


def test_every_config_key_is_read_as_its_section_s_attribute_outside_config_py() -> None:
    """A key that no code reads is a promise the tool does not keep (pipeline.on_error was one). Grepping a
    key's name proves nothing for `model`, `timeout` or `static`: each key must be read as an attribute of
    its own section's settings (`mem.static` where `mem = settings.memory`, `agent.timeout` where `agent` is
    an AgentSettings) somewhere outside config.py."""
    package = Path(__file__).resolve().parent.parent / "amaris_cli"
    reads: set[str] = set()
    for path in package.rglob("*.py"):
        if path.name != "config.py":
            reads |= _settings_reads(ast.parse(path.read_text()))
    wanted = {key.replace("<agent>", "").replace("..", ".").replace(".<model>", ""): key for key in settings_keys()}
    unread = sorted(key for read_as, key in wanted.items() if READ_AS.get(read_as, read_as) not in reads)
    assert unread == []


def test_the_settings_read_check_finds_a_key_that_is_parsed_but_never_used() -> None:
    code = ("def f(session, agent: AgentSettings):\n"
            "    run, mem = session.run, session.settings.memory\n"
            "    limits = {a: session.settings.agent(a) for a in AGENTS}\n"
            "    return mem.static, agent.timeout, limits['scorer'].model, session.settings.prompts_dir, model.dynamic\n")
    reads = _settings_reads(ast.parse(code))
    assert {"memory.static", "agents.timeout", "agents.model", "prompts_dir"} <= reads
    assert "memory.dynamic" not in reads, "an attribute of something that is not the memory settings"



@pytest.mark.parametrize(("environ", "said"), [
    ({"AMARIS_TIMEOUT": "abc"}, "AMARIS_TIMEOUT (agents.default.timeout): Input should be a valid number"),
    ({"AMARIS_SCORER_MAX_ATTEMPTS": "99"}, "AMARIS_SCORER_MAX_ATTEMPTS (agents.scorer.max_attempts): Input should be"),
    ({"AMARIS_QUERY_GENERATOR_SYSTEM_ROLE": "bot"}, "AMARIS_QUERY_GENERATOR_SYSTEM_ROLE (agents.query_generator.system_role)"),
    ({"AMARIS_CONCURRENCY": "0"}, "AMARIS_CONCURRENCY (llm.concurrency): Input should be greater than or equal to 1"),
])
def test_a_bad_environment_variable_is_named_in_the_error(environ: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(environ=environ)
    assert f"environment (AMARIS_*/OPENAI_* variables): {said}" in str(error.value)


@pytest.mark.parametrize(("weight", "reason"), [
    ("inf", "rubric.anchors.0.weight: Input should be a finite number"),
    ("1e308", "rubric: the criteria's weights add up to more than a number can hold"),
])
def test_an_anchor_weight_no_reward_can_be_computed_with_is_refused_at_init(tmp_path: Path, weight: str,
                                                                           reason: str) -> None:
    """An infinite weight (or finite weights whose sum is not) made every reward NaN, which clipping read as 0.0:
    a run whose every rollout scored 0 without an error."""
    from tests.conftest import invoke

    config = tmp_path / "c.toml"
    config.write_text("[rubric]\nanchors = [\n"
                      f'  {{ id = "correct", text = "The final answer is correct.", weight = {weight} }},\n'
                      f'  {{ id = "fmt", text = "The answer is formatted as a number.", weight = {weight} }},\n]\n')
    result = invoke("init", tmp_path / "run", "--config", config)
    assert result.exit_code == 2 and f"{config}: {reason}" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("environ", "said"), [
    ({"OPENAI_BASE_URL": "http://[::1/v1"}, "OPENAI_BASE_URL (agents.default.base_url): Value error, not a valid URL"),
    ({"OPENAI_BASE_URL": "localhost:8000/v1"}, "OPENAI_BASE_URL (agents.default.base_url): Value error, expected http://"),
    ({"OPENAI_BASE_URL": "http://127.0.0.1:99999/v1"}, "OPENAI_BASE_URL (agents.default.base_url): Value error, not a valid URL (Port"),
    ({"OPENAI_BASE_URL": " http://127.0.0.1:9/v1"}, "OPENAI_BASE_URL (agents.default.base_url): Value error, the base URL holds a space"),
    ({"AMARIS_BASE_URL": "ftp://127.0.0.1/v1", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
     "AMARIS_BASE_URL (agents.default.base_url): Value error, expected http://"),
    ({"AMARIS_SCORER_BASE_URL": "http:///v1"}, "AMARIS_SCORER_BASE_URL (agents.scorer.base_url): Value error, expected http://"),
])
def test_a_base_url_no_request_can_be_sent_to_is_refused_naming_its_variable(environ: dict[str, str], said: str,
                                                                            tmp_path: Path) -> None:
    """An unparsable base URL was a traceback from the HTTP client; one without a scheme, a host or a valid port was
    retried as an outage for llm.outage_budget (two minutes a step) before the step failed."""
    with pytest.raises(ConfigError) as error:
        load_settings(environ=environ)
    assert f"environment (AMARIS_*/OPENAI_* variables): {said}" in str(error.value)
    from tests.conftest import EXAMPLES, invoke, new_run

    run = new_run(tmp_path)
    result = invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0", "--wait", "1",
                    env={**environ, "OPENAI_API_KEY": "k"})
    assert result.exit_code == 2 and "Traceback" not in result.stderr and said in result.stderr, result.stderr
    assert not (run / "steps").exists()


@pytest.mark.parametrize(("flag", "weight", "text"), [
    ("2:The final answer is correct.", 2.0, "The final answer is correct."),
    (" 2 : The final answer is correct.", 2.0, "The final answer is correct."),
    ("correct=.5:The final answer is correct.", 0.5, "The final answer is correct."),
    ("1e-1:The final answer is correct.", 0.1, "The final answer is correct."),
    ("Note: the final answer is correct.", 1.0, "Note: the final answer is correct."),
    ("NaN: the response says that 0/0 has no value.", 1.0, "NaN: the response says that 0/0 has no value."),
])
def test_an_anchor_flags_weight_is_read_in_any_number_form(tmp_path: Path, flag: str, weight: float, text: str) -> None:
    """`--anchor ' 2 : TEXT'` or `.5:TEXT` kept the number as the start of the text and gave the anchor weight 1."""
    import json

    from tests.conftest import invoke

    result = invoke("init", tmp_path / "run", "--anchor", flag)
    assert result.exit_code == 0, result.stderr
    (anchor,) = json.loads((tmp_path / "run" / "rubrics" / "step-000000.json").read_text())["anchors"]
    assert (anchor["weight"], anchor["text"]) == (weight, text)


@pytest.mark.parametrize("flag", ["correct=-1:The final answer is correct.", "1e400:The final answer is correct.",
                                  "0:The final answer is correct.", "1_:The final answer is correct."])
def test_an_anchor_flags_weight_that_is_not_positive_is_refused(tmp_path: Path, flag: str) -> None:
    from tests.conftest import invoke

    result = invoke("init", tmp_path / "run", "--anchor", flag)
    assert result.exit_code == 2 and f"--anchor {flag!r}: weight must be a positive number" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("row", "reason"), [
    ('{"instance_id": "q1", "adaptive": [{"id": "work", "text": "The response shows its work clearly.", "weight": 2}], '
     '"adaptive": []}', ":1: duplicate key 'adaptive'"),
    ('{"instance_id": "q1", "adaptive": [{"id": "work", "text": "The response shows its work clearly.", "weight": true}]}',
     ":1: adaptive.0.weight: Input should be a valid number"),
    ('{"instance_id": "q1", "adaptive": [{"id": "work", "text": "The response shows its work clearly.", "weight": "2"}]}',
     ":1: adaptive.0.weight: Input should be a valid number"),
    ('{"instance_id": "q1", "anchors": [], "adaptive": [{"id": "work", "text": "The response shows its work clearly.", '
     '"weight": 2}]}', ":1: no anchor criteria"),  # as the run's rubric is refused without any
])
def test_an_instance_rubric_read_another_way_than_written_is_refused(tmp_path: Path, row: str, reason: str) -> None:
    """A key given twice kept the last list (the instance's criteria dropped); `true` was read as weight 1.0; an empty
    anchors list left the instance without anchors, where the run's rubric is refused without any."""
    from tests.conftest import TEST_CONFIG, invoke

    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG.replace("[pipeline]\n", "[pipeline]\nper_instance = true\n"))
    rubrics = tmp_path / "instances.jsonl"
    rubrics.write_text(row + "\n")
    result = invoke("init", tmp_path / "run", "--config", config, "--instance-rubrics", rubrics)
    assert result.exit_code == 2 and f"{rubrics}{reason}" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


def _init_with_an_unwritten_fifo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fifo: Path, *args: object) -> Any:
    """`amaris init RUN ARGS` where `fifo` is a FIFO no process opens for writing: refused within 10 s, RUN not made."""
    import os
    import threading
    import time

    from amaris_cli import inputfiles
    from tests.conftest import invoke

    monkeypatch.setattr(inputfiles, "FIFO_WRITER_WAIT_S", 0.5)
    os.mkfifo(fifo)
    unblock = threading.Timer(20, lambda: open(fifo, "wb").close())  # a reader that waits for ever is let go
    unblock.start()
    started = time.monotonic()
    try:
        result = invoke("init", tmp_path / "run", *args)
    finally:
        unblock.cancel()
    assert time.monotonic() - started < 10, "init waited for a writer"
    assert result.exit_code == 2 and f"{fifo}: no process wrote to this pipe" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()
    return result


def test_an_instance_rubrics_fifo_nobody_writes_to_is_refused_in_bounded_time(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import TEST_CONFIG

    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG.replace("[pipeline]\n", "[pipeline]\nper_instance = true\n"))
    fifo = tmp_path / "instances.jsonl"
    _init_with_an_unwritten_fifo(tmp_path, monkeypatch, fifo, "--config", config, "--instance-rubrics", fifo)


def test_a_config_fifo_nobody_writes_to_is_refused_in_bounded_time_and_a_written_one_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--config <(...)` is a pipe with a writer and is read; a FIFO nobody opened for writing made init wait for ever."""
    import threading

    from tests.conftest import TEST_CONFIG, invoke

    fifo = tmp_path / "c.toml"
    _init_with_an_unwritten_fifo(tmp_path, monkeypatch, fifo, "--config", fifo)

    def write() -> None:
        with open(fifo, "w") as pipe:
            pipe.write(TEST_CONFIG)

    writer = threading.Thread(target=write)
    writer.start()
    result = invoke("init", tmp_path / "run", "--config", fifo)
    writer.join(10)
    assert result.exit_code == 0, result.stderr
    directory = invoke("init", tmp_path / "other", "--config", tmp_path)
    assert directory.exit_code == 2 and f"{tmp_path}: is a directory, expected a TOML file" in directory.stderr


def test_every_amaris_variable_the_package_names_is_one_it_reads() -> None:
    """The list the unknown-variable note checks against holds every AMARIS_* name the package and the shipped
    examples spell out (a variable added without it would be called unknown while it is read)."""
    from amaris_cli.config import environment_variables
    from tests.conftest import ROOT

    named = {m for path in [*(ROOT / "amaris_cli").rglob("*.py"), *(ROOT / "examples").rglob("*.py"),
                            *(ROOT / "examples").rglob("*.sh")]
             for m in re.findall(r"AMARIS_[A-Z][A-Z_]*[A-Z]", path.read_text(encoding="utf-8"))}
    assert named - environment_variables() == {"AMARIS_SCORE_MODEL"}  # (the misspelling config.py's docstring shows)


def test_a_misspelt_amaris_variable_is_named_not_ignored_in_silence(tmp_path: Path, sim) -> None:
    """AMARIS_SCORE_MODEL (for AMARIS_SCORER_MODEL) was ignored without a word: the run asked another model than the
    one written. An API key variable the config names is read, and is not called unknown."""
    from tests.conftest import EXAMPLES, invoke, judge_env, new_run

    run = new_run(tmp_path, extra='\n[agents.scorer]\napi_key_env = "AMARIS_JUDGE_KEY"\n')
    env = {**judge_env(sim), "AMARIS_SCORE_MODEL": "judge-b", "AMARIS_JUDGE_KEY": "k"}
    result = invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0", env=env)
    assert result.exit_code == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert ("$AMARIS_SCORE_MODEL is set, but amaris reads no such variable ($AMARIS_SCORER_MODEL?): it is ignored"
            in said), said
    assert "AMARIS_JUDGE_KEY" not in said


def test_an_embeddings_base_url_no_request_can_be_sent_to_is_refused_naming_the_file(tmp_path: Path) -> None:
    """The agents' base URLs were checked, the memory's embeddings endpoint not: `localhost:8000/v1` was retried."""
    config = tmp_path / "c.toml"
    config.write_text('[memory]\nembedding = "openai"\nembedding_base_url = "localhost:8000/v1"\n')
    with pytest.raises(ConfigError) as error:
        load_settings(config_file=config, environ={})
    assert f"{config}: memory.embedding_base_url: Value error, expected http://" in str(error.value)
