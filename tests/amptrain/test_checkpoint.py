"""amptrain.checkpoint: files written whole with the newest kept, found by ``resume_from``, read
back on any device, and every generator's state given back."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from amptrain import TinyGPT, fine_tune
from amptrain.checkpoint import (
    UnreadableCheckpointWarning,
    checkpoints,
    find,
    load,
    resolve,
    rng_state,
    save,
    set_rng_state,
)
from amptrain.config import ResumeSettingsWarning

Tokens = Callable[..., torch.Tensor]
RUN = {"epochs": 1, "batch_size": 4, "num_workers": 0}


def test_only_the_newest_checkpoints_are_kept_and_no_temporary_file_is_left(
    tmp_path: Path, model: TinyGPT, tokens: Tokens
) -> None:
    result = fine_tune(model, tokens(40), **RUN, checkpoint_dir=str(tmp_path),
                       checkpoint_every=2, keep_checkpoints=2)  # fmt: skip
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["step-00000008.pt", "step-00000010.pt"]
    assert result.checkpoint == str(tmp_path / "step-00000010.pt")


def test_a_saved_state_reads_back_and_the_oldest_beyond_keep_are_gone(tmp_path: Path) -> None:
    for step in (3, 12, 7):
        save(tmp_path / "d", step, {"w": torch.full((2,), float(step))}, keep=2)
    assert [p.name for p in checkpoints(tmp_path / "d")] == ["step-00000007.pt", "step-00000012.pt"]
    state = load(checkpoints(tmp_path / "d")[-1], torch.device("cpu"))
    assert torch.equal(state["w"], torch.full((2,), 12.0)) and state["format"] == 2
    assert checkpoints(tmp_path / "nowhere") == []


def test_resume_from_names_a_file_a_folder_or_the_latest(tmp_path: Path) -> None:
    save(tmp_path, 5, {}, keep=3)
    newest = save(tmp_path, 9, {}, keep=3)
    assert resolve(str(newest), None) == newest
    assert resolve(str(tmp_path), None) == newest
    assert resolve("latest", str(tmp_path)) == newest
    assert resolve("latest", str(tmp_path / "fresh")) is None  # nothing yet: a fresh start
    with pytest.raises(ValueError, match="checkpoint_dir"):
        resolve("latest", None)


def test_every_generator_is_given_back_its_state() -> None:
    saved = rng_state()
    drawn = (random.random(), float(np.random.rand()), float(torch.rand(())))
    set_rng_state(saved)
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == drawn


def test_resume_refuses_torn_and_missing_files(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    fine_tune(make_model(), tokens(40), **RUN, checkpoint_dir=str(tmp_path))
    latest = checkpoints(tmp_path)[-1]
    latest.write_bytes(latest.read_bytes()[:100])
    with pytest.raises(ValueError) as raised:
        fine_tune(make_model(), tokens(40), **RUN, resume_from=str(latest))
    assert "step-00000010.pt" in str(raised.value)
    with pytest.raises(ValueError, match="nothing-here"):
        fine_tune(make_model(), tokens(40), epochs=1, resume_from=str(tmp_path / "nothing-here"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty"):
        fine_tune(make_model(), tokens(40), epochs=1, resume_from=str(tmp_path / "empty"))
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(1)}, foreign)
    with pytest.raises(ValueError, match=r"foreign\.pt"):
        load(foreign, torch.device("cpu"))


def test_resume_latest_starts_fresh_when_there_is_no_checkpoint_yet(
    tmp_path: Path, model: TinyGPT, tokens: Tokens
) -> None:
    result = fine_tune(model, tokens(40), **RUN, checkpoint_dir=str(tmp_path),
                       resume_from="latest")  # fmt: skip
    assert result.resumed_from is None and result.steps == 10


def test_a_checkpoint_written_on_a_gpu_resumes_on_a_cpu_only_machine(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_model: Callable[..., TinyGPT],
    tokens: Tokens,
) -> None:
    """A GPU run's file tags each tensor with the device it was on ("cuda:0"), and that tag is
    all that says where: written here with it, the file must still load onto this run's device."""
    import torch.serialization as serialization

    as_on_a_gpu = (0, lambda storage: "cuda:0", lambda storage, location: None)
    args = {**RUN, "eval_every": 3, "log_every": 4, "checkpoint_dir": str(tmp_path)}
    with monkeypatch.context() as patch:
        patch.setattr(
            serialization, "_package_registry", [as_on_a_gpu, *serialization._package_registry]
        )
        fine_tune(make_model(), tokens(40), **args)
    with pytest.warns(ResumeSettingsWarning, match="epochs=2"):  # one more epoch, applied
        result = fine_tune(make_model(), tokens(40), **{**args, "epochs": 2}, resume_from="latest")
    assert result.resumed_from and result.steps == 20 and result.device == "cpu"


def test_latest_passes_over_a_torn_newest_file_with_a_warning_naming_it(tmp_path: Path) -> None:
    save(tmp_path, 4, {"w": torch.ones(3)}, keep=3)
    torn = save(tmp_path, 8, {"w": torch.zeros(3)}, keep=3)
    torn.write_bytes(torn.read_bytes()[:200])
    with pytest.warns(UnreadableCheckpointWarning, match="step-00000008"):
        path, state = find("latest", str(tmp_path), torch.device("cpu"))  # type: ignore[misc]
    assert path.name == "step-00000004.pt" and torch.equal(state["w"], torch.ones(3))
    with pytest.warns(UnreadableCheckpointWarning):  # a folder named: the same
        assert find(str(tmp_path), None, torch.device("cpu"))[0] == path  # type: ignore[index]
    with pytest.raises(ValueError, match="step-00000008"):  # the file itself named: refused
        find(str(torn), None, torch.device("cpu"))


def test_a_folder_of_only_torn_files_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    for step in (2, 4):
        done = save(tmp_path, step, {}, keep=3)
        done.write_bytes(b"PK")
    with pytest.warns(UnreadableCheckpointWarning), pytest.raises(ValueError) as raised:
        find("latest", str(tmp_path), torch.device("cpu"))
    assert "step-00000002.pt" in str(raised.value) and "step-00000004.pt" in str(raised.value)


def test_a_temporary_file_left_by_a_killed_writer_is_cleared_by_the_next_save(
    tmp_path: Path,
) -> None:
    left = tmp_path / ".step-00000002.pt.abc123.tmp"
    left.write_bytes(b"half a file")
    save(tmp_path, 4, {}, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004.pt"]


def test_a_run_resumes_past_a_torn_latest_checkpoint(
    tmp_path: Path, make_model: Callable[..., TinyGPT], tokens: Tokens
) -> None:
    args = {**RUN, "checkpoint_dir": str(tmp_path), "checkpoint_every": 4}
    fine_tune(make_model(), tokens(40), **args)
    newest = checkpoints(tmp_path)[-1]
    newest.write_bytes(newest.read_bytes()[:1000])
    with pytest.warns(UnreadableCheckpointWarning, match=newest.name):
        result = fine_tune(make_model(), tokens(40), **args, resume_from="latest")
    assert result.resumed_from and result.resumed_from.endswith("step-00000008.pt")
    assert result.steps == 10
