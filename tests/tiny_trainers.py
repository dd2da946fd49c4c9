"""Real trainers on a model small enough for a CPU test: TRL's GRPOTrainer on a Qwen2 of a few thousand
parameters built from a config, with a character-level tokenizer built here (no hub, no download), and
verl `DataProto` batches as verl's reward managers receive them. Imported only when torch, trl and verl
are installed (tests/test_trainers_real.py skips otherwise; bench/trl_step.py needs them)."""

from __future__ import annotations

import atexit
import shutil
import string
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback
from transformers.trainer_callback import PrinterCallback

SPECIALS = ["<pad>", "<eos>", "<unk>"]
CHAT_TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}[assistant] {% endif %}")


def tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable character: a BPE with no merges, decoded by joining the characters."""
    vocab = {t: i for i, t in enumerate(SPECIALS + list(string.printable))}
    inner = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    inner.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def model(tok: PreTrainedTokenizerFast, *, hidden: int = 16, layers: int = 1, seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=256, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         bos_token_id=None)
    return Qwen2ForCausalLM(config)


def arithmetic(n: int = 64, *, conversational: bool = False) -> Dataset:
    """Prompts with a `solution` column (TRL passes it to reward functions) and a prompt `id`."""
    rows = []
    for i in range(n):
        question = f"What is {i} + {i}?"
        rows.append({"prompt": [{"role": "user", "content": question}] if conversational else question,
                     "solution": str(2 * i), "id": f"q{i}"})
    return Dataset.from_list(rows)


@dataclass
class StepTimes(TrainerCallback):
    """The wall time of each optimizer step, from TRL's own step callbacks."""

    times: list[float] = field(default_factory=list)
    _start: float = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._start = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.times.append(time.perf_counter() - self._start)


def grpo(reward_funcs: Sequence[Callable[..., Any]], *, steps: int, gradient_accumulation_steps: int = 1,
         steps_per_generation: int | None = None, num_iterations: int = 1, per_device_batch: int = 4,
         num_generations: int = 4, completion_tokens: int = 8, conversational: bool = False, hidden: int = 16,
         layers: int = 1, callbacks: Sequence[TrainerCallback] = (), checkpoints: Path | None = None,
         resume_from: Path | None = None, prompts: int | None = None) -> Any:
    """TRL's real GRPOTrainer on CPU, trained for `steps` optimizer steps; returns the trainer. With
    `checkpoints`, a checkpoint is saved there after every optimizer step; `resume_from` names one to resume.
    `prompts`: the dataset's size (default: more than the steps take, so that no epoch ends)."""
    from trl import GRPOConfig, GRPOTrainer

    tok = tokenizer()
    if checkpoints is None:
        output_dir = tempfile.mkdtemp(prefix="amaris-grpo-")
        atexit.register(shutil.rmtree, output_dir, True)  # the trainer saves nothing there, but TRL wants one
    else:
        output_dir = str(checkpoints)
    args = GRPOConfig(output_dir=output_dir, per_device_train_batch_size=per_device_batch,
                      num_generations=num_generations, gradient_accumulation_steps=gradient_accumulation_steps,
                      steps_per_generation=steps_per_generation, num_iterations=num_iterations,
                      max_completion_length=completion_tokens, max_steps=steps, logging_steps=1, report_to=[],
                      use_cpu=True, save_strategy="no" if checkpoints is None else "steps", save_steps=1, seed=0,
                      disable_tqdm=True, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model(tok, hidden=hidden, layers=layers), processing_class=tok,
                          reward_funcs=list(reward_funcs), args=args,
                          train_dataset=arithmetic(prompts or 64 * max(1, steps), conversational=conversational),
                          callbacks=list(callbacks))
    trainer.remove_callback(PrinterCallback)  # its dict per logged step says nothing a test or benchmark reads
    trainer.train(resume_from_checkpoint=None if resume_from is None else str(resume_from))
    return trainer


# --- verl ------------------------------------------------------------------------------------------


def verl_batch(tok: PreTrainedTokenizerFast, rows: Sequence[dict[str, Any]], *, prompt_len: int = 24,
               response_len: int = 40, tool_extra_fields: Sequence[dict[str, Any]] | None = None,
               split: str = "train") -> Any:
    """A `DataProto` as verl's reward managers read it: left-padded `prompts`, right-padded `responses`,
    their `attention_mask`, and the non-tensor fields `data_source`, `reward_model.ground_truth` and
    `extra_info` (plus `tool_extra_fields`, which verl's agent loop adds, when given; `split` as verl's
    preprocessing scripts write it, "test" for a validation set). Each row: question, response, answer, index."""
    from tensordict import TensorDict
    from verl import DataProto

    prompts = torch.full((len(rows), prompt_len), tok.pad_token_id, dtype=torch.long)
    responses = torch.full((len(rows), response_len), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), prompt_len + response_len), dtype=torch.long)
    for i, row in enumerate(rows):
        p = tok(row["question"])["input_ids"][-prompt_len:]
        r = tok(row["response"])["input_ids"][:response_len]
        prompts[i, prompt_len - len(p):] = torch.tensor(p)
        responses[i, :len(r)] = torch.tensor(r)
        mask[i, prompt_len - len(p):prompt_len + len(r)] = 1
    batch = TensorDict({"prompts": prompts, "responses": responses, "attention_mask": mask,
                        "input_ids": torch.cat([prompts, responses], dim=1)}, batch_size=len(rows))
    non_tensor: dict[str, np.ndarray] = {
        "data_source": np.array(["openai/gsm8k"] * len(rows), dtype=object),
        "reward_model": np.array([{"ground_truth": row["answer"], "style": "rule"} for row in rows], dtype=object),
        "extra_info": np.array([{"index": row["index"], "split": split, "question": row["question"]}
                                for row in rows], dtype=object),
    }
    if tool_extra_fields is not None:
        non_tensor["tool_extra_fields"] = np.array(list(tool_extra_fields), dtype=object)
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def recording(reward: Callable[..., list[float | None]], seen: list[dict[str, Any]]) -> Callable[..., list[float | None]]:
    """`reward` as a TRL reward function that also records each call's optimizer step and rewards in `seen`."""

    def amaris(prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
        got = reward(prompts, completions, **kwargs)
        seen.append({"global_step": kwargs["trainer_state"].global_step, "rewards": got})
        return got

    return amaris


def main() -> None:
    """One process of a multi-process GRPO run (`torchrun --nproc_per_node 2 -m tests.tiny_trainers STEPS
    STEPS_PER_GENERATION OUT URL...`): for each URL in turn, a training with TRLReward against the server
    there (one pair of processes trains against several servers: each process pays the imports once); each
    process writes the global steps and rewards it saw in training i to OUT.i.RANK.json."""
    import json
    import sys

    from amaris_cli.serve.adapters import TRLReward

    steps, per_generation, out, urls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    for i, url in enumerate(urls):
        seen: list[dict[str, Any]] = []
        trainer = grpo([recording(TRLReward(url), seen)], steps=steps, steps_per_generation=per_generation)
        with open(f"{out}.{i}.{trainer.accelerator.process_index}.json", "w") as f:
            json.dump({"world": trainer.accelerator.num_processes, "calls": seen}, f)


if __name__ == "__main__":
    main()
