"""Checkpoints: written atomically, the last K kept, read back with ``weights_only``.

A checkpoint holds what a run needs to continue as if it had never stopped: the model,
optimizer, scheduler and scaler states, every random generator, and the position (epoch, batches
consumed in it, optimizer steps), plus the metrics gathered so far.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from amptrain._stack import outside_stacklevel

FORMAT = 2  # 2: the data order of each rank's epoch, and the training settings
# a checkpoint file (one process, DDP), or a sharded checkpoint's folder (FSDP)
_PATTERN = re.compile(r"^step-(\d{8,})(\.pt)?$")
SHARDS_INDEX = ".metadata"  # in a sharded checkpoint: DCP's index of the shards, written last
STATE = "trainer.pt"  # in a sharded checkpoint: the run's state besides the weights


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.pt"


def sharded_name(step: int) -> str:
    """The folder of a sharded checkpoint (FSDP) of ``step``."""
    return f"step-{step:08d}"


def rng_state() -> dict[str, Any]:
    """Python's, NumPy's, torch's and every CUDA device's generator states."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Give every generator back the state :func:`rng_state` took."""
    random.setstate(_as_tuples(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _as_tuples(value: Any) -> Any:
    """random.setstate needs tuples; a saved state may come back with lists."""
    if isinstance(value, list | tuple):
        return tuple(_as_tuples(v) for v in value)
    return value


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a file-size limit, no permission); the
    checkpoints already there are kept."""


def save(directory: str | os.PathLike[str], step: int, state: dict[str, Any], keep: int) -> Path:
    """Write ``state`` as the checkpoint of ``step`` (with :func:`write`) and delete all but
    the newest ``keep``, only once the new one is whole."""
    folder = Path(directory)
    for stale in folder.glob(".step-*.pt.*.tmp"):  # left by a run killed while it wrote
        stale.unlink(missing_ok=True)
    target = folder / checkpoint_name(step)
    write(target, {"format": FORMAT, **state})
    prune(folder, keep)
    return target


def prune(folder: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints in ``folder`` (files and sharded ones)."""
    for old in checkpoints(folder)[:-keep]:
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def write(target: Path, state: dict[str, Any]) -> None:
    """``torch.save`` ``state`` to ``target`` whole or not at all.

    The file is written under a temporary name, flushed to the disk (``fsync``), then renamed,
    and the folder's entry is flushed too: a kill or a crash at any point leaves either the
    whole new file or none, never half of one under the target's name. A write that fails (a
    full disk) deletes nothing but its own temporary file, and raises
    :class:`CheckpointWriteError`."""
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(f".{target.name}.*.tmp"):  # left by a run killed while it wrote
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        sync_folder(folder)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        cause = os_error(exc) if isinstance(exc, Exception) else None
        if cause is not None:
            raise write_error(target, folder, cause) from exc
        raise


def sync_folder(folder: Path) -> None:
    """Flush the folder's entries, so the rename itself survives a power cut."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def os_error(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc``, if any: torch's writer may raise its own RuntimeError while
    it handles the disk's (a full disk, a file-size limit)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def write_error(target: Path, folder: Path, cause: OSError) -> CheckpointWriteError:
    kept = [p.name for p in checkpoints(folder)]
    return CheckpointWriteError(
        cause.errno or 0,
        f"cannot write checkpoint {target}: {cause.strerror or cause}. Free space in {folder} "
        f"(or point checkpoint_dir elsewhere) and resume with resume_from='latest'; the "
        f"checkpoints already there are kept: {', '.join(kept) or 'none yet'}",
    )


PREVIOUS = ".previous"  # the suffix of a folder renamed aside while its new one is swapped in


def sibling(folder: Path, suffix: str) -> Path:
    """``folder``'s sibling of the same name with ``suffix`` added."""
    return folder.with_name(folder.name + suffix)


def swap_in(staging: Path, folder: Path) -> None:
    """Make the whole folder ``staging`` the new ``folder``: the old one is renamed aside, the
    new one renamed in, the old one deleted. A kill at any point leaves one whole set of files
    (weights and the model's own format agree): the old ``folder``, or its ``.previous`` sibling
    when the kill fell between the two renames (:func:`load_best` reads it then)."""
    previous = sibling(folder, PREVIOUS)
    if folder.exists():
        shutil.rmtree(previous, ignore_errors=True)
        os.replace(folder, previous)
    os.replace(staging, folder)
    sync_folder(folder.parent)
    shutil.rmtree(previous, ignore_errors=True)


def checkpoints(directory: str | os.PathLike[str]) -> list[Path]:
    """The checkpoints in ``directory`` (files, and sharded checkpoints' folders), oldest step
    first."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in folder.iterdir()
        if (m := _PATTERN.match(p.name)) and p.is_dir() == (m.group(2) is None)
    ]
    return [p for _, p in sorted(found)]


def is_sharded(path: Path) -> bool:
    """Whether ``path`` is a sharded checkpoint's folder (it holds the shards' index)."""
    return path.is_dir() and (path / SHARDS_INDEX).is_file()


def resolve(resume_from: str, checkpoint_dir: str | None) -> Path | None:
    """The file to resume from: ``resume_from`` itself, the newest in a directory, or with
    ``"latest"`` the newest in ``checkpoint_dir`` (None when there is none yet: a fresh start)."""
    if resume_from == "latest":
        if checkpoint_dir is None:
            raise ValueError("TrainConfig.resume_from='latest' needs checkpoint_dir")
        found = checkpoints(checkpoint_dir)
        return found[-1] if found else None
    path = Path(resume_from)
    if path.is_dir() and not is_sharded(path):
        found = checkpoints(path)
        if not found:
            raise ValueError(f"TrainConfig.resume_from: no checkpoint (step-*) in {path}")
        return found[-1]
    if not path.exists():
        raise ValueError(f"TrainConfig.resume_from: {path} does not exist")
    return path


def find(
    resume_from: str, checkpoint_dir: str | None, device: torch.device
) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint ``resume_from`` names (:func:`resolve`) and its state; None for a fresh
    start. In a folder (``"latest"`` or a directory) the newest file that reads whole is taken:
    a newer one that does not (cut short by a copy, a full disk or a failing disk) is passed
    over with an :class:`UnreadableCheckpointWarning` naming it. A folder whose checkpoints
    all fail to read is an error, not a fresh start."""
    path = resolve(resume_from, checkpoint_dir)
    if path is None:
        return None
    if resume_from != "latest" and path == Path(resume_from):
        return path, load(path, device)  # the checkpoint named: it reads, or the run stops
    errors = []
    for candidate in reversed(checkpoints(path.parent)):
        try:
            return candidate, load(candidate, device)
        except ValueError as exc:
            errors.append(str(exc))
            warnings.warn(
                f"skipping checkpoint {candidate}, which cannot be read; trying the one before "
                f"it ({exc})",
                UnreadableCheckpointWarning,
                stacklevel=outside_stacklevel(),
            )
    raise ValueError(
        f"no checkpoint in {path.parent} can be read: {'; '.join(errors)}. Move them away to "
        "start afresh, or restore a good copy"
    )


class UnreadableCheckpointWarning(UserWarning):
    """``resume_from="latest"`` passed over a checkpoint file that does not read."""


def load(path: Path, device: torch.device) -> dict[str, Any]:
    """Read a checkpoint (tensors only: ``weights_only``), or a ValueError naming the file. A
    sharded checkpoint's state holds ``shards``, its folder: the weights are read from there,
    by every rank (:func:`amptrain.sharded.load`)."""
    if path.is_dir() and not is_sharded(path):
        raise ValueError(f"{path} is not a whole sharded checkpoint: it has no {SHARDS_INDEX}")
    file = path / STATE if path.is_dir() else path
    try:
        state = torch.load(file, map_location=device, weights_only=True)
    except Exception as exc:  # a torn or foreign file: say which, keep the cause
        raise ValueError(f"cannot read checkpoint {file}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not an amptrain checkpoint of format {FORMAT}")
    return {**state, "shards": str(path)} if path.is_dir() else state
