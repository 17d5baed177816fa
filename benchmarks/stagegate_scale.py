"""Time ``stagegate report`` on large JUnit files: python benchmarks/stagegate_scale.py

Two files, each judged as the execution stage's JUnit in a copy of the pass-cpu fixture:
``cases``, 700,000 test cases (one in 2,000 failing) in about 50 MB, and ``message``, one
failing test whose failure message is 50 MB. Each is judged in a fresh process (so its peak
resident memory is its own), three times: the best wall time of building and writing every
report is printed with the process's peak memory. ``--only cases|message`` runs one;
``--cases N`` and ``--message-mb M`` size them.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "stagegate" / "tests" / "fixtures" / "stagegate" / "pass-cpu"


def write_cases(path: Path, cases: int) -> None:
    """``cases`` test cases of one suite, a failure in every 2,000th."""
    with path.open("w") as f:
        f.write(f'<testsuites><testsuite name="gen" tests="{cases}">')
        for i in range(cases):
            f.write(f'<testcase classname="tests.test_gen" name="test_{i}" time="0.001">')
            if i % 2000 == 0:
                f.write('<failure message="assert 0">tests/test_gen.py:1: AssertionError</failure>')
            f.write("</testcase>\n")
        f.write("</testsuite></testsuites>")


def write_message(path: Path, megabytes: int) -> None:
    """One failing test whose failure message (an attribute) and text are ``megabytes`` each."""
    line = "assert response == expected, a long diff line " * 20 + "\n"
    body = line * (megabytes * 2**20 // len(line))
    with path.open("w") as f:
        f.write('<testsuites><testsuite name="big" tests="1">')
        f.write(f'<testcase classname="tests.test_big" name="test_diff"><failure message="{body}">')
        f.write(body + "</failure></testcase></testsuite></testsuites>")


def judge(raw: Path, out: Path) -> None:
    """Judge ``raw`` three times in this process; print the best time and peak memory."""
    from stagegate.report import ReportOptions, run_report

    options = ReportOptions(raw_dir=raw, out_dir=out, pyproject=ROOT / "pyproject.toml")
    times, decision = [], ""
    for _ in range(3):  # one report at a time: the previous one's verdict is let go first
        start = time.perf_counter()
        decision = run_report(options, dict(os.environ)).decision.value
        times.append(time.perf_counter() - start)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size = (out / "execution.md").stat().st_size + (out / "verdict.json").stat().st_size
    print(
        f"best of 3 {min(times):.2f} s (runs {', '.join(f'{t:.2f}' for t in times)} s); "
        f"decision {decision}; execution.md and verdict.json "
        f"{size / 1024:.0f} KiB; peak resident memory {peak_mb:.0f} MB"
    )


def measure(name: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        shutil.copytree(FIXTURE, raw)
        junit = raw / "junit-execution.xml"
        if name == "cases":
            write_cases(junit, args.cases)
        else:
            write_message(junit, args.message_mb)
        _reseal(raw)  # as stagegate run would have sealed the file the stage wrote
        print(f"{name}: {junit.stat().st_size / 1e6:.1f} MB of JUnit: ", end="", flush=True)
        child = [sys.executable, __file__, "--judge", str(raw), str(Path(tmp) / "out")]
        subprocess.run(child, check=True)


def _reseal(raw: Path) -> None:
    """The record's sha256 of the replaced file, as stagegate run would have written it."""
    import hashlib
    import json

    record = raw / "execution.json"
    doc = json.loads(record.read_text())
    for path in doc["sha256"]:
        local = raw / Path(path).name
        if local.exists():
            doc["sha256"][path] = hashlib.sha256(local.read_bytes()).hexdigest()
    record.write_text(json.dumps(doc))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("cases", "message"))
    parser.add_argument("--cases", type=int, default=700_000)
    parser.add_argument("--message-mb", type=int, default=50)
    parser.add_argument("--judge", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.judge:
        judge(*args.judge)
        return
    for name in (args.only,) if args.only else ("cases", "message"):
        measure(name, args)


if __name__ == "__main__":
    main()
