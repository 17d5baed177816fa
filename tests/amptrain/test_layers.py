"""The shape of amptrain: the import graph reads one way (config <- adapters <- engine <- loop <-
trainer, every other module in its place) and no module reaches into another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import amptrain

PACKAGE = Path(amptrain.__file__).parent
# A module imports only from modules of a lower rank (imports inside functions count too).
RANK = {
    "_stack": 0,
    "callbacks": 0,
    "distributed": 0,
    "metrics": 0,
    "model": 0,
    "probes": 0,
    "results": 0,
    "benchmark.environment": 0,
    "benchmark.presets": 0,
    "benchmark.stats": 0,
    "precision": 1,
    "checkpoint": 1,
    "collate": 1,
    "benchmark.health": 1,
    "config": 2,
    "data": 2,
    "lightning": 2,
    "fsdp": 2,
    "sharded": 2,
    "adapters": 3,
    "fp8": 3,  # the fp8 layers: the precision plan and the blocks FSDP shards
    "optim": 3,
    "engine": 4,
    "pretrained": 4,
    "best": 5,  # its sharded weights are exported with save_pretrained, at the run's end
    "predictions": 5,
    "loop": 6,
    "trainer": 7,
    "legacy": 8,
    "benchmark.run": 8,
    "": 9,  # the package: its public names
    "benchmark": 9,
    "benchmark.__main__": 10,
    "benchmark.ab": 11,
    "benchmark.abworker": 11,
}


def _module(path: Path, package: Path) -> str:
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _target(module: str, name: str) -> str:
    """What ``from amptrain.<module> import <name>`` depends on: the submodule it names, if
    ``name`` is one, else ``module`` itself."""
    inner = f"{module}.{name}" if module else name
    return inner if inner in RANK else module


def imports(package: Path = PACKAGE) -> dict[str, list[tuple[str, str]]]:
    """Each module of the package -> the (module, name) pairs it imports from amptrain, the
    module relative to the package ("" for the package itself)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        pairs = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("amptrain"):
                module = node.module.removeprefix("amptrain").removeprefix(".")
                pairs += [(module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                pairs += [(a.name.removeprefix("amptrain."), "") for a in node.names
                          if a.name.startswith("amptrain.")]  # fmt: skip
        found[_module(path, package)] = pairs
    return found


IMPORTS = imports()


def test_every_module_has_a_rank() -> None:
    assert sorted(IMPORTS) == sorted(RANK)


@pytest.mark.parametrize("module", sorted(IMPORTS))
def test_imports_point_down(module: str) -> None:
    upward = [
        f"{target} ({RANK[target]})"
        for target in (_target(m, name) for m, name in IMPORTS[module])
        if target != module and RANK[target] >= RANK[module]
    ]
    assert upward == [], f"{module or 'amptrain'} ({RANK[module]}) imports {upward}"


def test_the_training_path_reads_one_way() -> None:
    path = ["config", "adapters", "engine", "loop", "trainer"]
    assert [RANK[m] for m in path] == sorted({RANK[m] for m in path})


def test_no_module_imports_another_ones_private_names() -> None:
    reached = [
        f"{module} imports {target}.{name}"
        for module, pairs in IMPORTS.items()
        for target, name in pairs
        if name.startswith("_") and target != module
    ]
    assert reached == []


def test_an_upward_import_and_a_private_name_are_found(tmp_path: Path) -> None:
    (tmp_path / "config.py").write_text("from amptrain.loop import Loop\n")
    (tmp_path / "loop.py").write_text("def f():\n    from amptrain.data import _Hidden\n")
    found = imports(tmp_path)
    assert found == {"config": [("loop", "Loop")], "loop": [("data", "_Hidden")]}
    assert _target("", "config") == "config" and _target("", "fine_tune") == ""
