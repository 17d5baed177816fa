"""Loss curves of the integration run, written where AMPTRAIN_INTEGRATION_METRICS points."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_CURVES: dict[str, list[float | None]] = {}
_WORKER_KEY = "amptrain_integration_curves"


@pytest.fixture
def record_curve() -> Callable[[str, list[float]], None]:
    """Keep a named curve for the stage report (values that are not finite become null)."""

    def record(name: str, values: list[float]) -> None:
        _CURVES[name] = [v if v is not None and math.isfinite(v) else None for v in values]

    return record


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the curves once every test is over (as pytest writes its JUnit file), not in a
    test's teardown: no test writes into the stage's output folder. Under pytest-xdist each
    worker hands its curves to the process that runs the workers, which writes them all."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_WORKER_KEY] = json.dumps(_CURVES)
        return
    target = os.environ.get("AMPTRAIN_INTEGRATION_METRICS")
    if target and _CURVES:
        path = Path(session.config.invocation_params.dir) / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"curves": _CURVES}, indent=2) + "\n")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A pytest-xdist worker has ended: keep the curves it recorded."""
    _CURVES.update(json.loads(getattr(node, "workeroutput", {}).get(_WORKER_KEY, "{}")))
