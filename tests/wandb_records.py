"""Read the history rows of an offline W&B run file (``run-<id>.wandb``), for tests.

The file is W&B's record log: a 7-byte header (``:W&B``, magic, version), then LevelDB-log
framing (32 KiB blocks; records of crc32c(4) length(2) type(1) data, split across blocks as
FIRST / MIDDLE / LAST), each record a ``wandb_internal_pb2.Record`` protobuf.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_HEADER = 7
_BLOCK = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes) -> list[bytes]:
    out, pos, pending = [], _HEADER, b""
    while pos + _HEADER <= len(data):
        if _BLOCK - pos % _BLOCK < _HEADER:  # the rest of a block too short for a header: padding
            pos += _BLOCK - pos % _BLOCK
            continue
        length = int.from_bytes(data[pos + 4 : pos + 6], "little")
        kind = data[pos + 6]
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind == _FULL:
            out.append(chunk)
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            out.append(pending + chunk)
        else:  # zero padding at the end of a block
            pos += _BLOCK - pos % _BLOCK if pos % _BLOCK else 0
    return out


def history(path: Path) -> list[dict[str, Any]]:
    """The rows logged with ``run.log`` in the order written, as {key: value}."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for payload in _payloads(path.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows
