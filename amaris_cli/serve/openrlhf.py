"""OpenRLHF's remote reward model protocol (`--reward.remote_url URL`), as OpenRLHF 0.11.2 speaks it.

Read from OpenRLHF's code (openrlhf/utils/agent.py, SingleTurnAgentExecutor): after generating one
response, each rollout worker POSTs to URL itself (the whole URL; OpenRLHF's own reward server,
openrlhf/cli/serve_rm.py, serves it at `/get_reward`), with aiohttp, a 180 s timeout and 5 tries a
second apart:

    {"query": [prompt + response], "prompts": [prompt], "labels": [label]}

`query` is the prompt's and the response's tokens decoded together with the special tokens kept (an
EOS marker may end it); `prompts` the prompt text as given to generation (after the chat template);
`labels` the `--data.label_key` column. One response per request (lists of one), several URLs are used
in turn. The answer is a JSON object; OpenRLHF reads `rewards` as the reward, `scores` as the score
(`rewards` when absent), and logs each `extra_logs` entry. serve_rm.py answers lists, one entry per
query: `{"rewards": [...], "scores": [...], "extra_logs": {"name": [...]}}`. A request that keeps
failing is logged and leaves the sample without a reward. The request names no step and no rollout.

`amaris serve` takes these at `POST /get_reward` (OPENRLHF_PATH, serve_rm.py's path): give OpenRLHF
`--reward.remote_url http://HOST:PORT/get_reward`. Each query becomes one rollout of the server's open
step (the request names no step; `--rollouts-per-step N` closes each step). tests/test_openrlhf.py checks
the shapes and the route against OpenRLHF's own client code.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

OPENRLHF_PATH = "/get_reward"


class OpenRLHFRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    query: list[str]
    prompts: list[str]
    labels: list[Any] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned(self) -> OpenRLHFRequest:
        if len(self.prompts) != len(self.query) or (self.labels and len(self.labels) != len(self.query)):
            raise ValueError(f"query, prompts and labels must have one entry per response: got {len(self.query)}, "
                             f"{len(self.prompts)} and {len(self.labels)}")
        return self

    def label(self, i: int) -> Any:
        return self.labels[i] if self.labels else None

    def response(self, i: int) -> str:
        """The response of query i: the query after its prompt. A query that does not start with its
        prompt (OpenRLHF cuts the front of a prompt longer than its budget) cannot be split: an error,
        never a guessed response."""
        query, prompt = self.query[i], self.prompts[i]
        if not query.startswith(prompt):
            raise ValueError(f"query {i} does not start with its prompt (a prompt OpenRLHF truncated, or a tokenizer "
                             "whose decoding changes the text): the response cannot be told from the prompt")
        return query[len(prompt):]


class OpenRLHFResponse(BaseModel):
    """One entry per query, as serve_rm.py answers. `scores` is what OpenRLHF logs as the score (the
    reward again, as serve_rm.py sends)."""

    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]] = Field(default_factory=dict)

    @classmethod
    def of(cls, rewards: list[float], **extra_logs: list[float]) -> OpenRLHFResponse:
        return cls(rewards=rewards, scores=list(rewards), extra_logs=extra_logs)
