"""Time ``stagegate report`` on a JUnit file of 20,000 tests: python benchmarks/stagegate_scale.py

Copies the pass-cpu fixture, replaces its execution JUnit with N generated tests (a few
failing), and prints the wall time of building and writing every report, best of 3.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from stagegate.report import ReportOptions, run_report

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        shutil.copytree(ROOT / "tests" / "fixtures" / "stagegate" / "pass-cpu", raw)
        cases = "".join(
            f'<testcase classname="tests.test_gen" name="test_{i}" time="0.001">'
            + (
                '<failure message="assert 0">tests/test_gen.py:1: AssertionError</failure>'
                if i % 2000 == 0
                else ""
            )
            + "</testcase>"
            for i in range(args.tests)
        )
        (raw / "junit-execution.xml").write_text(
            f"<testsuites><testsuite>{cases}</testsuite></testsuites>"
        )
        options = ReportOptions(
            raw_dir=raw, out_dir=Path(tmp) / "out", pyproject=ROOT / "pyproject.toml"
        )
        times = []
        for _ in range(3):
            start = time.perf_counter()
            verdict = run_report(options, dict(os.environ))
            times.append(time.perf_counter() - start)
        size = (Path(tmp) / "out" / "execution.md").stat().st_size
    print(
        f"{args.tests} tests: report built and written in {min(times):.3f} s (best of 3; "
        f"runs {', '.join(f'{t:.3f}' for t in times)} s); decision {verdict.decision}; "
        f"execution.md {size / 1024:.1f} KiB"
    )


if __name__ == "__main__":
    main()
