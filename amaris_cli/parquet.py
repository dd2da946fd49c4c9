"""Rollout files in Parquet: each row a rollout line, as the JSONL reader reads it.

OpenPipe ART logs each step's trajectories as `trajectories/SPLIT/NNNN.parquet` (art/model.py, written by
art.utils.trajectory_logging): a row per Trajectory with `messages` flattened to `{role, content, tool_calls
(JSON text), tool_call_id, trainable}` and `metadata`, `metrics`, `tools` as JSON text. Such a row is read back
as ART reads it (`_unflatten_message`): the messages as `messages_and_choices` and those columns as the JSON
they hold. Any other Parquet row is taken as it is (nested columns as JSON objects), so the field aliases of
the README apply to both. Row N of the file is "line N" in errors.

Parquet needs pyarrow (`pip install 'amaris[parquet]'`); nothing else imports it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.errors import InputError
from amaris_cli.inputfiles import MAX_INPUT_BYTES, format_size

ART_JSON_COLUMNS = ("metadata", "metrics", "tools", "group_metadata", "group_metrics")
ART_MESSAGE_FIELDS = {"role", "content", "tool_calls", "tool_call_id", "trainable"}


def parquet_as_jsonl(data: bytes, path: Path, max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The rows of a Parquet file as JSONL lines, in file order; at most `max_bytes` of them, as for a JSONL input
    (compressed columns can hold far more than the file's size)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(path, "reading Parquet needs pyarrow: pip install 'amaris[parquet]' (or pyarrow)") from None
    lines = []
    total = 0
    for number, row in enumerate(_rows(pq, data, path), start=1):
        try:
            lines.append(orjson.dumps(_art_row(row) if _is_art(row) else row, default=str))
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise InputError(path, f"row cannot be read as JSON ({exc})", number) from None
        total += len(lines[-1]) + 1
        if total > max_bytes:
            raise InputError(path, f"its rows come to more than the {format_size(max_bytes)} input limit as JSON lines "
                             f"(at row {number}); split the file") from None
    return b"\n".join(lines) + b"\n" if lines else b""


def _rows(pq: Any, data: bytes, path: Path) -> Iterator[dict[str, Any]]:
    """The file's rows a batch at a time (so the input limit stops a large file before it is all in memory)."""
    try:
        for batch in pq.ParquetFile(io.BytesIO(data)).iter_batches(batch_size=1024):
            yield from batch.to_pylist()
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors (ArrowInvalid, OSError) for a file that is not Parquet
        raise InputError(path, f"not a readable Parquet file ({type(exc).__name__}: {exc})") from None


def _is_art(row: dict[str, Any]) -> bool:
    messages = row.get("messages")
    return (isinstance(messages, list) and bool(messages)
            and all(isinstance(m, dict) and set(m) == ART_MESSAGE_FIELDS for m in messages))


def _art_row(row: dict[str, Any]) -> dict[str, Any]:
    """An ART trajectory row as the Trajectory it was (its JSON columns parsed, its messages unflattened)."""
    out = {k: v for k, v in row.items() if k != "messages"}
    for column in ART_JSON_COLUMNS:
        text = out.get(column)
        if isinstance(text, str):
            try:
                out[column] = orjson.loads(text)
            except orjson.JSONDecodeError:
                pass  # left as the text it is: the reader says what is wrong with it, should it be read
        elif text is None:
            out.pop(column, None)
    out["messages_and_choices"] = [_message(m) for m in row["messages"]]
    return out


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    """As ART's `_unflatten_message`: role and content, and the tool calls or tool call id when there are."""
    message: dict[str, Any] = {"role": flat["role"], "content": flat["content"]}
    if flat.get("tool_calls"):
        try:
            message["tool_calls"] = orjson.loads(flat["tool_calls"])
        except orjson.JSONDecodeError:
            message["tool_calls"] = flat["tool_calls"]
    if flat.get("tool_call_id"):
        message["tool_call_id"] = flat["tool_call_id"]
    return message
