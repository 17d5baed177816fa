"""Health checks measured during a benchmark: host-device syncs, memory growth, latency."""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import torch

from amptrain.benchmark.stats import slope

_SYNC_MARKER = "synchronizing CUDA operation"  # the text of c10 warn_or_error_on_sync


def group_sync_warnings(caught: Iterable[warnings.WarningMessage]) -> list[dict[str, Any]]:
    """Group the warnings of ``torch.cuda.set_sync_debug_mode("warn")`` by source line."""
    counts: Counter[str] = Counter()
    messages: dict[str, str] = {}
    for w in caught:
        text = str(w.message)
        if _SYNC_MARKER not in text:
            continue
        location = f"{_short_path(w.filename)}:{w.lineno}"
        counts[location] += 1
        messages.setdefault(location, text.splitlines()[0][:200])
    return [
        {"location": loc, "count": n, "message": messages[loc]} for loc, n in counts.most_common()
    ]


def _short_path(path: str) -> str:
    marker = f"{os.sep}site-packages{os.sep}"
    if marker in path:
        return path.split(marker, 1)[1]
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def count_syncs(step: Callable[[], Any], steps: int, device: torch.device) -> dict[str, Any]:
    """Run ``step`` ``steps`` times under CUDA's sync debug mode and report every sync.

    Only CUDA can tell: elsewhere the result says ``measured: False``. The count and the steps
    it was counted over are written; their ratio is the judge's to take.
    """
    if device.type != "cuda":
        return {"measured": False, "count": None, "steps": None, "locations": []}
    torch.cuda.synchronize(device)
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                step()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize(device)
    locations = group_sync_warnings(caught)
    total = sum(loc["count"] for loc in locations)
    return {"measured": True, "count": total, "steps": steps, "locations": locations}


def memory_in_use_mb(device: torch.device) -> float:
    """Memory held now: CUDA tensors on a GPU, the process's resident set on a CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / 2**20
    with open("/proc/self/statm") as f:  # Linux: resident pages are the second field
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory_growth(cumulative_mb: list[float]) -> float:
    """Memory growth in MB per window, by least squares over the windows (a leak grows it).
    Not written to the file (its judge derives it from the same list); for tests and callers."""
    return slope(cumulative_mb)


def live_growth_pct(bytes_change: list[float], start_bytes: float) -> float | None:
    """Growth of Python-held tensor storage per window, in percent of what the process held
    when the arm started (a leak of a tiny model is tiny in MB, not relative to itself)."""
    return slope(bytes_change) / start_bytes * 100 if start_bytes else None


def inference_latency_ms(
    forward: Callable[[torch.Tensor], Any], samples: list[torch.Tensor], device: torch.device
) -> dict[str, Any]:
    """Per-sample forward latency in ms (the samples; their percentiles are the judge's):
    CUDA events and one synchronize at the end on a GPU."""
    times: list[float] = []
    if device.type == "cuda":
        events = []
        for sample in samples:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            forward(sample)
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(device)
        times = [s.elapsed_time(e) for s, e in events]
    else:
        for sample in samples:
            t0 = time.perf_counter()
            forward(sample)
            times.append((time.perf_counter() - t0) * 1e3)
    return {"samples_ms": times}
