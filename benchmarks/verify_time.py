"""How long ``nox -s verify`` takes on a fresh clone: cold (no .nox: virtualenv made and
installed) and then warm (the same clone again), for one commit or several in the same window.

    python benchmarks/verify_time.py                 # HEAD: cold, then warm
    python benchmarks/verify_time.py OLD NEW         # both commits, run side by side

Each commit is cloned from this repository into a scratch folder. With several commits their
runs start together, so each meets the same load on a shared machine and their ratio means
something even when the absolute times do not. Printed per run: wall seconds, CPU seconds of
the whole process tree (user + system), the verdict's exit code, each stage's duration from its
record, and the machine's load average at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERIFY = [sys.executable, "-m", "nox", "-s", "verify"]


def clone(ref: str, parent: Path) -> Path:
    """A fresh clone of this repository at ``ref`` (no .nox, no reports)."""
    dest = parent / ref.replace("/", "_")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", ref], check=True)
    return dest


def stage_seconds(checkout: Path) -> dict[str, float]:
    """Each stage's duration as its record gives it."""
    found = {}
    for record in sorted((checkout / "reports" / "raw").glob("*.json")):
        data = json.loads(record.read_text())
        if isinstance(data, dict) and "duration_s" in data:
            found[record.stem] = round(float(data["duration_s"]), 1)
    return found


# Runs the command given after the output path, then writes its exit code and the CPU seconds
# of every descendant it waited for (stagegate reaps its stages' processes, so they count too).
WRAPPER = """
import json, resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(json.dumps({"exit": code, "cpu_s": usage.ru_utime + usage.ru_stime}))
"""


def timed(checkout: Path, label: str) -> dict[str, object]:
    """Run verify in ``checkout``: wall seconds, and CPU seconds of its process tree."""
    load = os.getloadavg()[0]
    usage = checkout.parent / f"{checkout.name}-{label}.json"
    start = time.perf_counter()
    with (checkout.parent / f"{checkout.name}-{label}.log").open("w") as log:
        subprocess.run(
            [sys.executable, "-c", WRAPPER, str(usage), *VERIFY],
            cwd=checkout,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    wall = time.perf_counter() - start
    measured = json.loads(usage.read_text())
    return {
        "run": f"{checkout.name} {label}",
        "exit": measured["exit"],
        "wall_s": round(wall, 1),
        "cpu_s": round(measured["cpu_s"], 1),
        "load_start": round(load, 2),
        "load_end": round(os.getloadavg()[0], 2),
        "stages_s": stage_seconds(checkout),
    }


def main(argv: list[str] | None = None) -> int:
    """Clone each ref, run verify cold then warm in each, print one JSON line per run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("refs", nargs="*", default=["HEAD"], help="commits to time")
    parser.add_argument("--keep", action="store_true", help="keep the clones and their logs")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="verify-time-"))
    try:
        checkouts = [clone(ref, scratch) for ref in args.refs]
        for label in ("cold", "warm"):
            with ThreadPoolExecutor(len(checkouts)) as pool:
                for result in pool.map(timed, checkouts, [label] * len(checkouts)):
                    print(json.dumps(result), flush=True)
    finally:
        if args.keep:
            print(f"clones and logs kept in {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
