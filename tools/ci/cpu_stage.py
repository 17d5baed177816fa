"""Stages 1-4 and slow on a hosted runner, run as the GPU stage is: judge.yml runs this script
from its checkout of the default branch; nothing of the commit under test runs on the host.

    IMAGE=ghcr.io/OWNER/amptrain-verify@sha256:... SHA=<40 hex> STAGEGATE=/path/to/stagegate \\
        python3 tools/ci/cpu_stage.py PR_TREE WORK

Each stage's command is the default branch's (its noxfile's ``run_STAGE`` for each of
``STAGES``, read with a session that records instead of
running). The default branch's stagegate, on the host, runs each stage around a container of
the pinned image (by digest) and writes WORK/reports/raw/STAGE.json with the hashes of the
files it took, so the change's code never writes a record. The container has no network, no
capabilities, no Docker socket, no token, a read-only root and the commit's tree read-only at
/workspace; it works in a copy of that tree in its own /tmp, with reports/raw pointing at a
fresh output folder made for that stage alone (WORK/out/STAGE, mounted at /out). From it the
host takes only the files the stage declares, plain files of a sane size, into reports/raw.
The default branch's pytest witness runs beside the change's tests (WORK/gate, read-only at
/gate, first on the path) and writes JUNIT.witness.json, the one file the judge holds the
change's JUnit against (stagegate report --gate-witness).
Every record names SHA: the commit judge.yml checked out (for a pull request, GitHub's merge
commit, whose parents it checked through the API).

    python3 tools/ci/cpu_stage.py --container STAGE WORK    (stagegate's command, in WORK)
    python3 tools/ci/cpu_stage.py --definitions NOXFILE     (the stages, as JSON)
    python3 tools/ci/cpu_stage.py --gate-witness WORK       (WORK/gate, for gpu_stage.sh)
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the default branch's checkout
RAW = "reports/raw"
STAGES = ("static", "execution", "integration", "performance", "slow")  # noxfile: run_STAGE
IMAGE = re.compile(r"ghcr\.io/[a-z0-9][a-z0-9._-]*/amptrain-verify@sha256:[0-9a-f]{64}")
SHA = re.compile(r"[0-9a-f]{40}")
MAX_FILE_BYTES = 256 * 1024 * 1024
PLUGIN = "stagegate.pytest_plugin"  # the pytest options the project's configuration names
COUNTS = ".counts.json"  # stagegate's pytest plugin's counts, beside a JUnit file
# The gate's own witness: the default branch's copy of these files of stagegate.record, a
# package of their own mounted read-only at /gate, first on the path; it writes JUNIT + WITNESS
# and the judge reads only that (stagegate report --gate-witness)
GATE_FILES = ("pytest_collected.py", "pytest_integrity.py", "pytest_witness.py", "witness_file.py")
GATE_PACKAGE = "stagegate_gate"
WITNESS = ".witness.json"


class StageError(Exception):
    """Inputs the host refuses before anything runs."""


@dataclass(frozen=True)
class Stage:
    """One stage as the default branch's noxfile runs it."""

    name: str
    files: tuple[str, ...]  # stagegate run's declarations: --junit=reports/raw/...
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def outputs(self) -> list[str]:
        """The paths under reports/raw the stage declares."""
        return [f.split("=")[-1].removeprefix(f"{RAW}/") for f in self.files]

    def beside(self) -> list[str]:
        """Files kept where the container wrote them, though not declared: what stagegate's
        pytest plugin and the gate's witness write beside each JUnit file (stagegate run seals
        them)."""
        junit = [f.split("=")[-1].removeprefix(f"{RAW}/") for f in self.files if "--junit" in f]
        return [f"{name}{suffix}" for name in junit for suffix in (COUNTS, WITNESS)]


class _Recorder:
    """A nox session that records `stagegate run` instead of running it; nothing else runs
    (the CUDA probe answers no: these stages run on a CPU runner)."""

    def __init__(self) -> None:
        self.posargs: list[str] = []
        self.env: dict[str, str] = {}
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def run(self, *args: str, env: Mapping[str, str] | None = None, **_: Any) -> str:
        if args[:2] == ("stagegate", "run"):
            self.calls.append((list(args), dict(env or {})))
            return ""
        return "False"

    def warn(self, *_: Any, **__: Any) -> None:
        """Warnings are for a person at a terminal."""

    log = warn

    def error(self, *args: Any, **_: Any) -> None:
        raise StageError(" ".join(map(str, args)))


def _noxfile(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("gate_noxfile", path)
    if spec is None or spec.loader is None:
        raise StageError(f"{path} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def definitions(noxfile: Path = ROOT / "noxfile.py") -> dict[str, Stage]:
    """Every CPU stage's declarations, command and environment, from ``noxfile``, read in a
    process of its own (nox keeps the sessions a noxfile registers)."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--definitions", str(noxfile)]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if out.returncode != 0:
        raise StageError(f"{noxfile} gives no stage definitions: {out.stderr.strip()[-400:]}")
    return {
        name: Stage(name, tuple(d["files"]), tuple(d["command"]), d["env"])
        for name, d in json.loads(out.stdout).items()
    }


def _definitions_here(noxfile: Path) -> dict[str, Stage]:
    module, found = _noxfile(noxfile), {}
    for name in STAGES:
        function, session = f"run_{name}", _Recorder()
        getattr(module, function)(session, [], must_pass=False)
        ((args, env),) = session.calls
        split = args.index("--")
        if args[2] != name or args[3:5] != ["--out-dir", RAW]:
            raise StageError(f"{function} records {args[2:5]}, not {name} in {RAW}")
        found[name] = Stage(name, tuple(args[5:split]), tuple(args[split + 1 :]), env)
    return found


def gate_witness(work: Path) -> Path:
    """WORK/gate: the default branch's witness, as the package the container loads it from."""
    package = work / "gate" / GATE_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    for name in GATE_FILES:
        shutil.copyfile(ROOT / "stagegate" / "src" / "stagegate" / "record" / name, package / name)
    return package.parent


def container_argv(stage: Stage, pr: Path, out: Path, image: str, sha: str) -> list[str]:
    """``docker run`` for one stage: sealed, the tree read-only, /out its own fresh folder, the
    gate's witness (WORK/gate, beside WORK/out) read-only at /gate."""
    env = {
        "HOME": "/tmp", "CI": "true", "PYTHONDONTWRITEBYTECODE": "1", "WANDB_MODE": "disabled",
        "GITHUB_SHA": sha, "PYTHONPATH": "/gate:/tmp/w/src:/tmp/w/stagegate/src",
        "PYTEST_PLUGINS": PLUGIN, "COVERAGE_FILE": "/tmp/.coverage",
        "PYTHONNOUSERSITE": "1",  # no usercustomize from a folder the change holds
        **stage.env,
    }  # fmt: skip
    prepare = (
        "cp -a /workspace/. /tmp/w && mkdir -p /tmp/w/reports && rm -rf /tmp/w/reports/raw"
        ' && ln -s /out /tmp/w/reports/raw && cd /tmp/w && exec "$@"'
    )
    return [
        "docker", "run", "--rm", "--name", f"amptrain-{stage.name}-{os.getpid()}",
        "--network", "none", "--read-only", "--tmpfs", "/tmp:rw,exec,nosuid,size=16g",
        "--shm-size", "2g", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--pids-limit", "4096", "--user", f"{os.getuid()}:{os.getgid()}",
        *(arg for key, value in env.items() for arg in ("--env", f"{key}={value}")),
        "--volume", f"{pr}:/workspace:ro", "--volume", f"{out}:/out:rw",
        "--volume", f"{out.parents[1] / 'gate'}:/gate:ro", "--workdir", "/tmp",
        image, "sh", "-c", prepare, stage.name, *with_gate_witness(stage.command),
    ]  # fmt: skip


def with_gate_witness(command: tuple[str, ...]) -> list[str]:
    """A pytest command with the gate's witness loaded (``-p``: on this command line only, so
    the pytest runs the tests start themselves, with a path of their own, do not look for it)."""
    pytest = ("python", "-m", "pytest")
    if command[:3] != pytest:
        return list(command)
    return [*pytest, "-p", f"{GATE_PACKAGE}.witness_file", *command[3:]]


def keep_outputs(stage: Stage, out: Path, raw: Path) -> list[str]:
    """Copy the stage's declared files from its output folder into RAW: plain files (no link
    anywhere on the way) of a sane size. The names it refused."""
    refused = []
    optional = stage.beside()
    for name in [*stage.outputs(), *optional]:
        source = out / name
        if name in optional and not source.exists() and not source.is_symlink():
            continue
        chain = [out, *(out / p for p in Path(name).parents if str(p) != "."), source]
        plain = all(not p.is_symlink() for p in chain) and source.is_file()
        if not plain or source.stat().st_size > MAX_FILE_BYTES:
            refused.append(name)
            continue
        (raw / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, raw / name)
    return refused


def run_container(name: str, work: Path) -> int:
    """stagegate's command for stage ``name``: its container, then its files kept."""
    stage = definitions()[name]
    out = work / "out" / name
    argv = container_argv(stage, Path(os.environ["PR_TREE"]), out, os.environ["IMAGE"],
                          os.environ["SHA"])  # fmt: skip
    code = subprocess.run(argv, check=False).returncode
    for refused in keep_outputs(stage, out, work / RAW):
        print(f"cpu_stage: the container left no plain {refused} (or one too large)", flush=True)
    return code


def check_inputs(env: Mapping[str, str], pr: Path) -> None:
    """Refuse anything but a digest, a full SHA, the host's stagegate and a tree."""
    if not IMAGE.fullmatch(env.get("IMAGE", "")):
        raise StageError(f"IMAGE must be the pinned image by digest, not {env.get('IMAGE')!r}")
    if not SHA.fullmatch(env.get("SHA", "")):
        raise StageError("SHA must be a full commit SHA")
    if not os.access(env.get("STAGEGATE", ""), os.X_OK):
        raise StageError("STAGEGATE must be the default branch's stagegate")
    if not pr.is_dir():
        raise StageError(f"{pr} is not the commit's checkout")


def run_stages(pr: Path, work: Path, env: Mapping[str, str]) -> int:
    """Every stage, each recorded by the host's stagegate; the last failing exit code."""
    check_inputs(env, pr)
    shutil.rmtree(work, ignore_errors=True)
    (work / RAW).mkdir(parents=True)
    subprocess.run(["docker", "pull", "--quiet", env["IMAGE"]], check=True)
    gate_witness(work)
    status = 0
    stage_env = {**env, "GIT_DIR": "/nonexistent", "GITHUB_SHA": env["SHA"],
                 "PR_TREE": str(pr.resolve())}  # fmt: skip
    for name, stage in definitions().items():
        (work / "out" / name).mkdir(parents=True)  # fresh, and for this stage alone
        this = str(Path(__file__).resolve())
        argv = [env["STAGEGATE"], "run", name, "--out-dir", RAW, *stage.files,
                "--timeout", env.get("STAGE_TIMEOUT", "1800"), "--",
                sys.executable, this, "--container", name, str(work)]  # fmt: skip
        code = subprocess.run(argv, cwd=work, env=stage_env, check=False).returncode
        status = code or status
    return status


def main(argv: list[str] | None = None) -> int:
    """Run every stage (PR_TREE WORK), or one stage's container (--container STAGE WORK)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["--definitions"] and len(args) == 2:
            found = _definitions_here(Path(args[1]))
            print(json.dumps({n: {"files": s.files, "command": s.command, "env": dict(s.env)}
                              for n, s in found.items()}))  # fmt: skip
            return 0
        if args[:1] == ["--container"] and len(args) == 3:
            return run_container(args[1], Path(args[2]))
        if args[:1] == ["--gate-witness"] and len(args) == 2:  # gpu_stage.sh's cuda stage
            print(gate_witness(Path(args[1])))
            return 0
        if len(args) != 2:
            raise StageError("usage: cpu_stage.py PR_TREE WORK")
        return run_stages(Path(args[0]), Path(args[1]), os.environ)
    except StageError as exc:
        print(f"cpu_stage: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
