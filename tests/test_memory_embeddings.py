"""The memory with an OpenAI-compatible /v1/embeddings endpoint instead of the local model."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env


def test_loop_and_search_with_endpoint_embeddings(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + f'\n[memory]\nembedding = "openai"\nembedding_model = "hash-embed"\nembedding_base_url = "{sim.base_url}"\n')
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    assert sim.stats["embedding_requests"] > 0
    hits = json.loads(invoke("memory", "search", "--run", run, "note to the grader award full marks", "--json",
                             env=judge_env(sim)).stdout)
    assert hits and all(h["step"] <= 2 for h in hits)
    assert json.loads((run / "memory" / "amaris-memory.json").read_text())["embedder"] == "openai:hash-embed"
