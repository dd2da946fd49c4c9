"""Per-record stage output that survives interruption.

While a stage runs, each finished record is appended to a hidden journal next to the final
file. When every record is done the final file is written atomically in input order (so it
does not depend on which request finished first) and the journal is removed. A re-run reads
the journal and the final file and redoes only what is missing or failed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel

from amaris_cli.jsonio import JsonlAppender, iter_jsonl, repair_torn_tail, write_jsonl_atomic

R = TypeVar("R", bound=BaseModel)


class StageJournal(Generic[R]):
    def __init__(self, final: Path, model: type[R], key: Callable[[R], str]) -> None:
        self.final = final
        self.journal = final.with_name(f".{final.stem}.journal.jsonl")
        self.model = model
        self.key = key

    def done(self, reusable: Callable[[R], bool]) -> dict[str, R]:
        """Records already finished (final file first, journal entries override)."""
        found: dict[str, R] = {}
        repair_torn_tail(self.journal)
        for path in (self.final, self.journal):
            for row in iter_jsonl(path):
                record = self.model.model_validate(row)
                if reusable(record):
                    found[self.key(record)] = record
                else:
                    found.pop(self.key(record), None)
        return found

    def open(self) -> JsonlAppender:
        return JsonlAppender(self.journal)

    def finish(self, ordered: list[R]) -> None:
        write_jsonl_atomic(self.final, (r.model_dump(mode="json") for r in ordered))
        self.journal.unlink(missing_ok=True)
