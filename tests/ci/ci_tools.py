"""What the tests of tools/ci share: the scripts importable by their own names (as GitHub runs
them, ``python3 tools/ci/X.py``), the workflow files, and an API that answers from recorded
payloads (GitHub itself cannot be reached from here)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools" / "ci"
WORKFLOWS = ROOT / ".github" / "workflows"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

REPO, FORK = "owner/amptrain", "someone/amptrain"


def tool(name: str) -> ModuleType:
    """The script tools/ci/NAME.py as a module."""
    return importlib.import_module(name)


def noxfile() -> ModuleType:
    """The repository's noxfile.py as a module (loaded once)."""
    module = sys.modules.get("amptrain_noxfile")
    if module is None:
        spec = importlib.util.spec_from_file_location("amptrain_noxfile", ROOT / "noxfile.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["amptrain_noxfile"] = module
        spec.loader.exec_module(module)
    return module


def load_workflow(name: str) -> dict[str, Any]:
    """A workflow file as GitHub reads it (``on:`` under its name, not YAML 1.1's True)."""
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


class FakeApi:
    """GitHub's REST API answering from ``routes`` (path -> JSON), recording every call."""

    def __init__(self, routes: Mapping[str, Any]) -> None:
        self.routes = dict(routes)
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.posted: list[tuple[str, dict[str, Any]]] = []

    def get(self, path: str, **params: Any) -> Any:
        """The recorded answer for ``path`` (a callable gets the query)."""
        self.calls.append(("GET", path, params))
        answer = self.routes[path]
        return answer(params) if callable(answer) else answer

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        """Record what was posted."""
        self.calls.append(("POST", path, dict(body)))
        self.posted.append((path, dict(body)))
        return {}

    def pages(self, path: str, key: str | None = None, **params: Any) -> Iterator[Any]:
        """Every item of the recorded list."""
        data = self.get(path, **params)
        yield from (data[key] if key else data)


STAGEGATE = Path(sys.executable).parent / "stagegate"
_HELP = subprocess.run(
    [str(STAGEGATE), "report", "--help"], capture_output=True, text=True, check=True
).stdout
# stagegate's --changed-files (the change's files, in place of a git diff) comes with its
# gate_files policy key; until the installed stagegate has it, the judge's tests run it through
# a wrapper that records the file it was given and leaves the option out.
HAS_CHANGED_FILES = "--changed-files" in _HELP
_WRAPPER = """
import os, sys
from stagegate.cli import main
argv = sys.argv[1:]
if "--changed-files" in argv:
    at = argv.index("--changed-files")
    with open(os.environ["CHANGED_FILES_LOG"], "a") as log:
        log.write(open(argv[at + 1]).read())
    if os.environ.get("STRIP_CHANGED_FILES") == "1":
        del argv[at : at + 2]
sys.exit(main(argv))
"""


def stagegate_for_judge(tmp: Path) -> tuple[str, Path, dict[str, str]]:
    """The STAGEGATE command for judge_records.py, the log of the changed-files it was given,
    and the environment it needs."""
    wrapper, log = tmp / "stagegate_wrapper.py", tmp / "changed-files.log"
    wrapper.write_text(_WRAPPER)
    env = {"CHANGED_FILES_LOG": str(log), "STRIP_CHANGED_FILES": "0" if HAS_CHANGED_FILES else "1"}
    return f"{sys.executable} {wrapper}", log, {**env, "PYTHONPATH": this_stagegate()}


def this_stagegate() -> str:
    """PYTHONPATH with this checkout's stagegate first: an interpreter whose installed stagegate
    is another checkout's (an editable install elsewhere) judges with this one."""
    return os.pathsep.join([str(ROOT / "stagegate" / "src"), os.environ.get("PYTHONPATH", "")])
