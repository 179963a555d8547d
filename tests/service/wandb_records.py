"""Read the history of a W&B offline run directory, without W&B's servers or its sync command.

A `.wandb` file is W&B's record log: a 7-byte header (`:W&B`, 2 magic bytes, version 0), then
32 KiB blocks of records, each `crc32 (4) | length (2, little-endian) | type (1) | data`, where
type 1 is a whole record and 2/3/4 the first/middle/last piece of one split across blocks, and
a block's last < 7 bytes are padding. Each record's data is a `wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

from wandb.proto import wandb_internal_pb2

HEADER = 7
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _payloads(data: bytes) -> list[bytes]:
    if data[:4] != b":W&B":
        raise ValueError("not a W&B record log")
    payloads, pending, offset = [], b"", HEADER
    while offset + 7 <= len(data):
        left_in_block = BLOCK - offset % BLOCK
        if left_in_block < 7:
            offset += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        chunk = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind == FULL:
            payloads.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            payloads.append(pending + chunk)
        elif kind == 0 and length == 0:
            break  # zero padding at the end of the file
    return payloads


def _records(run_file: Path, wait_s: float) -> list[wandb_internal_pb2.Record]:
    """The file's records once W&B has written its `exit` record (its writer may lag `finish()`)."""
    deadline = time.monotonic() + wait_s
    while True:
        records = []
        for payload in _payloads(run_file.read_bytes()):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(payload)
            records.append(record)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def history(run_file: Path, wait_s: float = 60.0) -> list[dict[str, float]]:
    """Every history row (`run.log` call) of a `.wandb` file, `_step` included."""
    rows = []
    for record in _records(run_file, wait_s):
        if record.WhichOneof("record_type") == "history":
            row = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            rows.append(row)
    return rows


def offline_run_file(run_dir: Path) -> Path:
    """The one `.wandb` file of the offline run under `<run dir>/wandb/`."""
    files = sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    if len(files) != 1:
        raise AssertionError(f"expected one offline W&B run under {run_dir / 'wandb'}, found {files}")
    return files[0]
