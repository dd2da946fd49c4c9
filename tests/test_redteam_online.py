"""Red team: `loop` beside a background `evolve`, real processes against the sim-judge over HTTP.

A shell script that evolved step 1 in the background (`evolve --step 1 &`) and then resumes with
`loop --steps 2:` must get the same run as a script that waited: the loop waits for that evolution
(up to --wait, like every pipeline command), and does not take the memory's writer lock before it
needs it (else the evolution it waits for can never finish: it waits for that lock).
"""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES, FAST_MEMORY, TEST_CONFIG, invoke, judge_env
from tests.test_online import finish, holds_step, process_env, score, start, wait_until


def test_a_loop_started_beside_a_running_evolution_waits_for_it(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=0.2)
    env = judge_env(judge)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + FAST_MEMORY)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    score(run, 0, env, "--lag", "1")
    # --concurrency 1: its 16 analyses come one after the other, so the loop starts while they do
    background = start(process_env(judge), "evolve", "--run", run, "--step", 0, "--concurrency", 1)
    wait_until(lambda: holds_step(run, 0), what="the evolution of step 0 to start")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "1:1", "--lag", "1", "--wait", "60", env=env)
    code, err, _ = finish(background)
    assert code == 0, err
    assert result.exit_code == 0, result.stderr
    assert "waiting for the evolution of step 0" in result.stderr
    assert (run / "rubrics/step-000002.json").exists()
    detail = json.loads(invoke("inspect", run, "--step", 1, "--json").stdout)["detail"]
    assert detail["state"] == "updated" and detail["stale"] == [], detail
    assert json.loads((run / "steps/000001/update.json").read_text())["from_version"] == 1
