"""The OpenRLHF remote reward model shapes (amaris_cli/serve/openrlhf.py) and `amaris serve`'s route for
them against OpenRLHF's own code: its SingleTurnAgentExecutor generates one response, POSTs it to
`--reward.remote_url` and reads the answer. The generation engine is the one stand-in (vLLM needs a
GPU): it returns fixed token ids, so the request OpenRLHF builds from them and the reading of our answer
are OpenRLHF's code, unchanged. The tests that run OpenRLHF's code skip when openrlhf (installed with
--no-deps by .ci/run) or torch is missing."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from amaris_cli.serve.client import AmarisClient
from amaris_cli.serve.openrlhf import OPENRLHF_PATH, OpenRLHFRequest, OpenRLHFResponse
from tests.conftest import new_scenario_run
from tests.real_trainers import IN_PROCESS_TRL, require
from tests.served import served
from tests.test_reference_client import recording_server

pytestmark = IN_PROCESS_TRL  # tests/real_trainers.py


@pytest.fixture(scope="module")
def agent(tiny_models):
    """OpenRLHF's agent module (installed with --no-deps by .ci/run), after the tiny model's stack."""
    return require("openrlhf.utils.agent")[0]


@pytest.fixture(scope="module")
def tok(tiny_models, agent):
    return tiny_models.tokenizer()


PROMPT = "[user] What is 6 * 7?\n[assistant] "
RESPONSE = "6 * 7 = 42. Final answer: 42"


class Engine:
    """What OpenRLHF awaits of vLLM: one completion's token ids for the prompt's."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=self.token_ids, finish_reason="stop", logprobs=None)])


def execute(agent, url: str, tok, response_ids: list[int], label: str) -> dict:
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=f"{url}{OPENRLHF_PATH}")
    params = SimpleNamespace(max_tokens=64, logprobs=None)
    return asyncio.run(executor.execute(PROMPT, label, params, 256, tok, Engine(response_ids)))


def test_openrlhf_request_and_answer_shapes(agent, tok) -> None:
    answer = OpenRLHFResponse.of([0.75], judge_failed=[0.0])
    response_ids = tok(RESPONSE)["input_ids"] + [tok.eos_token_id]
    with recording_server({"/get_reward": answer.model_dump_json().encode()}) as (url, seen):
        output = execute(agent, url, tok, response_ids, label="42")
    assert [(r["method"], r["path"]) for r in seen] == [("POST", "/get_reward")]
    request = OpenRLHFRequest.model_validate_json(seen[0]["body"])
    assert set(json.loads(seen[0]["body"])) == {"query", "prompts", "labels"}
    assert request.prompts == [PROMPT] and request.label(0) == "42"
    # The query keeps special tokens: the response ends with the EOS marker OpenRLHF decoded.
    assert request.response(0) == RESPONSE + tok.eos_token
    # OpenRLHF's reading of the answer: reward and score per sample, and the extra logs.
    assert output["reward"] == [0.75] and output["scores"] == [0.75]
    assert output["extra_logs"] == {"judge_failed": [0.0]}


def test_openrlhf_request_that_cannot_be_split_is_an_error_not_a_guess() -> None:
    request = OpenRLHFRequest(query=["pt truncated prompt\nanswer"], prompts=["a longer prompt truncated prompt\n"],
                              labels=["1"])
    with pytest.raises(ValueError, match="does not start with its prompt"):
        request.response(0)
    with pytest.raises(ValidationError, match="one entry per response"):
        OpenRLHFRequest(query=["a", "b"], prompts=["a"], labels=[])


def test_amaris_serve_answers_openrlhf_as_its_remote_reward_model(agent, tok, tmp_path, sim) -> None:
    """OpenRLHF's executor against `amaris serve --rollouts-per-step 2`: each response is one rollout of the
    server's open step (the request names none), its reward the judge's score, read by OpenRLHF's code."""
    run = new_scenario_run(tmp_path, "openrlhf")
    wrong = "6 * 7 = 41. Final answer: 41"
    with served(run, sim, "--rollouts-per-step", 2) as server:
        right_out = execute(agent, server.url, tok, tok(RESPONSE)["input_ids"] + [tok.eos_token_id], label="42")
        wrong_out = execute(agent, server.url, tok, tok(wrong)["input_ids"] + [tok.eos_token_id], label="42")
        assert AmarisClient(server.url).rubric_updated(0, timeout=120).state == "done"
    rollouts = [json.loads(x) for x in (run / "steps/000000/rollouts.jsonl").read_text().splitlines()]
    assert [(r["input"], r["output"], r["supplemental_context"]) for r in rollouts] == [
        (PROMPT, RESPONSE + tok.eos_token, "42"), (PROMPT, wrong + tok.eos_token, "42")]
    scores = [json.loads(x)["reward"] for x in (run / "steps/000000/scores.jsonl").read_text().splitlines()]
    assert right_out["reward"] == right_out["scores"] == [scores[0]]
    assert wrong_out["reward"] == [scores[1]] and scores[0] > scores[1]
    assert right_out["extra_logs"] == {"judge_failed": [0.0], "amaris_step": [0.0]}


def test_openrlhfs_resend_of_a_request_it_gave_up_waiting_for_is_the_same_rollout(agent, tok, tmp_path, sim,
                                                                                   monkeypatch) -> None:
    """OpenRLHF gives a request 180 s in all (aiohttp's total timeout), then sends it again. In sync mode an answer
    waits for the whole step and its evolution: when the batch's last responses came later than that, the resend
    was a new rollout. Step 0 held the first response twice and one other, and step 1 began with the third
    (README's setup for sync mode: --on-error neutral). OpenRLHF's code runs here with a 6 s timeout, the batch's
    other responses 7 s after the first: the first one's request gives up and is sent again (the others too
    when the step's evolution takes longer than the timeout)."""
    import aiohttp

    timeout = aiohttp.ClientTimeout
    monkeypatch.setattr(aiohttp, "ClientTimeout", lambda total=None, **kw: timeout(total=6))
    run = new_scenario_run(tmp_path, "abandoned")
    responses = [RESPONSE, "6 * 7 = 41. Final answer: 41", "It is 42. Final answer: 42"]
    outputs: dict[int, dict] = {}
    took: dict[int, float] = {}

    def send(i: int) -> None:
        started = time.monotonic()
        outputs[i] = execute(agent, server.url, tok, tok(responses[i])["input_ids"] + [tok.eos_token_id], label="42")
        took[i] = time.monotonic() - started

    with served(run, sim, "--mode", "sync", "--on-error", "neutral", "--rollouts-per-step", 3) as server:
        senders = [threading.Thread(target=send, args=(i,)) for i in range(3)]
        senders[0].start()
        time.sleep(7)
        for sender in senders[1:]:
            sender.start()
        for sender in senders:
            sender.join(120)
    assert took[0] > 6, took  # the first response's request waited past OpenRLHF's timeout: it was sent again
    rollouts = [json.loads(x) for x in (run / "steps/000000/rollouts.jsonl").read_text().splitlines()]
    assert sorted(r["output"] for r in rollouts) == sorted(r + tok.eos_token for r in responses)
    assert not (run / "steps/000001").exists()
    rescored = {json.loads(x)["rollout_id"]: json.loads(x)["reward"]
                for x in (run / "steps/000000/rescores.jsonl").read_text().splitlines()}
    by_output = {r["output"]: rescored[r["id"]] for r in rollouts}
    assert [outputs[i]["reward"] for i in range(3)] == [[by_output[r + tok.eos_token]] for r in responses]


@pytest.mark.parametrize("late", [False, True], ids=["retried before the batch is in", "retried after"])
def test_openrlhfs_retry_of_a_failed_request_is_the_same_rollout_not_a_new_one(agent, tok, tmp_path, sim,
                                                                              late) -> None:
    """OpenRLHF's executor retries a request that failed (5 tries, a second apart). The judge fails the first
    response's first request (502, no reward made up); each retry was a new id-less rollout of the open step,
    so under --rollouts-per-step 2 the failed copy and its retry filled step 0 and the second response went to
    step 1. The retry is now the failed rollout judged again in its place, also when the batch's last response
    came before it (the step then waits for the retry before it is written)."""
    from amaris_cli.rundir import RunDir
    from amaris_cli.serve.journal import journal_path
    from tests.conftest import wait_until

    run = new_scenario_run(tmp_path, "retried")
    wrong = "6 * 7 = 41. Final answer: 41"
    journal = journal_path(RunDir(run), 0)
    outputs: list[dict] = []
    with served(run, sim, "--rollouts-per-step", 2) as server:
        sim.config.agent_faults["scorer"] = "wrong_shape"
        first = threading.Thread(target=lambda: outputs.append(
            execute(agent, server.url, tok, tok(RESPONSE)["input_ids"] + [tok.eos_token_id], label="42")))
        first.start()
        # OpenRLHF waits a second before it tries again: the judge is fixed once the failure is recorded.
        wait_until(lambda: journal.exists() and '"status":"failed"' in journal.read_text().replace(" ", ""),
                   what="the first request's failure")
        sim.config.agent_faults.clear()
        if not late:
            first.join(60)
        outputs.append(execute(agent, server.url, tok, tok(wrong)["input_ids"] + [tok.eos_token_id], label="42"))
        first.join(60)
        assert AmarisClient(server.url).rubric_updated(0, timeout=120).state == "done"
    if late:
        outputs.reverse()
    rollouts = [json.loads(x) for x in (run / "steps/000000/rollouts.jsonl").read_text().splitlines()]
    assert [r["output"] for r in rollouts] == [RESPONSE + tok.eos_token, wrong + tok.eos_token]
    scores = [json.loads(x) for x in (run / "steps/000000/scores.jsonl").read_text().splitlines()]
    assert [s["status"] for s in scores] == ["scored", "scored"]
    assert [o["reward"] for o in outputs] == [[scores[0]["reward"]], [scores[1]["reward"]]]


def test_under_neutral_a_failed_response_is_answered_so_an_equal_one_is_a_new_rollout(tmp_path, sim) -> None:
    """Under --on-error neutral a failed judgement is answered (the neutral reward): OpenRLHF does not send it
    again, so a later equal response (two samples of a prompt often are) is a rollout of its own."""
    import httpx

    run = new_scenario_run(tmp_path, "neutral")
    body = {"query": [PROMPT + RESPONSE], "prompts": [PROMPT], "labels": ["42"]}
    with served(run, sim, "--rollouts-per-step", 2, "--on-error", "neutral") as server, \
            httpx.Client(base_url=server.url, timeout=60) as http:
        sim.config.agent_faults["scorer"] = "wrong_shape"
        failed = http.post(OPENRLHF_PATH, json=body).json()
        sim.config.agent_faults.clear()
        again = http.post(OPENRLHF_PATH, json=body).json()
        assert AmarisClient(server.url).rubric_updated(0, timeout=120).state == "done"
    assert failed["rewards"] == [0.5] and failed["extra_logs"]["judge_failed"] == [1.0]
    assert again["extra_logs"]["judge_failed"] == [0.0]
    scores = [json.loads(x) for x in (run / "steps/000000/scores.jsonl").read_text().splitlines()]
    assert [(s["status"], s["reward"]) for s in scores] == [("failed", 0.5), ("scored", again["rewards"][0])]


def test_two_samples_with_the_same_response_that_failed_are_each_judged_again_in_their_own_place(tmp_path,
                                                                                                  sim) -> None:
    """Two samples of a prompt with the same response send the same body. When both failed, the second failure's
    places replaced the first's: one retry was judged into the other's place, the other retry became a new
    rollout of the next step (every later batch one rollout off), and the first's rollout stayed failed in the
    step, which then evolved as skipped although the trainer had a reward for every sample."""
    import asyncio

    import httpx

    run = new_scenario_run(tmp_path, "twins")
    twin = {"query": [PROMPT + RESPONSE], "prompts": [PROMPT], "labels": ["42"]}
    other = {"query": [PROMPT + "6*7 = 41. Final answer: 41"], "prompts": [PROMPT], "labels": ["42"]}

    def together(url: str, bodies: list[dict]) -> list[httpx.Response]:  # as OpenRLHF sends a batch's samples
        async def send() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                return await asyncio.gather(*(http.post(OPENRLHF_PATH, json=b) for b in bodies))
        return asyncio.run(send())

    with served(run, sim, "--rollouts-per-step", 3) as server:
        sim.config.agent_faults["scorer"] = "wrong_shape"
        first = together(server.url, [twin, twin])
        sim.config.agent_faults.clear()
        retries = together(server.url, [twin, twin]) + together(server.url, [other])
        assert AmarisClient(server.url).rubric_updated(0, timeout=120).state == "done"
    assert [r.status_code for r in first] == [502, 502]
    assert [r.status_code for r in retries] == [200, 200, 200], [r.json() for r in retries]
    assert [r.json()["extra_logs"]["amaris_step"] for r in retries] == [[0.0]] * 3
    scores = [json.loads(x) for x in (run / "steps/000000/scores.jsonl").read_text().splitlines()]
    assert [s["status"] for s in scores] == ["scored"] * 3
    assert not (run / "steps/000001").exists()


def test_a_retried_request_of_several_responses_adds_none_of_them_again(tmp_path, sim_factory) -> None:
    """OpenRLHF's HTTP path can send several responses in one request, and retries the whole request when it
    fails. Its responses the judge scored were added again as new rollouts (taking later responses' places
    under --rollouts-per-step); now the retry is answered from the places the first try took."""
    import httpx

    run = new_scenario_run(tmp_path, "batched")
    prompts = [f"[user] What is {i} + {i}?\n[assistant] " for i in range(6)]
    body = {"query": [p + f"Final answer: {2 * i}" for i, p in enumerate(prompts)], "prompts": prompts,
            "labels": [str(2 * i) for i in range(6)]}
    last = {"query": [PROMPT + RESPONSE], "prompts": [PROMPT], "labels": ["42"]}
    judge = sim_factory(agent_fault_rate={"scorer": 0.5})  # the same questions fail on every try
    with served(run, judge, "--rollouts-per-step", 7) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        tries = [http.post(OPENRLHF_PATH, json=body) for _ in range(2)]
        judge.config.agent_fault_rate.clear()
        closing = http.post(OPENRLHF_PATH, json=last)
        assert AmarisClient(server.url).rubric_updated(0, timeout=120).state == "done"
    assert [t.status_code for t in tries] == [502, 502] and closing.status_code == 200
    assert closing.json()["extra_logs"]["amaris_step"] == [0.0]
    scores = [json.loads(x) for x in (run / "steps/000000/scores.jsonl").read_text().splitlines()]
    assert len(scores) == 7 and {s["status"] for s in scores[:6]} == {"scored", "failed"}
