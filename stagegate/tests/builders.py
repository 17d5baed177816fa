"""Hand-built records and measurements for the judge's and the views' tests, and the report
scenarios of real runs for the end-to-end ones."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path, PurePath
from xml.sax.saxutils import quoteattr

import pytest

from stagegate.cli import main
from stagegate.collect import load_record
from stagegate.errors import InputError
from stagegate.judge.policy import load_policy
from stagegate.model import (
    Benchmark,
    PrecisionResult,
    StageData,
    StageRecord,
    TestCase,
    TestSuite,
    Verdict,
)
from stagegate.report import ReportOptions, build_report

# The file a stage of that name declares unless a test says otherwise: the one the default
# policy requires of it (judged data is built by hand; nothing reads these paths).
DECLARED = {
    "static": {"lint": {"ruff": "lint-ruff.json"}},
    "execution": {"junit": "junit.xml"},
    "integration": {"junit": "junit.xml"},
    "performance": {"benchmark": "benchmark.json"},
}


# What stagegate run observes of a 2-core CPU machine without a GPU
NO_GPU = {"probe": "nvidia-smi", "found": False, "devices": [], "error": None}
CPU_MACHINE = {
    "python": "3.11.7",
    "platform": "Linux-x86_64",
    "machine": "x86_64",
    "cpu_count": 2,
    "accelerators": NO_GPU,
}


def gpu_machine(*names: str) -> dict[str, object]:
    """What stagegate run observes of a machine with GPUs named ``names``."""
    devices = [{"name": n, "driver": "580.159.04", "memory_mb": 81559} for n in names]
    return {**CPU_MACHINE, "accelerators": {**NO_GPU, "found": True, "devices": devices}}


def run_that_wrote(doc: dict) -> dict[str, object]:
    """Record fields of the stage run that wrote the output file ``doc`` (a benchmark or an
    A/B file) on the machine it names: five minutes either side of its datetime, and
    stagegate run's observation of that machine (its GPU, CPUs, architecture)."""
    info = doc.get("machine_info") if isinstance(doc.get("machine_info"), dict) else {}
    gpu = info.get("gpu_name")
    machine = gpu_machine(gpu) if isinstance(gpu, str) else dict(CPU_MACHINE)
    if isinstance(gpu, str):  # the driver's look at the GPU the file's torch saw
        device = machine["accelerators"]["devices"][0]  # type: ignore[index]
        if isinstance(info.get("driver"), str):
            device["driver"] = info["driver"].split()[0]
        if isinstance(info.get("gpu_memory_mb"), int | float):  # the driver's figure is above
            device["memory_mb"] = max(device["memory_mb"], math.ceil(info["gpu_memory_mb"]))
        device["compute_capability"] = info.get("gpu_capability")
    for key in ("cpu_count", "machine"):
        if key in info:
            machine[key] = info[key]
    try:
        written = datetime.fromisoformat(doc["datetime"])
    except (KeyError, TypeError, ValueError):
        written = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    start = (written - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    return {"start": start, "duration_s": 600.0, "environment": machine}


def record(stage: str = "execution", **kw: object) -> StageRecord:
    """A record of a stage whose command exited 0 on a CPU machine, declaring the file the
    default policy requires of the stage (``kw`` overrides any field)."""
    base = {
        "stage": stage,
        "command": ["pytest"],
        "exit_code": 0,
        "start": "2026-01-01T00:00:00Z",
        "duration_s": 1.0,
        "files": DECLARED.get(stage, {}),
        "environment": CPU_MACHINE,
        "uncommitted": [],  # run on a clean checkout of its commit
    }
    return StageRecord(**{**base, **kw})  # type: ignore[arg-type]


def _digest(raw: Path, rec: StageRecord, path: str) -> str | None:
    if not rec.out_dir:
        inside = PurePath(PurePath(path).name)
    elif PurePath(path).is_relative_to(rec.out_dir):
        inside = PurePath(path).relative_to(rec.out_dir)
    else:
        return None  # not the stage's file: locate refuses it by its place alone
    file = raw / inside
    return hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else None


def sealed(rec: StageRecord, raw: Path) -> StageRecord:
    """``rec`` with the sha256 of each file it names as ``raw`` holds it now, as stagegate run
    records it when the stage ends."""
    return replace(rec, sha256={p: _digest(raw, rec, p) for _, p, _ in rec.named_files()})


def reseal(raw: Path) -> None:
    """Every record in ``raw`` rewritten with its files' hashes as they are now: the file a
    test planted reads as written by the stage, not as changed after it."""
    for path in raw.glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError):
            continue  # some stage output, planted broken
        if isinstance(data, dict) and data.get("kind") == "stagegate-record":
            try:
                data["sha256"] = sealed(load_record(path), raw).sha256
            except InputError:
                continue  # a record planted broken: the report judges it as it is
            path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def suite(*cases: TestCase, **kw: object) -> TestSuite:
    """A suite read from ``junit.xml``."""
    return TestSuite(cases=cases, source="junit.xml", **kw)  # type: ignore[arg-type]


def case(name: str, outcome: str = "passed", **kw: object) -> TestCase:
    """A test of ``tests/t.py`` that took 10 ms unless ``duration_s`` says otherwise."""
    return TestCase(
        nodeid=f"tests/t.py::{name}",
        file="tests/t.py",
        outcome=outcome,
        duration_s=kw.pop("duration_s", 0.01),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


# The sizes a builder's benchmark says its preset ran with: 10 steps of 8 x 128 tokens a window.
# The gpu preset's sizes as the default policy declares them; the cpu-smoke run's, its own
PRESET_SPEC = {"window_steps": 10, "batch_size": 32, "seq_len": 1024, "windows": 5}
CPU_PRESET_SPEC = {**PRESET_SPEC, "batch_size": 8, "seq_len": 128}
TOKENS_PER_WINDOW = 10 * 32 * 1024
SPREAD = (0.98, 0.99, 1.0, 1.01, 1.02)  # five windows around the median: IQR 2% of it


DTYPE = {"16": "float16", "bf16": "bfloat16"}  # by a precision's prefix; float32 otherwise


def growing(per_window: float, windows: int = 5) -> tuple[float, ...]:
    """A cumulative change that grows by ``per_window`` each window (its slope)."""
    return tuple(per_window * (i + 1) for i in range(windows))


def precision(
    name: str,
    step_ms: float,
    *,
    peak_mb: float | None = 1000.0,
    accuracy: float = 0.9,
    **kw: object,
) -> PrecisionResult:
    """A clean precision result, raw figures only: five windows around ``step_ms`` a step, no
    growth, no syncs, a finite loss a timed step; CUDA memory (a fifth of it static) unless
    ``peak_mb`` is None."""
    median = step_ms * PRESET_SPEC["window_steps"] / 1e3
    base = dict(
        status="ok",
        error=None,
        precision_used="32-true" if name == "32-tf32" else name,
        float32_matmul_precision="high" if name == "32-tf32" else "highest",
        window_s=tuple(median * s for s in SPREAD),
        steps_per_window=float(PRESET_SPEC["window_steps"]),
        memory_measured=peak_mb is not None,
        peak_mb=peak_mb,
        static_mb=peak_mb * 0.2 if peak_mb is not None else None,
        val_loss=2.0 + (0.9 - accuracy),
        val_accuracy=accuracy,
        overflow_steps=0,
        loss_curve=tuple(3.0 - 0.01 * i for i in range(len(SPREAD) * PRESET_SPEC["window_steps"])),
        memory_change_mb=growing(0.0),
        memory_source="cuda_allocated",
        data_wait_s=0.01,
        timed_host_s=1.0,
        syncs_measured=True,
        sync_count=0,
        sync_steps=3,
        live_graph_tensors=0,
        live_bytes_change=growing(0.0),
        live_start_bytes=1e6,
        latency_samples_ms=(5.0, 5.5, 6.0),
        matmul_dtypes={DTYPE.get(name[: name.index("-")], "float32"): 29},
        matmul_dtype_expected=DTYPE.get(name[: name.index("-")], "float32"),
    )
    return PrecisionResult(name=name, **{**base, **kw})  # type: ignore[arg-type]


def bench(
    gpu: bool = True,
    speedup: float = 4.0,
    mem: float = 50.0,
    acc: float = 0.001,
    *,
    step_ms: dict[str, float] | None = None,
    **precision_kw: object,
) -> Benchmark:
    """A complete run of the gpu preset on an H100 (32-true at 400 ms a step, 32-tf32 2.5x
    faster with fp32's memory and accuracy, 16-mixed and bf16-mixed ``speedup`` times faster,
    ``mem`` % less memory, ``acc`` less accurate; ``precision_kw`` changes bf16-mixed), or of
    the cpu-smoke preset on a CPU (32-true and bf16-mixed, no CUDA memory). ``step_ms``
    overrides a precision's step time."""
    names = ("32-true", "32-tf32", "16-mixed", "bf16-mixed") if gpu else ("32-true", "bf16-mixed")
    times = {"32-true": 400.0, "32-tf32": 160.0, "16-mixed": 400.0 / speedup}
    times.update({"bf16-mixed": 400.0 / speedup, **(step_ms or {})})
    amp = {"peak_mb": 1000.0 * (1 - mem / 100) if gpu else None, "accuracy": 0.9 - acc}
    fp32 = {"peak_mb": 1000.0 if gpu else None}
    precisions = tuple(
        precision(
            n,
            times[n],
            **(amp if n.startswith(("16-", "bf16-")) else fp32),  # type: ignore[arg-type]
            **(precision_kw if n == "bf16-mixed" else {}),
        )
        for n in names
    )
    return Benchmark(
        preset="gpu" if gpu else "cpu-smoke",
        device="cuda" if gpu else "cpu",
        gpu_verified=gpu,
        gpu_name="NVIDIA H100 80GB HBM3" if gpu else None,
        torch="2.13.0",
        cuda="12.8",
        driver="570",
        datetime="2026-01-01T00:00:00Z",
        commit="abc",
        precisions=precisions,
        preset_spec=dict(PRESET_SPEC if gpu else CPU_PRESET_SPEC),
    )


def cpu_bench(**kw: object) -> Benchmark:
    """A clean cpu-smoke run whose bf16 precision has the CPU probes' figures (``kw`` changes
    them)."""
    clean = dict(
        sync_method="dispatch",
        matmul_dtypes={"bfloat16": 11},
        matmul_dtype_expected="bfloat16",
        live_graph_tensors=0,
        live_bytes_change=growing(20.0),  # 0.002% of the 1 MB it started with, a window
        memory_source="process_rss",
    )
    b = bench(gpu=False, speedup=0.7)
    mixed = replace(b.precisions[1], **{**clean, **kw})
    precisions = (b.precisions[0], mixed)
    return replace(b, precisions=precisions)


def with_precisions(b: Benchmark, *precisions: PrecisionResult) -> Benchmark:
    """``b`` with ``precisions`` in place of those of the same name (or added)."""
    by_name = {p.name: p for p in b.precisions}
    by_name.update({p.name: p for p in precisions})
    return replace(b, precisions=tuple(by_name.values()))


def performance(benchmark: Benchmark, **kw: object) -> StageData:
    """The data of a performance stage that ran ``benchmark`` (its record names the file's
    commit, started when the file was written, and ran ten minutes: longer than its windows)."""
    rec = record("performance", commit=benchmark.commit, start=benchmark.datetime, duration_s=600.0)
    return StageData(rec, benchmark=benchmark, **kw)  # type: ignore[arg-type]


def tool(name: str) -> str:
    """The path of a linter the lint extra installs; the test is skipped without it."""
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        pytest.skip(f"{name} is not installed (the lint extra installs it)")
    return path


# Report scenarios: raw directories of real stage runs (see fixtures/stagegate/make_fixtures.py).
FIXTURES_ROOT = Path(__file__).resolve().parent / "fixtures"
FIXTURES = FIXTURES_ROOT / "stagegate"
POLICY_FILE = FIXTURES / "policy.toml"  # this repository's policy, as the gold files were made
REPO_POLICY = load_policy(POLICY_FILE)  # its stages: static ... performance, regression, cuda
CORE_STAGES = ("static", "execution", "integration", "performance")  # the ones it requires
SCENARIOS: dict[str, dict[str, object]] = {
    "pass-cpu": {},
    "block": {
        "baseline": FIXTURES / "baseline-h100.json",
        "require": ("performance",),
        "github": True,
    },
}


def copy_scenario(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The scenario's raw directory copied to ``tmp_path/reports/raw``, run from ``tmp_path``."""
    shutil.copytree(FIXTURES / name, tmp_path / "reports" / "raw")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_BASE_REF", raising=False)
    return tmp_path


def build_scenario(name: str, **extra: object) -> tuple[Verdict, dict[str, str]]:
    """Judge and render a copied scenario (nothing written); ``extra`` overrides its options."""
    opts = {
        "raw_dir": Path("reports/raw"),
        "out_dir": Path("reports"),
        "pyproject": POLICY_FILE,
        **SCENARIOS[name],
        **extra,
    }
    return build_report(ReportOptions(**opts), {})  # type: ignore[arg-type]


def report_cli(root: Path, *extra: str) -> int:
    """``stagegate report`` on ``root/reports/raw`` under the scenarios' policy."""
    raw, out = root / "reports" / "raw", root / "reports"
    return main(["report", str(raw), "--out", str(out), "--pyproject", str(POLICY_FILE), *extra])


def junit_file(path: Path, names: list[str], failing: bool = True) -> None:
    """A JUnit file with one test per name, each failing with a hostile message unless not."""
    cases = "".join(
        f'<testcase classname="tests.test_x" name={quoteattr(n)} time="0.1">'
        + (
            f"<failure message={quoteattr(n + ' failed | <b>' + chr(10) + '@octocat')}>"
            f"tests/test_x.py:3: AssertionError</failure>"
            if failing
            else ""
        )
        + "</testcase>"
        for n in names
    )
    path.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>", encoding="utf-8")
    reseal(path.parent)
