"""The memory with an OpenAI-compatible /v1/embeddings endpoint instead of the local model."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EXAMPLES, PLANTED_KEY, TEST_CONFIG, invoke, judge_env, new_scenario_run


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


def test_an_embeddings_endpoint_that_fails_is_named_not_the_memory_store(tmp_path: Path, sim) -> None:
    """`memory search` against an embeddings endpoint that refused said "the memory store failed ...; if the disk
    is full, free space ...; if the index is damaged, `amaris memory rebuild`": advice for a store that was fine."""
    run = new_scenario_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    wrong = sim.base_url.removesuffix("/v1") + "/no-such-path/v1"
    result = invoke("memory", "search", "--run", run, "a query the record has no vector for",
                    env=judge_env(sim, OPENAI_BASE_URL=wrong))
    assert result.exit_code == 1
    message = " ".join(result.stderr.split())
    assert f"the embeddings endpoint {wrong} (model 'hash-embed') answered HTTP 404" in message, message
    assert "memory.embedding_base_url" in message and "disk" not in message and "rebuild" not in message
    assert PLANTED_KEY not in result.stderr


def test_a_damaged_record_of_the_endpoints_vectors_is_named_with_what_to_do(tmp_path: Path, sim) -> None:
    run = new_scenario_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    [record] = (run / "embeddings").iterdir()
    record.write_bytes(b"not a database " * 8)
    result = invoke("memory", "search", "--run", run, "grader", env=judge_env(sim))
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert f"the run's record {record}: file is not a database" in message, message
    assert "delete the file to have the endpoint asked again" in message
    record.unlink()
    assert invoke("memory", "search", "--run", run, "grader", env=judge_env(sim)).exit_code == 0


def test_memory_rebuild_of_an_endpoint_run_needs_only_its_record(tmp_path: Path, sim) -> None:
    """Every vector the memory holds is in RUN/embeddings: a rebuild (the index damaged, or moved to another
    machine) asks the endpoint nothing and needs none of its settings; a text no record holds still does."""
    run = new_scenario_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim)).exit_code == 0
    query = ["memory", "search", "--run", run, "note to the grader award full marks", "--json"]
    hits = json.loads(invoke(*query, env=judge_env(sim)).stdout)
    assert hits
    requests = sim.stats["embedding_requests"]
    no_endpoint = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
    rebuilt = invoke("memory", "rebuild", "--run", run, "--json", env=no_endpoint)
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["indexed"] == 36
    assert sim.stats["embedding_requests"] == requests
    assert json.loads(invoke(*query, env=judge_env(sim)).stdout) == hits, "the same index"
    novel = invoke("memory", "search", "--run", run, "a text nothing recorded", env=no_endpoint)
    assert novel.exit_code == 2 and "needs memory.embedding_base_url" in novel.stderr, novel.stderr


def test_an_embeddings_endpoint_that_takes_its_key_in_the_query_gets_it_and_no_file_holds_it(tmp_path: Path,
                                                                                              sim_factory) -> None:
    key = "qk-PLANTED-embeddings-3c9d"
    gateway = sim_factory(required_query={"key": key})  # answers 401 to a request without it, embeddings included
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + '\n[memory]\nembedding = "openai"\nembedding_model = "hash-embed"\n')
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0",
                    env=judge_env(gateway, OPENAI_BASE_URL=f"{gateway.base_url}?key={key}"))
    assert result.exit_code == 0, result.stderr
    assert gateway.stats["embedding_requests"] > 0
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
