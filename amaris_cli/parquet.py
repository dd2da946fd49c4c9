"""Rollout files in Parquet: each row a rollout line, as the JSONL reader reads it.

OpenPipe ART logs each step's trajectories as `trajectories/SPLIT/NNNN.parquet` (art/model.py, written by
art.utils.trajectory_logging): a row per Trajectory with `messages` flattened to `{role, content, tool_calls
(JSON text), tool_call_id, trainable}` and `metadata`, `metrics`, `tools` as JSON text. Such a row is read back
as ART reads it (`_unflatten_message`): the messages as `messages_and_choices` and those columns as the JSON
they hold. Any other Parquet row is taken as it is (nested columns as JSON objects), so the field aliases of
the README apply to both. Row N of the file is "line N" in errors. Read as strictly as a JSONL line: what JSON
cannot hold (NaN, bytes) or would read as another value (a duplicate key, an integer beyond 64 bits, a column
given twice) is an error, never converted.

Parquet needs pyarrow (`pip install 'amaris[parquet]'`); nothing else imports it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.errors import InputError
from amaris_cli.inputfiles import MAX_INPUT_BYTES, format_size
from amaris_cli.jsonlimits import Unstorable, check_storable

ART_JSON_COLUMNS = ("metadata", "metrics", "tools", "group_metadata", "group_metrics")
ART_MESSAGE_FIELDS = {"role", "content", "tool_calls", "tool_call_id", "trainable"}
MAGIC = b"PAR1"  # a Parquet file's first (and last) four bytes; no JSON value starts with them


def is_parquet(data: bytes, path: Path) -> bool:
    """Whether a rollout file is read as Parquet: by its content, so `X.PARQUET`, a pipe or a misnamed file is
    not read as JSONL (an error on every line); and by its name, so a damaged `.parquet` says it is not readable."""
    return data.startswith(MAGIC) or path.suffix.lower() == ".parquet"


def parquet_as_jsonl(data: bytes, path: Path, max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The rows of a Parquet file as JSONL lines, in file order; at most `max_bytes` of them, as for a JSONL input
    (compressed columns can hold far more than the file's size: rows are made one at a time, each counted)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(path, "reading Parquet needs pyarrow: pip install 'amaris[parquet]' (or pyarrow)") from None
    lines = bytearray()  # counted as it grows (the limit stops the file at the row that passes it)
    for number, row in enumerate(_rows(pa, pq, data, path), start=1):
        try:
            _finite(row)
            lines += orjson.dumps(_art_row(row) if _is_art(row) else _not_near_art(row)) + b"\n"
        except orjson.JSONEncodeError as exc:  # bytes, durations, decimals: no JSON form, never their repr
            raise InputError(path, f"a value has no JSON form ({exc}); give such a column as text or numbers",
                             number) from None
        except (ValueError, Unstorable) as exc:
            raise InputError(path, str(exc), number) from None
        if len(lines) > max_bytes:
            raise InputError(path, f"its rows come to more than the {format_size(max_bytes)} input limit as JSON lines "
                             f"(at row {number}); split the file") from None
    return bytes(lines)


def _rows(pa: Any, pq: Any, data: bytes, path: Path) -> Iterator[dict[str, Any]]:
    """The file's rows, each made on its own (a row of a dictionary-encoded column can be many times the file)."""
    try:
        footer = pq.ParquetFile(io.BytesIO(data))
        schema = footer.schema_arrow
        names = schema.names
        # Text columns stay dictionary-encoded in a batch (one copy of a repeated value), so that only the row
        # being made is decoded: 1,024 rows sharing one 20 MB value are 3 KB on disk and 20 GB decoded.
        texts = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                 or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
        batches = pq.ParquetFile(io.BytesIO(data), metadata=footer.metadata,  # (the footer parsed once)
                                 read_dictionary=texts).iter_batches(batch_size=64)
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors (ArrowInvalid, OSError) for a file that is not Parquet
        raise InputError(path, f"not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise InputError(path, f"column {twice[0]!r} appears more than once (which one is meant is ambiguous)")
    number = 0
    while True:
        try:
            batch = next(batches, None)
        except Exception as exc:  # noqa: BLE001 - as above, for a damaged row group
            raise InputError(path, f"row group after row {number} cannot be read ({type(exc).__name__}: {exc})") from None
        if batch is None:
            return
        for index in range(batch.num_rows):
            number += 1
            try:
                row = batch.slice(index, 1).to_pylist()[0]
            except Exception as exc:  # noqa: BLE001 - a value Python cannot hold (a timestamp out of range)
                raise InputError(path, f"row cannot be read ({type(exc).__name__}: {exc})", number) from None
            yield row


def _finite(value: Any) -> None:
    """JSON has no NaN or infinity (a JSONL line holding one is refused): not read as null."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a value is {value}, which JSON has no form for")
    if isinstance(value, dict):
        for item in value.values():
            _finite(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _finite(item)


def _is_art(row: dict[str, Any]) -> bool:
    messages = row.get("messages")
    return (isinstance(messages, list) and bool(messages)
            and all(isinstance(m, dict) and set(m) == ART_MESSAGE_FIELDS for m in messages))


def _not_near_art(row: dict[str, Any]) -> dict[str, Any]:
    """A row that is not ART's, unless its messages carry ART's `trainable` with other fields than ART 0.5 writes
    and its `metadata` is text, as ART writes it (another ART version's log): read as it is, the row fails with
    "metadata must be an object", which would not say why. (A row whose metadata is not text reads as before.)"""
    messages = row.get("messages")
    if (isinstance(messages, list) and any(isinstance(m, dict) and "trainable" in m for m in messages)
            and isinstance(row.get("metadata"), str)):
        fields = sorted({k for m in messages if isinstance(m, dict) for k in m})
        raise ValueError(f"the row looks like an OpenPipe ART trajectory (its messages carry 'trainable') but its "
                         f"messages' fields are {fields}, not ART 0.5's {sorted(ART_MESSAGE_FIELDS)} (another ART "
                         "version's log?); dump each Trajectory as a JSONL line (`trajectory.model_dump_json()`)")
    return row


def _art_row(row: dict[str, Any]) -> dict[str, Any]:
    """An ART trajectory row as the Trajectory it was (its JSON columns parsed, its messages unflattened)."""
    out = {k: v for k, v in row.items() if k != "messages"}
    for column in ART_JSON_COLUMNS:
        text = out.get(column)
        if isinstance(text, str):
            out[column] = _json_text(text, f"column {column!r}")
        elif text is None:
            out.pop(column, None)
    out["messages_and_choices"] = [_message(m) for m in row["messages"]]
    # ART's v2 log keeps the whole Trajectory as JSON text and only its main history as `messages`: its other LLM
    # calls (additional_histories) are read from there, so that the reader refuses the row as it does such a line.
    if isinstance(row.get("trajectory_json"), str):
        whole = _json_text(row["trajectory_json"], "column 'trajectory_json'")
        if isinstance(whole, dict) and whole.get("additional_histories"):
            out["additional_histories"] = whole["additional_histories"]
    return out


def _json_text(text: str, what: str) -> Any:
    """JSON that ART wrote as text, read as strictly as a JSONL line (duplicate keys, integers beyond 64 bits and
    NaN refused: each would be read as a value the writer may not have meant)."""
    raw = text.encode()
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{what} is not JSON ({exc})") from None
    try:
        check_storable(raw, value)
    except Unstorable as exc:
        raise ValueError(f"{what}: {exc}") from None
    return value


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    """As ART's `_unflatten_message`: role and content, and the tool calls or tool call id when there are."""
    message: dict[str, Any] = {"role": flat["role"], "content": flat["content"]}
    if flat.get("tool_calls"):
        message["tool_calls"] = _json_text(flat["tool_calls"], "a message's tool_calls")
    if flat.get("tool_call_id"):
        message["tool_call_id"] = flat["tool_call_id"]
    return message
