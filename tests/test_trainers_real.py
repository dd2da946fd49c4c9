"""The reward adapters driven by the real trainers against a real `amaris serve`: TRL's GRPOTrainer
training a tiny model on CPU, and verl's reward managers fed real `DataProto` batches, loading
examples/serve/verl_reward.py the way verl loads a custom reward function. Skipped (with the reason)
when torch, trl or verl is not installed (tests/real_trainers.py); `.ci/run` installs them (CPU torch)."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from amaris_cli.serve.adapters import TRLReward
from amaris_cli.serve.client import AmarisClient
from tests.conftest import EXAMPLES, chat_text, free_port, new_scenario_run
from tests.real_trainers import IN_PROCESS_TRL, OTHERS
from tests.served import serve_env, served, start_server

pytestmark = pytest.mark.usefixtures("trainers")  # tests/real_trainers.py: skips without them
warnings.filterwarnings("ignore", category=UserWarning)
EXAMPLE = EXAMPLES / "serve" / "verl_reward.py"


def step_dirs(run: Path) -> list[int]:
    return sorted(int(p.name) for p in (run / "steps").iterdir() if (p / "rollouts.jsonl").exists())


def scores(run: Path, step: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "steps" / f"{step:06d}" / "scores.jsonl").read_text().splitlines()]


def rollouts(run: Path, step: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "steps" / f"{step:06d}" / "rollouts.jsonl").read_text().splitlines()]


def wait_evolved(url: str, step: int) -> None:
    status = AmarisClient(url).rubric_updated(step, timeout=120)
    assert status.state == "done", status


# --- TRL -------------------------------------------------------------------------------------------

# (gradient_accumulation_steps, steps_per_generation, num_iterations, optimizer steps, generations, prompts)
SCHEDULES = {
    "one generation per step": (1, None, 1, 3, 3, None),
    "steps_per_generation 2": (1, 2, 1, 6, 3, None),
    "accumulation 2, num_iterations 2": (2, None, 2, 4, 2, None),
    "two generations per step": (4, 2, 1, 2, 4, None),
    # 3 prompts: an epoch of 3 micro-batches, whose last optimizer step takes 1 of its 2 (generations come
    # earlier than gradient_accumulation_steps puts them: the adapter skipped step 3 and training ended in a 409)
    "accumulation 2 over epochs of 3 micro-batches": (2, 1, 1, 4, 6, 3),
}


@IN_PROCESS_TRL
@pytest.mark.parametrize("schedule", list(SCHEDULES), ids=list(SCHEDULES))
def test_trl_grpo_trainer_scores_each_generation_as_one_amaris_step(trainers, tmp_path, sim, schedule) -> None:
    accumulation, per_generation, iterations, steps, generations, prompts = SCHEDULES[schedule]
    run = new_scenario_run(tmp_path, "trl")
    with served(run, sim) as server:
        reward = TRLReward(server.url)
        seen: list[tuple[int, list[float | None], bool]] = []

        def amaris(prompts, completions, **kwargs):  # TRL's own call, passed through unchanged
            got = reward(prompts, completions, **kwargs)
            k = len(seen)
            # The generation's step is complete when the call returns: its evolution runs during training.
            seen.append((kwargs["trainer_state"].global_step, got, (run / f"steps/{k:06d}/scores.jsonl").exists()))
            return got

        trainer = trainers.grpo([amaris], steps=steps, gradient_accumulation_steps=accumulation,
                       steps_per_generation=per_generation, num_iterations=iterations,
                       conversational=schedule == "steps_per_generation 2", prompts=prompts)
        wait_evolved(server.url, generations - 1)
    batch = trainer.args.per_device_train_batch_size * trainer.args.steps_per_generation
    assert len(seen) == generations and all(complete for _, _, complete in seen), seen
    assert step_dirs(run) == list(range(generations))
    for k, (_, got, _) in enumerate(seen):
        assert len(got) == batch and all(isinstance(x, float) for x in got)
        assert sorted(got) == sorted(s["reward"] for s in scores(run, k)), f"step {k}"
        # Lag 1: generation k is scored with the version generation k-2's evolution wrote, so its call never waits
        # for the evolution of generation k-1, which runs beside the training in between.
        assert {s["rubric_version"] for s in scores(run, k)} == {max(0, k - 1)}, f"step {k}"
        assert all(r["supplemental_context"] == str(2 * int(r["instance_id"][1:])) for r in rollouts(run, k))
    if schedule == "two generations per step":
        assert [g for g, _, _ in seen] == [0, 0, 1, 1]  # TRL's global_step alone cannot tell them apart
    if schedule == "steps_per_generation 2":
        assert [g for g, _, _ in seen] == [0, 2, 4]
        assert rollouts(run, 0)[0]["input"].startswith('[\n{"role":"user","content":')  # TRL's chat prompt
    if prompts is not None:
        assert [g for g, _, _ in seen] == [0, 0, 1, 2, 2, 3]  # optimizer steps 1 and 3 end an epoch, short
    logged = [h["rewards/amaris/mean"] for h in trainer.state.log_history if "rewards/amaris/mean" in h]
    assert logged, "TRL logged no reward of the amaris function"


@IN_PROCESS_TRL
def test_trl_grpo_trainers_evaluation_is_judged_in_no_training_step(trainers, tmp_path, sim) -> None:
    """GRPOTrainer scores its evaluation with the same reward_funcs: TRLReward refused it (an evaluation's
    completions would have joined a training step). They are judged by POST /validate, in no step."""
    from trl import GRPOConfig, GRPOTrainer

    run = new_scenario_run(tmp_path, "eval")
    with served(run, sim) as server:
        tok = trainers.tokenizer()
        args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                          per_device_eval_batch_size=4, max_completion_length=4, max_steps=1, report_to=[],
                          use_cpu=True, save_strategy="no", disable_tqdm=True)
        trainer = GRPOTrainer(model=trainers.model(tok), processing_class=tok, reward_funcs=[TRLReward(server.url)], args=args,
                              train_dataset=trainers.arithmetic(8), eval_dataset=trainers.arithmetic(4))
        trainer.train()
        metrics = trainer.evaluate()
        wait_evolved(server.url, 0)
    assert step_dirs(run) == [0] and len(rollouts(run, 0)) == 4
    kept = [json.loads(line) for line in (run / "validation" / "step-000001.jsonl").read_text().splitlines()]
    assert len(kept) == 16 and {e["record"]["status"] for e in kept} == {"scored"}  # 4 prompts x 4 generations
    assert {e["rollout"]["input"] for e in kept} <= {r["prompt"] for r in trainers.arithmetic(4)}
    mean = sum(e["record"]["reward"] for e in kept) / len(kept)
    assert metrics["eval_rewards/amaris/mean"] == pytest.approx(mean, abs=1e-4)


def resumable_grpo(trainers, reward: TRLReward, out: Path, seen: list[dict[str, Any]],
                   resume_from: Path | None = None) -> Any:
    """TRL's GRPOTrainer with a checkpoint after every optimizer step, two optimizer steps per generation,
    trained for 4 optimizer steps (from `resume_from`, a checkpoint, when given)."""
    return trainers.grpo([trainers.recording(reward, seen)], steps=4, steps_per_generation=2, completion_tokens=4, checkpoints=out,
                         resume_from=resume_from)


@IN_PROCESS_TRL
def test_trl_resumed_from_a_checkpoint_numbers_its_generations_after_the_steps_the_crashed_run_completed(
        trainers, tmp_path, sim, caplog) -> None:
    """A training crashes after optimizer step 4 (amaris steps 0 and 1 complete) and resumes from its checkpoint
    at step 1, in the middle of generation 0. TRL generates afresh at the checkpoint (at optimizer steps 1 and
    3): those are new rollouts, amaris steps 2 and 3; the crashed run's steps keep their files. Then the same
    adapter resumes from that checkpoint once more, in the same process (a retry in a notebook): steps 4, 5."""
    run = new_scenario_run(tmp_path, "resumed")
    with served(run, sim) as server:
        first: list[dict[str, Any]] = []
        resumable_grpo(trainers, TRLReward(server.url), tmp_path / "out", first)
        assert [c["global_step"] for c in first] == [0, 2] and step_dirs(run) == [0, 1]
        assert not [r for r in caplog.records if r.name == "amaris"], "a fresh training is numbered from step 0 silently"
        kept = {k: (run / f"steps/{k:06d}/rollouts.jsonl").read_bytes() for k in (0, 1)}
        reward = TRLReward(server.url)  # a new process's adapter: made anew when a training resumes
        resumed: list[dict[str, Any]] = []
        resumable_grpo(trainers, reward, tmp_path / "out", resumed, resume_from=tmp_path / "out" / "checkpoint-1")
        again: list[dict[str, Any]] = []
        resumable_grpo(trainers, reward, tmp_path / "again", again, resume_from=tmp_path / "out" / "checkpoint-1")
        wait_evolved(server.url, 5)
    assert [c["global_step"] for c in resumed] == [1, 3] and [c["global_step"] for c in again] == [1, 3]
    assert [r.getMessage() for r in caplog.records if r.name == "amaris"] == [
        f"amaris: the run's steps up to {last} are complete (or being completed), so this training's generations from "
        f"optimizer step 1 are numbered from step {last + 1}: a training resumed after its crashed run went on, or a "
        "new training in a run that holds another's steps" for last in (1, 3)]
    assert step_dirs(run) == [0, 1, 2, 3, 4, 5]
    assert {k: (run / f"steps/{k:06d}/rollouts.jsonl").read_bytes() for k in (0, 1)} == kept
    for k, call in zip((2, 3, 4, 5), resumed + again, strict=True):
        got = call["rewards"]
        assert len(got) == 8 and sorted(got) == sorted(s["reward"] for s in scores(run, k)), f"step {k}"


# --- verl ------------------------------------------------------------------------------------------

ROWS = [{"question": f"What is {i} + {i}?", "response": f"{i} + {i} = {2 * i}. Final answer: {2 * i}",
         "answer": str(2 * i), "index": i} for i in range(6)]


def custom_reward(name: str) -> Any:
    """The example's function as verl loads `reward.custom_reward_function` (its own loader and wrapper)."""
    from omegaconf import OmegaConf  # verl's dependency
    from verl.trainer.ppo.reward import get_custom_reward_fn

    return get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": {
        "path": str(EXAMPLE), "name": name, "reward_kwargs": {}}}}))


def final_rewards(reward_tensor: Any, data: Any) -> list[float]:
    """The reward each manager writes at the response's last valid token."""
    prompt_len = data.batch["prompts"].shape[-1]
    lengths = data.batch["attention_mask"][:, prompt_len:].sum(dim=-1)
    return [float(reward_tensor[i, int(lengths[i]) - 1]) for i in range(len(data))]


def assert_steps_hold(run: Path, got: dict[int, list[float]]) -> None:
    assert step_dirs(run) == sorted(got)
    for step, rewards in got.items():
        stored = {r["id"]: r for r in rollouts(run, step)}
        by_index = {int(stored[s["rollout_id"]]["instance_id"]): s["reward"] for s in scores(run, step)}
        assert rewards == pytest.approx([by_index[row["index"]] for row in ROWS]), f"step {step}"
        assert all(r["input"] == ROWS[int(r["instance_id"])]["question"] for r in stored.values())


LEGACY = ["naive", "dapo", "prime"]


@OTHERS
@pytest.mark.parametrize("manager", LEGACY)
def test_verl_legacy_managers_without_a_step_fill_the_servers_steps(trainers, tmp_path, sim, monkeypatch,
                                                                   manager) -> None:
    """The legacy managers pass no step: each response joins the server's open step, which
    --rollouts-per-step closes after a batch's responses."""
    from verl.workers.reward_manager import DAPORewardManager, NaiveRewardManager, PrimeRewardManager

    run = new_scenario_run(tmp_path, manager)
    with served(run, sim, "--rollouts-per-step", len(ROWS)) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()
        cls = {"naive": NaiveRewardManager, "dapo": DAPORewardManager, "prime": PrimeRewardManager}[manager]
        scorer = cls(tokenizer=tok, num_examine=0, compute_score=custom_reward("compute_score"))
        got = {}
        for step in range(2):
            data = trainers.verl_batch(tok, ROWS)
            got[step] = final_rewards(scorer(data), data)
        wait_evolved(server.url, 1)
    assert_steps_hold(run, got)


@OTHERS
def test_verl_prime_managers_pool_asks_the_server_how_it_runs_once_per_process(trainers, tmp_path, sim,
                                                                              monkeypatch) -> None:
    """verl's prime manager scores in a process pool, sending compute_score pickled with each task: each task's
    copy of VerlReward was new, and asked GET /health twice (the server's mode, a crashed run's leftovers) for every
    response, with a connection of its own. A process's copies are one now: two GETs per process. (verl's own
    pool, at 2 processes for 6 responses; each request is recorded as it is sent, in whichever process.)"""
    import os

    import httpx
    from verl.workers.reward_manager.prime import run_reward_scoring

    sent = tmp_path / "sent.log"
    send = httpx.Client.send

    def recorded(self: httpx.Client, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        with sent.open("a") as f:
            f.write(f"{os.getpid()} {request.method} {request.url.path}\n")
        return send(self, request, **kwargs)

    monkeypatch.setattr(httpx.Client, "send", recorded)  # before verl's pool forks its processes
    run = new_scenario_run(tmp_path, "prime-pool")
    with served(run, sim, "--rollouts-per-step", len(ROWS)) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        got = run_reward_scoring(custom_reward("compute_score"), completions=[r["response"] for r in ROWS],
                                 references=[r["answer"] for r in ROWS], tasks=["openai/gsm8k"] * len(ROWS),
                                 extra_info=[{"index": r["index"], "question": r["question"]} for r in ROWS],
                                 num_processes=2)
        wait_evolved(server.url, 0)
    assert sorted(got) == pytest.approx(sorted(s["reward"] for s in scores(run, 0)))
    calls = [line.split(" ", 1) for line in sent.read_text().splitlines()]
    scorers = {pid for pid, call in calls if call == "POST /score"}
    assert len(scorers) <= 2 and sum(call == "POST /score" for _, call in calls) == len(ROWS)
    assert sum(call == "GET /health" for pid, call in calls if pid in scorers) <= 2 * len(scorers)


@OTHERS
def test_verl_legacy_naive_without_a_step_or_rollouts_per_step_is_refused(trainers, tmp_path, sim,
                                                                          monkeypatch) -> None:
    from verl.workers.reward_manager import NaiveRewardManager

    run = new_scenario_run(tmp_path, "refused")
    with served(run, sim) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()
        scorer = NaiveRewardManager(tokenizer=tok, num_examine=0, compute_score=custom_reward("compute_score"))
        with pytest.raises(ValueError, match="--rollouts-per-step"):
            scorer(trainers.verl_batch(tok, ROWS))
    assert not (run / "steps").exists()


@OTHERS
def test_verl_batch_manager_makes_each_batch_a_step(trainers, tmp_path, sim, monkeypatch) -> None:
    from verl.workers.reward_manager import BatchRewardManager

    run = new_scenario_run(tmp_path, "batch")
    with served(run, sim) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()
        scorer = BatchRewardManager(tokenizer=tok, num_examine=0, compute_score=custom_reward("compute_score_batch"))
        got = {}
        for step in range(2):
            data = trainers.verl_batch(tok, ROWS)
            got[step] = final_rewards(scorer(data), data)
            assert (run / f"steps/{step:06d}/scores.jsonl").exists(), "the batch is complete when the call returns"
        wait_evolved(server.url, 1)
    assert_steps_hold(run, got)


@OTHERS
def test_verl_reward_loop_takes_the_step_verl_streams_with_the_rollout(trainers, tmp_path, sim,
                                                                       monkeypatch) -> None:
    """verl 0.9's trainer scores through the reward loop, one response at a time in a thread pool, with
    the agent loop's `tool_extra_fields` (`global_steps`: the weights' version) merged into extra_info."""
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager import NaiveRewardManager

    run = new_scenario_run(tmp_path, "loop")
    with served(run, sim, "--rollouts-per-step", len(ROWS)) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()

        async def score(step: int) -> list[float]:
            manager = NaiveRewardManager(config=OmegaConf.create({}), tokenizer=tok,
                                         compute_score=custom_reward("compute_score"))
            fields = [{"global_steps": step, "min_global_steps": step, "max_global_steps": step} for _ in ROWS]
            data = trainers.verl_batch(tok, ROWS, tool_extra_fields=fields)
            results = await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(data))))
            return [r["reward_score"] for r in results]

        got = {step: asyncio.run(score(step)) for step in (3, 4)}
        wait_evolved(server.url, 4)
    assert_steps_hold(run, got)
    assert all("global_steps" not in r["metadata"] and "num_turns" not in r["metadata"] for r in rollouts(run, 3))


@OTHERS
def test_verl_reward_loop_without_a_question_column_judges_the_agent_loops_raw_prompt(trainers, tmp_path, sim,
                                                                                   monkeypatch) -> None:
    """verl's MATH and DAPO preprocessing write extra_info with split and index only; the agent loop puts the
    prompt's chat messages in extra_fields["raw_prompt"], which verl's reward loop merges into extra_info. Such
    rollouts were judged with an empty prompt."""
    import numpy as np
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager import NaiveRewardManager

    run = new_scenario_run(tmp_path, "raw-prompt")
    with served(run, sim, "--rollouts-per-step", len(ROWS)) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()
        fields = [{"global_steps": 0, "raw_prompt": np.array([{"role": "user", "content": row["question"]}],
                                                              dtype=object)} for row in ROWS]
        data = trainers.verl_batch(tok, ROWS, tool_extra_fields=fields)
        for i, row in enumerate(ROWS):  # as verl's MATH preprocessing writes it
            data.non_tensor_batch["extra_info"][i] = {"split": "train", "index": row["index"]}

        async def score() -> list[dict[str, Any]]:
            manager = NaiveRewardManager(config=OmegaConf.create({}), tokenizer=tok,
                                         compute_score=custom_reward("compute_score"))
            return await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(data))))

        asyncio.run(score())
        wait_evolved(server.url, 0)
    stored = rollouts(run, 0)
    assert sorted(r["input"] for r in stored) == sorted(chat_text({"role": "user", "content": row["question"]}) for row in ROWS)


VALIDATION = [{"question": f"What is {i} * 3?", "response": f"{i} * 3 = {3 * i}. Final answer: {3 * i}",
               "answer": str(3 * i), "index": 100 + i} for i in range(4)]


@OTHERS
def test_verl_validation_is_judged_beside_training_in_no_step(trainers, tmp_path, sim, monkeypatch) -> None:
    """verl scores its validation set with the training's reward function: before training (val_before_train,
    verl's default) stamped with global_steps 0 like the first training batch, and through the legacy managers
    with no step. Those responses joined training steps: under --rollouts-per-step the validation set took
    training rollouts' places and the training batch's rewards went to a later step. With extra_info["split"]
    "test" (verl's gsm8k preprocessing) they are judged by POST /validate, in no step."""
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager import NaiveRewardManager
    from verl.workers.reward_manager import NaiveRewardManager as LegacyNaiveRewardManager

    run = new_scenario_run(tmp_path, "validation")
    with served(run, sim, "--rollouts-per-step", len(ROWS)) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()

        async def score(rows: list[dict[str, Any]], step: int, split: str) -> list[float]:
            manager = NaiveRewardManager(config=OmegaConf.create({}), tokenizer=tok,
                                         compute_score=custom_reward("compute_score"))
            fields = [{"global_steps": step, "min_global_steps": step, "max_global_steps": step} for _ in rows]
            data = trainers.verl_batch(tok, rows, tool_extra_fields=fields, split=split)
            results = await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(data))))
            return [r["reward_score"] for r in results]

        validated = {0: asyncio.run(score(VALIDATION, 0, "test"))}
        got = {0: asyncio.run(score(ROWS, 0, "train"))}
        validated[1] = asyncio.run(score(VALIDATION, 1, "test"))
        got[1] = asyncio.run(score(ROWS, 1, "train"))
        legacy = LegacyNaiveRewardManager(tokenizer=tok, num_examine=0, compute_score=custom_reward("compute_score"))
        data = trainers.verl_batch(tok, VALIDATION, split="test")
        validated[2] = final_rewards(legacy(data), data)  # no step: the server's next, 2
        wait_evolved(server.url, 1)
    assert_steps_hold(run, got)
    for step, rewards in validated.items():
        kept = [json.loads(line) for line in (run / "validation" / f"step-{step:06d}.jsonl").read_text().splitlines()]
        by_input = {e["rollout"]["input"]: e["record"]["reward"] for e in kept}
        assert len(kept) == len(by_input) == len(VALIDATION), step
        assert rewards == pytest.approx([by_input[row["question"]] for row in VALIDATION]), step
        assert {e["record"]["rubric_version"] for e in kept} == {max(0, step - 1)}
        assert {e["record"]["status"] for e in kept} == {"scored"}
        # verl numbers each split's rows from 0: a validation row's instance is not the training prompt's
        assert {e["rollout"]["instance_id"] for e in kept} == {f"test-{row['index']}" for row in VALIDATION}


def torchrun(urls: list[str], out: Path, *, steps: int, per_generation: int) -> list[list[dict[str, Any]]]:
    """TRL's GRPOTrainer in two CPU processes (torch.distributed over gloo on 127.0.0.1), trained against
    each server in turn; what each rank saw, per server."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                           "127.0.0.1", "--master_port", str(port), "-m", "tests.tiny_trainers", str(steps),
                           str(per_generation), str(out), *urls], cwd=EXAMPLES.parent, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [[json.loads(Path(f"{out}.{i}.{rank}.json").read_text()) for rank in range(2)] for i in range(len(urls))]


@OTHERS
def test_trl_grpo_trainer_in_two_processes_completes_each_step_from_both_shards(tmp_path, sim) -> None:
    """Each process scores its shard of a generation (8 of 16 completions). Against a server with
    --rollouts-per-step 16, that completes the step once both shards are in and the adapters leave
    completion to it; against one without, each shard sends /complete with its rank and the server
    completes the step when both are in. (One pair of processes trains against both servers.)"""
    counted, ranked = new_scenario_run(tmp_path, "ranks"), new_scenario_run(tmp_path, "shards")
    with served(counted, sim, "--rollouts-per-step", 16) as by_count, served(ranked, sim) as by_rank:
        trainings = torchrun([by_count.url, by_rank.url], tmp_path / "seen", steps=4, per_generation=2)
        wait_evolved(by_count.url, 1)
        wait_evolved(by_rank.url, 1)
    for run, ranks in zip((counted, ranked), trainings, strict=True):
        assert [r["world"] for r in ranks] == [2, 2]
        assert all([c["global_step"] for c in r["calls"]] == [0, 2] for r in ranks)
        assert step_dirs(run) == [0, 1]
        for k in (0, 1):
            mine = sorted(x for r in ranks for x in r["calls"][k]["rewards"])
            assert len(mine) == 16 and mine == sorted(s["reward"] for s in scores(run, k)), f"{run.name} step {k}"


@OTHERS
def test_verl_batch_manager_completes_a_step_an_earlier_run_left_open_rather_than_join_it(trainers, tmp_path, sim,
                                                                                         monkeypatch) -> None:
    from verl.workers.reward_manager import BatchRewardManager

    run = new_scenario_run(tmp_path, "leftover")
    with served(run, sim) as server:
        client = AmarisClient(server.url)
        for row in ROWS[:2]:  # a crashed run's partial batch: scored, never completed
            client.score(row["question"], "left over", step=0, instance_id=str(row["index"]))
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()
        scorer = BatchRewardManager(tokenizer=tok, num_examine=0, compute_score=custom_reward("compute_score_batch"))
        data = trainers.verl_batch(tok, ROWS)
        got = final_rewards(scorer(data), data)
        wait_evolved(server.url, 1)
    assert [r["output"] for r in rollouts(run, 0)] == ["left over", "left over"]
    assert sorted(got) == pytest.approx(sorted(s["reward"] for s in scores(run, 1)))
    assert len(rollouts(run, 1)) == len(ROWS) and all(r["output"] != "left over" for r in rollouts(run, 1))


def reward_loop_training(trainers: Any, tok: Any) -> Any:
    """One run of verl's reward loop workers (the custom function loaded anew): `score(step, rows, split)` scores
    a batch as verl's naive reward loop manager does, stamped with `global_steps` step."""
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager import NaiveRewardManager

    compute_score = custom_reward("compute_score")

    async def score(step: int, rows: list[dict[str, Any]], split: str = "train") -> list[float]:
        manager = NaiveRewardManager(config=OmegaConf.create({}), tokenizer=tok, compute_score=compute_score)
        fields = [{"global_steps": step, "min_global_steps": step, "max_global_steps": step} for _ in rows]
        data = trainers.verl_batch(tok, rows, tool_extra_fields=fields, split=split)
        results = await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(data))))
        return [r["reward_score"] for r in results]

    return score


@OTHERS
def test_verl_reward_loop_resumed_after_its_crashed_run_completed_later_steps_numbers_them_after(
        trainers, tmp_path, sim, monkeypatch, caplog) -> None:
    """verl saves a checkpoint every `save_freq` steps and a crashed run went on past the last one: steps 0 and 1
    complete, step 2 half sent. Resumed from the checkpoint after step 1's update (global_step_2: verl stamps its
    next batch `global_steps` 1 again), the first response named step 1, which is complete: a 409 from every
    response, which verl's reward loop raises, and the resumed training died. The resumed batches are numbered
    after the crashed run's last complete step, as TRLReward does (the crashed run's half step 2 is discarded)."""
    run = new_scenario_run(tmp_path, "verl-resumed")
    with served(run, sim, "--rollouts-per-step", len(ROWS)) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()

        crashed = reward_loop_training(trainers, tok)
        got = {step: asyncio.run(crashed(step, ROWS)) for step in (0, 1)}
        asyncio.run(crashed(2, ROWS[:3]))  # the crash
        wait_evolved(server.url, 1)
        time.sleep(0.05)  # the resumed training starts after the crashed run's last request
        resumed = reward_loop_training(trainers, tok)
        got |= {step + 1: asyncio.run(resumed(step, ROWS)) for step in (1, 2)}
        wait_evolved(server.url, 3)
    assert_steps_hold(run, got)  # steps 0 and 1 the crashed run's, 2 and 3 the resumed batches (verl's 1 and 2)
    assert [r.getMessage() for r in caplog.records if r.name == "amaris"] == [
        "amaris: the run's steps up to 1 are complete (or being completed), so verl's steps from 1 on are numbered "
        "from step 2: a training resumed after its crashed run went on, or a new training in a run that holds "
        "another's steps"]


@OTHERS
def test_verl_validation_before_a_resumed_training_is_judged_with_the_step_its_training_is_numbered(
        trainers, tmp_path, sim, monkeypatch) -> None:
    """verl validates before training (val_before_train, its default) also when resumed: stamped with the
    checkpoint's global_steps, as the first training batch is (ray_trainer.fit: update_weights(global_steps), then
    _validate). The crashed run completed steps 0 and 1; the resumed training's batches from global_steps 1 on are
    steps 2, 3, ... But the validation came first, before anything had decided that, and was judged as step 1:
    with the rubric version of two steps back, kept beside the crashed run's step 1. It is judged as step 2 now,
    with the rubric version the resumed training's first batch gets."""
    run = new_scenario_run(tmp_path, "verl-resumed-validation")
    with served(run, sim, "--rollouts-per-step", len(ROWS)) as server:
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()
        crashed = reward_loop_training(trainers, tok)
        for step in (0, 1):
            asyncio.run(crashed(step, ROWS))
        wait_evolved(server.url, 1)
        time.sleep(0.05)  # the resumed training starts after the crashed run's last request
        resumed = reward_loop_training(trainers, tok)
        validated = asyncio.run(resumed(1, VALIDATION, "test"))  # val_before_train, in the same workers
        asyncio.run(resumed(1, ROWS))
        wait_evolved(server.url, 2)
    assert step_dirs(run) == [0, 1, 2]
    assert sorted(p.name for p in (run / "validation").iterdir()) == ["step-000002.jsonl"]
    kept = [json.loads(line) for line in (run / "validation" / "step-000002.jsonl").read_text().splitlines()]
    assert sorted(validated) == pytest.approx(sorted(e["record"]["reward"] for e in kept))
    assert {e["record"]["rubric_version"] for e in kept} == {s["rubric_version"] for s in scores(run, 2)} == {1}


@OTHERS
def test_verl_rate_limited_manager_that_gave_up_on_the_first_batch_leaves_no_step_open(trainers, tmp_path,
                                                                                       sim_factory, monkeypatch) -> None:
    """verl's rate-limited reward loop manager gives a response `reward.timeout` seconds, then trains 0.0 while
    the call goes on in its thread. A worker's first batch all timed out (a slow judge), and its calls returned
    after the next batch had begun: the adapter, completing a step at the next step's first response, had nothing
    of step 0 to complete then, and step 1's answers took its place: step 0 stayed open, and every response from
    step 2 on was a 409 (step 2 is scored with the version step 0's evolution writes), which the manager trains as
    0.0, for the rest of the training. A step's answer that comes after a later step began completes it."""
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager import RateLimitedRewardManager

    run = new_scenario_run(tmp_path, "verl-gave-up")
    with served(run, sim_factory(latency=1.0)) as server:  # no --rollouts-per-step: the adapter completes steps
        monkeypatch.setenv("AMARIS_SERVE_URL", server.url)
        tok = trainers.tokenizer()
        compute_score = custom_reward("compute_score")
        rows = ROWS[:2]

        def manager(timeout: float) -> Any:
            config = OmegaConf.create({"reward": {"timeout": timeout, "max_concurrent": 8}})
            RateLimitedRewardManager.init_class(config, tok)
            return RateLimitedRewardManager(config=config, tokenizer=tok, compute_score=compute_score)

        async def score(scorer: Any, step: int) -> list[dict[str, Any]]:
            fields = [{"global_steps": step} for _ in rows]
            data = trainers.verl_batch(tok, rows, tool_extra_fields=fields)
            return await asyncio.gather(*(scorer.run_single(data[i:i + 1]) for i in range(len(data))))

        async def worker() -> dict[int, list[dict[str, Any]]]:  # one reward loop worker: one event loop throughout
            gave_up = await score(manager(0.2), 0)
            assert all(r["reward_extra_info"].get("timeout") for r in gave_up)  # the calls go on in verl's threads
            patient = manager(120)
            return {step: await score(patient, step) for step in (1, 2)}

        got = asyncio.run(worker())
        compute_score.args[0].finish()  # the VerlReward in verl's wrapper: the last step is complete
        wait_evolved(server.url, 2)
    for step, results in got.items():
        assert not any("error" in r["reward_extra_info"] for r in results), results
        assert sorted(r["reward_score"] for r in results) == pytest.approx(sorted(s["reward"] for s in scores(run, step)))
    assert step_dirs(run) == [0, 1, 2]


@OTHERS
@pytest.mark.parametrize("completed_by", ["server", "adapter"])
def test_verl_training_goes_on_after_a_step_none_of_whose_batch_reached_the_server(trainers, tmp_path, sim,
                                                                                  monkeypatch, completed_by) -> None:
    """amaris serve restarted while verl's rate-limited reward loop manager scored step 1: every response was refused
    a connection, which the manager trains as 0.0, and training went on. A run's steps are consecutive, and nobody
    would ever send step 1: step 3 on (scored with the version step 1's evolution writes) were a 409 on every
    response, for the rest of the training. Completed by the adapter (no --rollouts-per-step), step 0's /complete,
    sent at step 1's first response, was lost too: step 0 stayed open, and step 2 on were a 409. The adapter, which
    numbered step 1 and saw none of it taken, tells the server so (POST /outage): step 1 is written with no
    rollouts and evolves as skipped (amaris's own summary, the rubric carried forward), and no reward is made up."""
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager import RateLimitedRewardManager

    run = new_scenario_run(tmp_path, "verl-outage")
    port = free_port()  # the restarted server listens where the first did
    args = ("--port", port, *(("--rollouts-per-step", len(ROWS)) if completed_by == "server" else ()))
    monkeypatch.setenv("AMARIS_SERVE_URL", f"http://127.0.0.1:{port}")
    tok = trainers.tokenizer()
    compute_score = custom_reward("compute_score")
    config = OmegaConf.create({"reward": {"timeout": 60, "max_concurrent": 8}})

    async def score(step: int) -> list[dict[str, Any]]:
        RateLimitedRewardManager.init_class(config, tok)
        manager = RateLimitedRewardManager(config=config, tokenizer=tok, compute_score=compute_score)
        data = trainers.verl_batch(tok, ROWS, tool_extra_fields=[{"global_steps": step} for _ in ROWS])
        return await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(data))))

    async def training() -> dict[int, list[dict[str, Any]]]:  # one reward loop worker: one event loop throughout
        server = start_server(run, serve_env(sim), *args)
        got = {0: await score(0)}
        assert server.stop() == 0
        got[1] = await score(1)  # the server is down
        server = start_server(run, serve_env(sim), *args)
        try:
            for step in (2, 3, 4):
                got[step] = await score(step)
            compute_score.args[0].finish()  # the VerlReward in verl's wrapper: the last step is complete
            wait_evolved(server.url, 4)
        except BaseException as exc:
            exc.add_note(f"amaris serve's stderr:\n{server.stderr}")
            raise
        finally:
            assert server.stop() == 0
        assert "Traceback" not in server.stderr, server.stderr
        return got

    got = asyncio.run(training())
    assert all("Connection refused" in r["reward_extra_info"]["error"] for r in got[1])  # verl's 0.0, not amaris's
    for step in (0, 2, 3, 4):
        assert not any("error" in r["reward_extra_info"] for r in got[step]), (step, got[step])
        assert sorted(r["reward_score"] for r in got[step]) == pytest.approx(sorted(s["reward"] for s in scores(run, step)))
    assert step_dirs(run) == [0, 1, 2, 3, 4] and rollouts(run, 1) == [] and scores(run, 1) == []
    summary = json.loads((run / "steps" / "000001" / "summary.json").read_text())
    assert summary["skipped"]["rollouts"] == 0 and "Connection refused" in summary["skipped"]["reason"]
    update = json.loads((run / "steps" / "000001" / "update.json").read_text())
    assert update["carried_forward"]["cause"] == "skipped"
    rubric = json.loads((run / "rubrics" / "step-000002.json").read_text())
    assert rubric["adaptive"] == json.loads((run / "rubrics" / "step-000001.json").read_text())["adaptive"]
    assert {s["rubric_version"] for s in scores(run, 3)} == {2}  # the carried version scores the step after it
