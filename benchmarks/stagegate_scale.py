"""Time ``stagegate report`` on a JUnit file of 20,000 tests: python benchmarks/stagegate_scale.py

Copies the pass-cpu fixture, replaces its execution JUnit with N generated tests (a few
failing), and prints the wall time of building and writing every report, best of 3, and the
process's peak memory. ``--pad-kb K`` gives each test K KiB of captured output, so
``--tests 50000 --pad-kb 2`` makes a file of about 100 MB.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from stagegate.report import ReportOptions, run_report

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=20_000)
    parser.add_argument("--pad-kb", type=int, default=0, help="captured output per test, KiB")
    args = parser.parse_args()
    pad = f"<system-out>{'x' * 1024 * args.pad_kb}</system-out>" if args.pad_kb else ""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        shutil.copytree(ROOT / "stagegate" / "tests" / "fixtures" / "stagegate" / "pass-cpu", raw)
        with (raw / "junit-execution.xml").open("w") as f:
            f.write("<testsuites><testsuite>")
            for i in range(args.tests):
                f.write(f'<testcase classname="tests.test_gen" name="test_{i}" time="0.001">')
                if i % 2000 == 0:
                    f.write(
                        '<failure message="assert 0">tests/test_gen.py:1: AssertionError</failure>'
                    )
                f.write(f"{pad}</testcase>")
            f.write("</testsuite></testsuites>")
        megabytes = (raw / "junit-execution.xml").stat().st_size / 1e6
        options = ReportOptions(
            raw_dir=raw, out_dir=Path(tmp) / "out", pyproject=ROOT / "pyproject.toml"
        )
        times = []
        for _ in range(3):
            start = time.perf_counter()
            verdict = run_report(options, dict(os.environ))
            times.append(time.perf_counter() - start)
        size = (Path(tmp) / "out" / "execution.md").stat().st_size
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.tests} tests ({megabytes:.1f} MB of JUnit): report built and written in "
        f"{min(times):.3f} s (best of 3; runs {', '.join(f'{t:.3f}' for t in times)} s); "
        f"decision {verdict.decision}; execution.md {size / 1024:.1f} KiB; "
        f"peak resident memory of the process {peak_mb:.0f} MB"
    )


if __name__ == "__main__":
    main()
