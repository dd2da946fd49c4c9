"""Red team: per-instance mode in the online commands.

With `pipeline.per_instance`, updates write one rubric per instance (rubrics/instances/ID/) and none
for the run as a whole; `score --rubric-version V` must accept a version the instances have.
"""

from __future__ import annotations

import json

from tests.conftest import FAST_MEMORY, TEST_CONFIG, invoke, judge_env, write_jsonl
from tests.test_per_instance import population


def test_score_with_an_explicit_version_that_the_instances_have(tmp_path, sim) -> None:
    env = judge_env(sim)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + FAST_MEMORY)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config, "--per-instance").exit_code == 0
    step0, step1 = write_jsonl(tmp_path / "s0.jsonl", population(0)), write_jsonl(tmp_path / "s1.jsonl", population(1))
    for args in (("score", step0, "--run", run, "--step", 0), ("evolve", "--run", run, "--step", 0)):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.stderr
    assert not (run / "rubrics/step-000001.json").exists() and list((run / "rubrics/instances").glob("*/step-000001.json"))
    result = invoke("score", step1, "--run", run, "--step", 1, "--rubric-version", 1, "--json", env=env)
    assert result.exit_code == 0, result.stderr  # was: exit 2, "rubric version 1 does not exist (versions: 0)"
    assert json.loads(result.stdout)["rubric_version"] == 1
    versions = {json.loads(line)["rubric_version"] for line in (run / "steps/000001/scores.jsonl").read_text().splitlines()}
    assert versions == {1}
