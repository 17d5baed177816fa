"""The shape of the code: the import graph reads one way (model <- collect <- judge <- views <-
render <- report <- cli), views hold no threshold logic, no module reaches into another's
private names, and the generic tool names no project's commands."""

from __future__ import annotations

import ast
import re
from graphlib import TopologicalSorter
from pathlib import Path

import pytest

import stagegate

PACKAGE = Path(stagegate.__file__).parent
# The pipeline's steps and the modules beside them; a module imports only from a lower rank or
# from its own step. record/ runs on the stage's machine (stagegate run); collect/ reads,
# judge/ decides, view/ formats what the judge made; report.py runs them in that order.
RANK = {
    "errors": 0,
    "model": 0,
    "io": 0,
    "kinds": 1,
    "record": 2,
    "collect": 2,
    "pytest_plugin": 3,
    "judge": 3,
    "view": 4,
    "report": 5,
    "cli": 6,
    "__main__": 7,
}
TOP_LEVEL = 8  # modules beside the step folders, at most


def _group(module: str) -> str:
    """``stagegate.collect.junit`` -> ``collect``; ``stagegate.report`` -> ``report``."""
    return module.split(".")[1]


def _imports() -> dict[str, list[tuple[str, str]]]:
    """Each module of the package -> the (module, name) pairs it imports from stagegate."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pairs = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stagegate."):
                pairs += [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                pairs += [(a.name, "") for a in node.names if a.name.startswith("stagegate.")]
        found[module] = pairs
    return found


IMPORTS = {m: pairs for m, pairs in _imports().items() if m != "stagegate"}


def test_every_module_has_a_rank() -> None:
    assert {_group(m) for m in IMPORTS} <= set(RANK)


@pytest.mark.parametrize("module", sorted(IMPORTS))
def test_imports_point_down_the_pipeline(module: str) -> None:
    group = _group(module)
    upward = [
        target
        for target, _ in IMPORTS[module]
        if _group(target) != group and RANK[_group(target)] >= RANK[group]
    ]
    assert not upward, f"{module} imports {upward}, which are not below it"


def test_the_import_graph_has_no_cycle() -> None:
    graph = {m: {t for t, _ in pairs} for m, pairs in IMPORTS.items()}
    tuple(TopologicalSorter(graph).static_order())  # raises CycleError on a cycle


def test_the_top_level_is_the_pipeline_and_a_few_modules_beside_it() -> None:
    steps = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert steps == {"record", "collect", "judge", "view"}
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert len(modules) <= TOP_LEVEL, sorted(modules)


def test_collection_neither_judges_nor_reads_the_policy() -> None:
    for module, pairs in IMPORTS.items():
        if module.startswith("stagegate.collect"):
            assert {_group(t) for t, _ in pairs} <= {"collect", "model", "errors", "io"}, module


def test_views_format_what_the_judge_made_and_check_nothing() -> None:
    for module, pairs in IMPORTS.items():
        if _group(module) == "view":
            assert not {_group(t) for t, _ in pairs} & {"collect", "record"}, module
            name = module.removeprefix("stagegate.view").strip(".") or "__init__"
            text = (PACKAGE / "view" / f"{name}.py").read_text(encoding="utf-8")
            assert "check_threshold" not in text, module


def test_no_module_imports_another_ones_private_names() -> None:
    private = [
        (module, f"{target}.{name}")
        for module, pairs in IMPORTS.items()
        for target, name in pairs
        if name.startswith("_") and name != "__version__"
    ]
    assert not private


def test_the_generic_tool_names_no_project_command() -> None:
    """What to run again comes from the policy or from the record's own command."""
    named = [
        f"{path.relative_to(PACKAGE)}:{i}"
        for path in PACKAGE.rglob("*.py")
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bnox -s\b|noxfile", line)
    ]
    assert not named


def test_the_tests_read_nothing_outside_the_distribution() -> None:
    """They run from stagegate/ alone and in mutmut's copy of it: no path climbs out."""
    here = Path(__file__).resolve().parent
    climbing = [
        f"{path.name}:{i}"
        for path in here.rglob("*.py")
        if "fixtures" not in path.relative_to(here).parts
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"parents\[[1-9]\]|\.parent\.parent|\"\.\.\"", line)
    ]
    assert not climbing
