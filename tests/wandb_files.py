"""Read back what a W&B run wrote to its own ``.wandb`` file (a LevelDB-style record log)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

_BLOCK = 32 * 1024
_HEADER = 7  # crc32 (4) + length (2) + record type (1)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes) -> list[bytes]:
    if data[:4] != b":W&B":
        raise ValueError("not a W&B run file")
    pos, pending, out = 7, b"", []
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # block trailer: zero padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        payload = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind == _FULL:
            out.append(payload)
        elif kind == _FIRST:
            pending = payload
        elif kind == _MIDDLE:
            pending += payload
        elif kind == _LAST:
            out.append(pending + payload)
    return out


def _key(item: object) -> str:
    return item.key or "/".join(item.nested_key)


def _records(run_dir: Path) -> list[wandb_internal_pb2.Record]:
    (run_file,) = run_dir.glob("run-*.wandb")
    out = []
    for payload in _payloads(run_file.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        out.append(record)
    return out


def run_info(run_dir: Path) -> dict[str, object]:
    """The run's project, display name, config, history rows and summary (values decoded), and
    which record kinds it holds."""
    info: dict[str, object] = {"kinds": set(), "config": {}, "history": [], "summary": {}}
    for record in _records(run_dir):
        kind = record.WhichOneof("record_type")
        info["kinds"].add(kind)
        if kind == "run":
            info["project"] = record.run.project
            info["name"] = record.run.display_name
            for item in record.run.config.update:
                info["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            row = {_key(i): json.loads(i.value_json) for i in record.history.item}
            info["history"].append({"_step": record.history.step.num, **row})
        elif kind == "summary":
            info["summary"].update(
                {_key(i): json.loads(i.value_json) for i in record.summary.update}
            )
    return info


def logged_keys(run_dir: Path) -> dict[str, set[str]]:
    """Keys found in the run's history, summary and config records."""
    keys: dict[str, set[str]] = {"history": set(), "summary": set(), "config": set()}
    for record in _records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            keys["history"].update(i.key or "/".join(i.nested_key) for i in record.history.item)
        elif kind == "summary":
            keys["summary"].update(i.key or "/".join(i.nested_key) for i in record.summary.update)
        elif kind == "config":
            keys["config"].update(i.key or "/".join(i.nested_key) for i in record.config.update)
    return keys
