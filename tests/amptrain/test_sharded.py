"""amptrain.sharded and the checkpoint listing in one process: a sharded checkpoint's folder is
written whole under its name, listed and pruned beside checkpoint files, read back whole for an
export, and refused by a run that is not sharded. (DCP writes one process's shards when no
process group exists, and says so in a warning.) The sharded runs themselves are in
tests/integration/test_fsdp.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from amptrain import TinyGPT, fine_tune
from amptrain.checkpoint import FORMAT, checkpoints, find, is_sharded, load, prune, resolve
from amptrain.config import TrainConfig, resume_settings
from amptrain.distributed import World
from amptrain.sharded import read_whole, save, write

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

WEIGHTS = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2)}


def _save(folder: Path, step: int, keep: int = 3) -> Path:
    state = {"position": {"step": step}, "config": {}}
    return save(folder, step, {"model": dict(WEIGHTS)}, state, keep, World())


def test_a_sharded_checkpoint_is_a_whole_folder_under_its_name(tmp_path: Path) -> None:
    path = _save(tmp_path, 4)
    assert path == tmp_path / "step-00000004" and is_sharded(path)
    assert sorted(p.name for p in path.iterdir()) == [".metadata", "__0_0.distcp", "trainer.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004"]  # nothing staged left
    state = load(path, torch.device("cpu"))
    assert state["format"] == FORMAT and state["shards"] == str(path)


def test_its_weights_read_back_whole_in_one_process(tmp_path: Path) -> None:
    weights = read_whole(_save(tmp_path, 1))
    assert weights.keys() == WEIGHTS.keys()
    assert all(torch.equal(weights[k], v) for k, v in WEIGHTS.items())


def test_folders_and_files_are_listed_by_step_and_the_oldest_pruned(tmp_path: Path) -> None:
    _save(tmp_path, 2)
    torch.save({}, tmp_path / "step-00000003.pt")
    _save(tmp_path, 10)
    (tmp_path / "step-00000011").mkdir()  # a folder that is not whole is listed, then refused
    (tmp_path / "step-00000012.pt").mkdir()  # neither a file nor a checkpoint's folder
    names = [p.name for p in checkpoints(tmp_path)]
    assert names == ["step-00000002", "step-00000003.pt", "step-00000010", "step-00000011"]
    with pytest.raises(ValueError, match="not a whole sharded checkpoint"):
        load(tmp_path / "step-00000011", torch.device("cpu"))
    prune(tmp_path, keep=2)
    assert [p.name for p in checkpoints(tmp_path)] == ["step-00000010", "step-00000011"]


def test_resume_from_names_a_sharded_folder_or_the_folder_that_holds_it(tmp_path: Path) -> None:
    path = _save(tmp_path, 5)
    assert resolve(str(path), None) == path
    assert resolve(str(tmp_path), None) == path
    found = find(str(path), None, torch.device("cpu"))
    assert found is not None and found[0] == path


def test_a_stale_staging_folder_is_replaced_and_an_older_step_rewritten(tmp_path: Path) -> None:
    (tmp_path / ".step-00000007.partial").mkdir()
    (tmp_path / ".step-00000007.partial" / "torn").write_text("x")
    write(tmp_path / "step-00000007", {"model": dict(WEIGHTS)}, {"record.pt": {}}, World())
    write(tmp_path / "step-00000007", {"model": dict(WEIGHTS)}, {"record.pt": {}}, World())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000007"]
    assert "torn" not in {p.name for p in (tmp_path / "step-00000007").iterdir()}


def test_a_run_that_is_not_sharded_refuses_a_sharded_checkpoint(
    tmp_path: Path, model: TinyGPT
) -> None:
    run = {"num_workers": 0, "epochs": 1}
    state = {"config": resume_settings(TrainConfig(**run)), "world_size": 1}
    path = save(tmp_path, 1, {"model": model.state_dict()}, state, 3, World())
    with pytest.raises(ValueError, match=r"is sharded.*strategy='fsdp' under torchrun"):
        fine_tune(model, torch.zeros(8, 12, dtype=torch.long), **run, resume_from=str(path))
