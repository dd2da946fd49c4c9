"""Zero the room an HNSW index file has not used yet.

ChromaDB's hnswlib writes an index's level-0 block (`data_level0.bin`) and its link-list lengths
(`length.bin`) for every element it has room for (`max_elements`, grown in batches), and the room that no
element uses yet is uninitialized memory of the writing process. It held an HTTP request with the judge's
API key once (test_reliability's planted key, in a store of 0 elements with room for 100). hnswlib clears
each element's bytes when it adds the element, so the bytes beyond the elements the index holds are the
only ones at risk: they are zeroed after the writer closes the store. A file whose layout is not the one
read here is left as it is.
"""

from __future__ import annotations

import struct
from pathlib import Path

# header.bin: int32 version, then size_t offsetLevel0, max_elements, cur_element_count, size_data_per_element
_HEADER = struct.Struct("<iQQQQ")
_LENGTH_BYTES = 4  # length.bin: one uint32 per element


def scrub_hnsw(memory_path: Path) -> int:
    """Zero the unused room of each segment's index files under the store; the number of files changed."""
    changed = 0
    for header in memory_path.glob("*/header.bin"):
        try:
            raw = header.read_bytes()
            if len(raw) < _HEADER.size:
                continue
            _, _, capacity, count, element_bytes = _HEADER.unpack_from(raw)
            if not 0 <= count <= capacity:
                continue
            for name, per_element in (("data_level0.bin", element_bytes), ("length.bin", _LENGTH_BYTES)):
                changed += _zero_tail(header.parent / name, count * per_element, capacity * per_element)
        except OSError:
            continue  # a segment being removed: nothing of it stays to leak
    return changed


def _zero_tail(path: Path, used: int, size: int) -> int:
    if not path.is_file() or path.stat().st_size != size:
        return 0
    with path.open("r+b") as handle:
        handle.seek(used)
        tail = handle.read()
        if not tail.strip(b"\0"):
            return 0
        handle.seek(used)
        handle.write(bytes(len(tail)))
    return 1
