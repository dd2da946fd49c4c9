"""Request identity.

A request is named by `sha256-v1:` + the SHA-256 of its canonical form: the JSON of
{"agent", "model", "messages", "params"} with sorted keys, no insignificant whitespace and
UTF-8 text (orjson with OPT_SORT_KEYS). `params` holds every sampling parameter that can change
the answer (temperature, max_tokens, response_format, service_tier, extra_body), never the
endpoint, the key or the timeout, which cannot. The `v1` tag names this canonical form: if it
ever changes, old and new hashes differ visibly instead of silently splitting a replay cache.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

HASH_TAG = "sha256-v1"


def canonical_request(agent: str, model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {"agent": agent, "model": model, "messages": messages, "params": params},
        option=orjson.OPT_SORT_KEYS,
    )


def request_hash(agent: str, model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    digest = hashlib.sha256(canonical_request(agent, model, messages, params)).hexdigest()
    return f"{HASH_TAG}:{digest}"
