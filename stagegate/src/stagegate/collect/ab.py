"""amptrain's A/B benchmark JSON (format versions 1 and 2) into :class:`stagegate.model.ABRun`.

Both sides' raw windows only: the summary a version 1 file also holds is never read (the judge
derives every ratio and interval from the windows). Reading only: a value of the wrong shape
is an InputError that names it; a figure that is absent, null or not finite is read as None,
and the judge decides what its absence means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stagegate.collect.jsonfile import finite, load_document, machine_claim
from stagegate.collect.jsonfile import text as _text
from stagegate.collect.jsonfile import whole as _whole
from stagegate.errors import InputError
from stagegate.model import ABRun, ABSide

SUPPORTED_VERSIONS = (1, 2)
KIND = "amptrain-ab"


def _figures(side: dict[str, Any], key: str, path: Path, role: str) -> tuple[float | None, ...]:
    values = side.get(key)
    if values is None:
        return ()
    if not isinstance(values, list):
        raise InputError(f"A/B file {path}: {role}.{key} is not a list")
    return tuple(finite(v) for v in values)


def _side(data: dict[str, Any], role: str, path: Path) -> ABSide:
    side = data.get(role)
    if not isinstance(side, dict):
        raise InputError(f"A/B file {path} has no {role!r} object: it must hold both sides")
    preset = side.get("preset")
    dirty = side.get("dirty")
    return ABSide(
        sha=_text(side.get("sha")),
        dirty=dirty if isinstance(dirty, bool) else None,
        preset=preset if isinstance(preset, dict) else {},
        window_s=_figures(side, "window_s", path, role),
        peak_mb=_figures(side, "peak_mb", path, role),
    )


def read_ab(path: Path) -> ABRun:
    """Read an A/B document; wrong kinds, versions and shapes are InputErrors."""
    data = load_document(path, "A/B file", KIND, SUPPORTED_VERSIONS)
    order = data.get("order")
    return ABRun(
        status=str(data.get("status")),
        error=_text(data.get("error")),
        preset=_text(data.get("preset")),
        precision=_text(data.get("precision")),
        device=_text(data.get("device")),
        windows=_whole(data.get("windows")),
        order=tuple(str(o) for o in order) if isinstance(order, list) else (),
        base=_side(data, "base", path),
        head=_side(data, "head", path),
        datetime=str(data.get("datetime", "")),
        machine=machine_claim(data.get("machine_info")),
        threads=_whole(data.get("threads")),
    )
