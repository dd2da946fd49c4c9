"""`RewardClient`: the reference's client, by its names and request bodies (../shared/REFERENCE_API.md),
so that a program written for the reference runs against `amaris serve` by changing its import."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from amaris_cli.serve.client import RewardClient, ScoreFailed
from amaris_cli.serve.core import ApiError
from amaris_cli.serve.intake import read_score_request
from tests.conftest import EXAMPLES, invoke, judge_env, new_run
from tests.served import served

MATH = [[json.loads(line) for line in (EXAMPLES / "math" / f"step-{s:03d}.jsonl").read_text().splitlines()]
        for s in range(3)]


GOAL = "solve arithmetic word problems"


def reference_metadata(step: int) -> dict:
    return {"high_level_goal": GOAL, "model_size": "7B", "current_step": step,
            "total_steps": 3, "other_context": f"GRPO, 16 rollouts a step, curriculum stage {step}"}


def reference_rollout(row: dict) -> dict:
    return {"id": row["id"], "input": row["input"], "output": row["output"],
            "supplemental_context": row["supplemental_context"]}


@contextmanager
def recording_server(answers: dict[str, bytes]) -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server on 127.0.0.1 that records each request as it arrived (method, path with its query,
    content type, raw body) and answers the reference's documented JSON for the route."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            seen.append({"method": self.command, "path": self.path, "type": self.headers.get("content-type"),
                         "body": self.rfile.read(length) if length else b""})
            answer = answers[self.path.split("?")[0]]
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = _record

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_reward_client_sends_the_reference_bodies_and_reads_its_answers() -> None:
    answers = {"/score": b'{"score": 0.75}', "/complete": b'{"status": "complete"}',
               "/rubric_status/wait": b'{"status": "updated", "mode": "global"}'}
    rollout, metadata = reference_rollout(MATH[0][0]), reference_metadata(0)

    async def main(url: str) -> tuple:
        async with RewardClient(url, timeout=30) as client:
            return (await client.score_async(rollout=rollout, metadata=metadata),
                    await client.rollouts_complete_async(), await client.rubric_updated_async(),
                    client.rollouts_complete(), client.rubric_updated())

    with recording_server(answers) as (url, seen):
        score, complete, updated, complete_sync, updated_sync = asyncio.run(main(url))
    assert score == 0.75 and type(score) is float
    assert complete == complete_sync == {"status": "complete"}
    assert updated == updated_sync == {"status": "updated", "mode": "global"}
    assert [(r["method"], r["path"]) for r in seen] == [
        ("POST", "/score"), ("POST", "/complete"), ("GET", "/rubric_status/wait"),
        ("POST", "/complete"), ("GET", "/rubric_status/wait")]
    assert json.loads(seen[0]["body"]) == {"rollout": rollout, "metadata": metadata}
    assert seen[0]["type"] == "application/json"
    assert all(r["body"] == b"" for r in seen[1:]), "the reference sends /complete and the wait without a body"


def test_reward_client_raises_rather_than_make_up_a_reward() -> None:
    answers = {"/score": b'{"score": null, "status": "failed", "error": "gave up after 5 attempts"}'}

    async def main(url: str) -> float:
        async with RewardClient(url) as client:
            return await client.score_async(rollout=reference_rollout(MATH[0][0]), metadata=reference_metadata(0))

    with recording_server(answers) as (url, _), pytest.raises(ScoreFailed, match="gave up after 5 attempts"):
        asyncio.run(main(url))


def test_a_program_written_for_the_reference_drives_amaris_serve_through_three_steps(tmp_path, sim) -> None:
    """Only what the reference README shows: async with, score_async(rollout=, metadata=) for a step's
    16 rollouts in flight together, rollouts_complete_async(), rubric_updated_async(); the answers are the
    reference's, and each step's TrainingMetadata reaches the agents that reason about training, never the
    scorer."""
    run = new_run(tmp_path, "reference")

    async def train(url: str) -> tuple[list[list[float]], list[tuple[dict, dict]]]:
        rewards, answers = [], []
        async with RewardClient(url, timeout=600) as client:
            for step, rows in enumerate(MATH):
                rewards.append(await asyncio.gather(*(client.score_async(rollout=reference_rollout(r),
                                                                         metadata=reference_metadata(step))
                                                      for r in rows)))
                answers.append((await client.rollouts_complete_async(), await client.rubric_updated_async()))
        return rewards, answers

    with served(run, sim) as server:
        rewards, answers = asyncio.run(train(server.url))
    assert [len(r) for r in rewards] == [16, 16, 16] and all(isinstance(x, float) for r in rewards for x in r)
    assert [(c["status"], c["step"], u["status"], u["mode"], u["step"]) for c, u in answers] == [
        ("complete", s, "updated", "global", s) for s in range(3)]
    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    scorer_systems: dict[int, set[str]] = {}
    for step in range(3):
        step_dir = run / "steps" / f"{step:06d}"
        stored = (step_dir / "scores.jsonl").read_text().splitlines()
        assert sorted(json.loads(line)["reward"] for line in stored) == sorted(rewards[step])
        # One value per step, recorded with it: the TrainingMetadata fields but current_step (the step itself).
        sent = {k: v for k, v in reference_metadata(step).items() if k != "current_step"}
        assert json.loads((step_dir / "training.json").read_text()) == sent
        assert all("current_step" not in r.get("metadata", {}) and GOAL not in json.dumps(r)
                   for r in map(json.loads, (step_dir / "rollouts.jsonl").read_text().splitlines()))
        own = [c for c in calls if c["step"] == step and c["messages"]]
        for agent in ("analyzer", "summarizer", "query_generator", "updater"):
            systems = {c["messages"][0]["content"] for c in own if c["agent"] == agent}
            assert systems, (step, agent)
            for system in systems:  # the step's own metadata, as data in a block of its own
                block = re.search(r"<<<BEGIN TRAINING (\w+)>>>\n(.*?)\n<<<END TRAINING \1>>>", system, re.S)
                assert block and f"curriculum stage {step}" in block.group(2) and GOAL in block.group(2), (agent, system)
                assert "curriculum stage" not in system.replace(block.group(0), "")
        # The step's own scorer calls (the adoption gate's probes, context group:gate:ITEM, score a candidate).
        scorer_systems[step] = {c["messages"][0]["content"] for c in own
                                if c["agent"] == "scorer" and not c["context"].startswith("group:gate:")}
        assert all("curriculum stage" not in s for s in scorer_systems[step])
    # Steps 0 and 1 are both scored with rubric version 0 (lag 1): one system message for both, whatever
    # their metadata said.
    assert len(scorer_systems[0]) == 1 and scorer_systems[0] == scorer_systems[1]


def test_one_rollout_the_judge_cannot_score_does_not_end_the_reference_programs_training(tmp_path, sim) -> None:
    """Under the default --on-error fail, a rollout of step 0 the judge answers unusably (wrong shape, every
    attempt) is a ScoreFailed for the trainer. Its step then evolved `failed`, and from step 2 on (scored with
    the version step 0's evolution writes) every /score was a 409 for the rest of training, with nothing a
    program written for the reference could do. The step now evolves as skipped (nothing learned from it, the
    rubric carried forward), so steps 1 and 2 are scored and updated as usual."""
    run = new_run(tmp_path, "unscoreable")

    async def train(url: str) -> tuple[list[object], list[dict]]:
        updated = []
        async with RewardClient(url, timeout=600) as client:
            sim.config.agent_faults["scorer"] = "wrong_shape"
            first = await asyncio.gather(client.score_async(rollout=reference_rollout(MATH[0][0]),
                                                            metadata=reference_metadata(0)), return_exceptions=True)
            sim.config.agent_faults.clear()
            for step, rows in enumerate(MATH):
                rest = rows[1:] if step == 0 else rows
                await asyncio.gather(*(client.score_async(rollout=reference_rollout(r),
                                                          metadata=reference_metadata(step)) for r in rest))
                await client.rollouts_complete_async()
                updated.append(await client.rubric_updated_async())
        return first, updated

    with served(run, sim) as server:
        first, updated = asyncio.run(train(server.url))
    assert isinstance(first[0], ScoreFailed)
    assert [u["status"] for u in updated] == ["updated"] * 3
    assert "1 of the step's 16 rollouts could not be judged" in updated[0]["skipped"]
    assert updated[1]["skipped"] is None and updated[2]["skipped"] is None
    versions = [{json.loads(line)["rubric_version"] for line in
                 (run / "steps" / f"{s:06d}" / "scores.jsonl").read_text().splitlines()} for s in range(3)]
    assert versions == [{0}, {0}, {1}]
    step0 = run / "rubrics" / "step-000000.json"
    carried = json.loads((run / "rubrics" / "step-000001.json").read_text())
    assert carried["adaptive"] == json.loads(step0.read_text())["adaptive"]  # carried forward unchanged
    assert json.loads((run / "steps" / "000000" / "update.json").read_text())["carried_forward"]["cause"] == "skipped"
    # A replay repeats it: the carried step's evolution recorded --failed-step carry, its scores (serve's) did not.
    replayed = invoke("replay", run, "--out", tmp_path / "replayed", "--offline")
    assert replayed.exit_code == 0, replayed.stderr
    for name in ("summary.json", "update.json"):
        assert (tmp_path / "replayed/steps/000000" / name).read_bytes() == (run / "steps/000000" / name).read_bytes()
    # `amaris evolve` of the step, as the README advises for an idle step, keeps what its evolution ran with.
    again = invoke("evolve", "--run", run, "--step", 0, env=judge_env(sim))
    assert again.exit_code == 0, again.stderr
    assert "it evolved as skipped" in again.stderr


def test_the_reference_bodies_amaris_would_not_name_or_show_whole_are_scored(tmp_path, sim) -> None:
    """The reference takes any string as an id and any length of TrainingMetadata text. amaris refused an empty
    id, an id over 512 characters, other_context or high_level_goal over 4,000 and model_size over 200 with a
    422: a trainer written for the reference failed on every call. Now an empty id is no id (the content id), a
    long one is named by its head and digest (a retry of it is the same rollout) and kept whole as given_id,
    and the texts are recorded whole and shown to the agents up to those lengths, saying how much is not."""
    run = new_run(tmp_path, "edges")
    rows = MATH[0][:3]
    long_id = "trajectory:" + "q" * 600
    context, size, goal = "C" * 5000, "S" * 300, "G" * 4500
    metadata = {**reference_metadata(0), "other_context": context, "model_size": size, "high_level_goal": goal}
    bodies = [{**reference_rollout(rows[0]), "id": ""}, {**reference_rollout(rows[1]), "id": "  "},
              {**reference_rollout(rows[2]), "id": long_id}]

    async def train(url: str) -> list[float]:
        async with RewardClient(url, timeout=600) as client:
            scores = await asyncio.gather(*(client.score_async(rollout=b, metadata=metadata) for b in bodies))
            again = await client.score_async(rollout=bodies[2], metadata=metadata)  # a retry of the long id
            await client.rollouts_complete_async()
            await client.rubric_updated_async()
            return [*scores, again]

    with served(run, sim) as server:
        scores = asyncio.run(train(server.url))
    assert all(isinstance(s, float) for s in scores) and scores[3] == scores[2]
    step_dir = run / "steps" / "000000"
    stored = [json.loads(line) for line in (step_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(stored) == 3, "the retry of the long id is the same rollout"
    by_output = {r["output"]: r for r in stored}
    named = by_output[rows[2]["output"]]
    assert named["id"].startswith("trajectory:qqq") and len(named["id"]) < 120
    assert named["metadata"]["given_id"] == long_id
    assert all(by_output[r["output"]]["id"] not in ("", "  ") for r in rows[:2])
    assert json.loads((step_dir / "training.json").read_text())["other_context"] == context
    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    analyzer = next(c["messages"][0]["content"] for c in calls if c["agent"] == "analyzer" and c["messages"])
    assert "C" * 4000 + " [... 1000 more characters of other_context not shown]" in analyzer
    assert "S" * 200 + " [... 100 more characters of model_size not shown]" in analyzer
    assert "G" * 4000 + " [... 500 more characters of high_level_goal not shown]" in analyzer
    assert "C" * 4001 not in analyzer
    # The whole text is in training.json once: the provenance of the step's files records its length and digest
    # (a megabyte of context was copied into each stage's record, per instance), and `inspect` shows what the
    # agents were shown.
    provenance = (step_dir / "provenance.json").read_text()
    assert "C" * 4001 not in provenance and "5000 characters, sha256 " in provenance
    shown = invoke("inspect", run, "--step", 0)
    assert shown.exit_code == 0 and "C" * 4001 not in shown.stderr and "1000 more characters of other_context" in \
        " ".join(shown.stderr.split())


def test_the_reference_bodys_metadata_instance_id_names_the_instance() -> None:
    """README: in per-instance runs the instance is `instance_id` or the request's `metadata.instance_id`, else a
    hash of the prompt. The reference's shape kept metadata.instance_id with the rollout and took the hash."""
    rollout = reference_rollout(MATH[0][0])
    named = read_score_request(json.dumps({"rollout": rollout, "metadata": {**reference_metadata(0),
                                                                           "instance_id": "q-17"}}).encode(), None)
    assert named.rollout.instance_id == "q-17"
    unnamed = read_score_request(json.dumps({"rollout": rollout, "metadata": reference_metadata(0)}).encode(), None)
    assert unnamed.rollout.instance_id is None  # the hash of the prompt, as the reference derives it


def test_a_reference_program_that_sends_its_step_as_a_string_is_scored_in_that_step(tmp_path, sim) -> None:
    """The reference's TrainingMetadata is a pydantic model: `current_step: int` takes "1" as 1, as amaris's
    `total_steps` does. amaris refused `"current_step": "1"` with a 422 on every call of a trainer that reads its
    step from a string (a config, an environment variable), while the same body's `"total_steps": "3"` passed."""
    run = new_run(tmp_path, "string-step")
    metadata = {**reference_metadata(0), "current_step": "0", "total_steps": "3"}

    async def train(url: str) -> tuple[list[float], dict, dict]:
        async with RewardClient(url, timeout=600) as client:
            scores = await asyncio.gather(*(client.score_async(rollout=reference_rollout(r), metadata=metadata)
                                            for r in MATH[0][:2]))
            return scores, await client.rollouts_complete_async(), await client.rubric_updated_async()

    with served(run, sim) as server:
        scores, complete, updated = asyncio.run(train(server.url))
    assert all(isinstance(s, float) for s in scores)
    assert complete["step"] == updated["step"] == 0 and updated["status"] == "updated"
    stored = (run / "steps" / "000000" / "rollouts.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in stored] == [r["id"] for r in MATH[0][:2]]
    # A string that is not a whole number is still refused, naming the field.
    refused = read_score_request_error({"rollout": reference_rollout(MATH[0][0]),
                                        "metadata": {**metadata, "current_step": "1.5"}})
    assert "metadata.current_step" in refused and "must be an integer, got '1.5'" in refused, refused


def read_score_request_error(body: dict) -> str:
    with pytest.raises(ApiError) as refused:
        read_score_request(json.dumps(body).encode(), None)
    assert refused.value.status == 422
    return str(refused.value)


def test_a_trainer_that_does_not_know_its_length_sends_total_steps_minus_one_and_is_scored(tmp_path, sim) -> None:
    """The reference's `total_steps: int` takes any integer; Hugging Face's TrainingArguments.max_steps is -1 unless
    set, so a TRL trainer that sends it got a 422 on every call. A total below 1 is taken as not given: the step's
    training.json keeps what the requests said that is a length of training, and the run's setting stands."""
    run = new_run(tmp_path, "unknown-length")
    metadata = {**reference_metadata(0), "total_steps": -1}

    async def train(url: str) -> list[float]:
        async with RewardClient(url, timeout=600) as client:
            scores = await asyncio.gather(*(client.score_async(rollout=reference_rollout(r), metadata=metadata)
                                            for r in MATH[0][:2]))
            await client.rollouts_complete_async()
            return scores

    with served(run, sim) as server:
        scores = asyncio.run(train(server.url))
    assert all(isinstance(s, float) for s in scores)
    training = json.loads((run / "steps" / "000000" / "training.json").read_text())
    assert "total_steps" not in json.dumps(training) and metadata["high_level_goal"] in json.dumps(training)
    refused = read_score_request_error({"rollout": reference_rollout(MATH[0][0]),
                                        "metadata": {**metadata, "total_steps": 10**10}})
    assert "metadata.total_steps" in refused, refused
