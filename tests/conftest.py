"""Shared fixtures: W&B kept offline and out of the tree, small models and data."""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_DISABLE_GIT", "true")

FIXTURES = Path(__file__).parent / "fixtures"


def _threads_per_worker(environ: Mapping[str, str] = os.environ) -> int | None:
    """Under pytest-xdist, torch's threads per worker: the cores shared out between the
    workers. Two workers each running two threads on two cores made the suite's torch tests two
    to three times slower than one thread each (threads spinning while they wait for a core)."""
    workers = environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers or "OMP_NUM_THREADS" in environ:
        return None
    return max(1, (os.cpu_count() or 1) // int(workers))


_THREADS = _threads_per_worker()
if _THREADS is not None:  # before torch is imported: it reads the variable once, at import
    os.environ["OMP_NUM_THREADS"] = str(_THREADS)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(_THREADS)


@pytest.fixture(autouse=True)
def _wandb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / ".wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / ".wandb-cache"))
    # W&B reads WANDB_DIR once per process, when its first run starts, and keeps it until
    # wandb.teardown(): a run left by an earlier test would put this test's runs in that test's
    # folder, so the outcome would depend on which tests ran before it in its process (as
    # pytest-xdist deals them out). Each test starts without one.
    wandb = sys.modules.get("wandb")
    if wandb is not None:
        wandb.teardown()
    yield


@pytest.fixture(autouse=True)
def _cpu_unless_marked_cuda(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test not marked ``cuda`` runs the CPU paths, GPU or not: the suite decides the same
    on every machine, and the GPU's own paths are the tests marked ``cuda`` (pytest -m cuda).
    torch is imported by the test modules that use it; stagegate's tests never load it."""
    torch = sys.modules.get("torch")
    if torch is not None and request.node.get_closest_marker("cuda") is None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture(autouse=True, scope="session")
def _a_progress_lock_of_its_own() -> None:
    """tqdm's bars share one lock, which its default makes a multiprocessing lock: every
    process forked after the first bar holds the same semaphore. mutmut forks each mutant's
    test run from one process and kills the slow ones; one killed inside that lock would leave
    every later mutant hung at its first bar, and read as a timeout. A thread lock is copied
    at the fork instead, so each run has its own."""
    for name in ("tqdm.std", "tqdm.auto"):
        module = sys.modules.get(name)
        if module is not None:
            module.tqdm.set_lock(threading.RLock())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker, tests marked slow come first: the longest of them (the image's
    stand-in environment) then runs beside the others, not alone after them."""
    if hasattr(config, "workerinput"):  # every worker sorts alike: their collections must agree
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, transformers, Lightning, every test module: hundreds of
    thousands of objects) is moved out of the garbage collector's reach, as a pre-fork server
    does: a full collection, which the memory and leak probes make before each reading, then
    walks only what the tests themselves made, not every object of every library again. A
    frozen object is out of ``gc.get_objects()`` too: a tensor made at a test module's import is
    not seen by ``amptrain.probes.live_tensors``, so a test plants its leaks in its own body."""
    gc.freeze()
