"""fine_tune with ``strategy="fsdp"`` under torchrun on CPU (gloo), for real: two jobs.

Two ranks (one job, restarted once: see fsdp_worker.py) train the same run as one process and
as DDP, each FSDP option and feature, a Llama; a rank is SIGKILLed and the job resumes from its
sharded checkpoint; a rank raises. Four ranks resume the two ranks' checkpoint and run the
benchmark small. Each test reads what the jobs wrote."""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.utils.data import DataLoader, DistributedSampler

from amptrain import fine_tune
from amptrain.collate import PadCollate
from amptrain.sharded import read_whole

sys.path.insert(0, str(Path(__file__).parent))
import fault_worker
import fsdp_checks
import fsdp_worker

from torchrun_launch import torchrun

pytestmark = pytest.mark.integration

FAIL_FAST_S = 30  # a failed job ends this long after the failure, at most


def _ranks(out: Path, count: int, done: Any) -> list[dict[str, Any]]:
    missing = [r for r in range(count) if not (out / f"rank-{r}.json").is_file()]
    assert not missing, f"ranks {missing} wrote nothing: {done.stdout[-2000:]}{done.stderr[-4000:]}"
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(count)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The two-rank job: its output folder, what each rank wrote, how it ended and when."""
    out = tmp_path_factory.mktemp("fsdp-two")
    # after the first checkpoint (step 2; a kill before it restarts afresh), before the last
    kill_at = random.randint(3, fault_worker.STEPS // 2 - 1)
    done = torchrun(Path(fsdp_worker.__file__), "two", str(out), str(kill_at), restarts=1)
    ended = time.time()
    return {"out": out, "ranks": _ranks(out, 2, done), "done": done, "ended": ended,
            "kill_at": kill_at}  # fmt: skip


@pytest.fixture(scope="module")
def four_ranks(
    tmp_path_factory: pytest.TempPathFactory, two_ranks: dict[str, Any]
) -> dict[str, Any]:
    """The four-rank job, resuming the two ranks' checkpoint of step SNAPSHOT_AT."""
    out = tmp_path_factory.mktemp("fsdp-four")
    source = two_ranks["out"] / "ckpt-fsdp" / f"step-{fsdp_checks.SNAPSHOT_AT:08d}"
    done = torchrun(Path(fsdp_worker.__file__), "four", str(out), str(source), ranks=4)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return {"out": out, "ranks": _ranks(out, 4, done), "stdout": done.stdout}


def _load(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol, msg=name)


def _one_process() -> tuple[Any, dict[str, torch.Tensor]]:
    """The same run in this process, on the two ranks' global batch in their order."""
    dataset = fsdp_checks.ragged()
    sampler = DistributedSampler(range(len(dataset)), num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler, collate_fn=PadCollate())
    net = fsdp_checks.model()
    result = fine_tune(net, loader, fsdp_checks.val_rows(), epochs=2, num_workers=0)
    return result, net.state_dict()


def test_fsdp_weights_equal_one_processs_and_ddps_after_the_same_steps(
    two_ranks: dict[str, Any],
) -> None:
    # on rows of 3 to 12 tokens: each step's loss is the mean over both ranks' tokens
    out = two_ranks["out"]
    single, weights = _one_process()
    fsdp = _load(out / "fsdp-weights.pt")
    _close(fsdp, weights)
    _close(fsdp, _load(out / "ddp-weights.pt"))
    for rank in two_ranks["ranks"]:
        result = rank["same"]["fsdp"]["result"]
        assert result["strategy"] == "fsdp" and result["steps"] == single.steps == 20
        for ours, theirs in zip(result["epochs"], single.epochs, strict=True):
            assert ours["train_loss"] == pytest.approx(theirs.train_loss, rel=1e-5)
            assert ours["val_loss"] == pytest.approx(theirs.val_loss, rel=1e-5)


@pytest.mark.slow
def test_compute_metrics_gets_every_validation_row_in_order_from_unequal_shards(
    two_ranks: dict[str, Any], four_ranks: dict[str, Any]
) -> None:
    # 5 rows on two ranks: one scores two batches, the other one; 3 rows on four: rank 3 none
    for rank in two_ranks["ranks"]:
        assert rank["same"]["fsdp"]["labels"] == fsdp_checks.val_rows().tolist()
    for rank in four_ranks["ranks"]:
        assert rank["labels"] == fsdp_checks.val_rows(3).tolist()


def test_only_rank_0_writes_the_sinks_and_both_ranks_get_the_same_result(
    two_ranks: dict[str, Any],
) -> None:
    out, ranks = two_ranks["out"], two_ranks["ranks"]
    records = [json.loads(line) for line in (out / "fsdp.jsonl").read_text().splitlines()]
    assert len({r["run"] for r in records}) == 1
    steps = [r["step"] for r in records if "train/loss" in r and "epoch" not in r]
    assert steps == list(range(1, 21))
    logged = [r for r in records if "train/loss" in r]  # the steps' and the epochs'
    assert (out / "fsdp.csv").read_text().count(",train/loss,") == len(logged) == 22
    first, second = (r["same"]["fsdp"]["result"] for r in ranks)
    assert first["evals"] == second["evals"]
    assert [e["train_loss"] for e in first["epochs"]] == [e["train_loss"] for e in second["epochs"]]


def test_each_rank_writes_its_own_shard_and_no_rank_the_whole_model(
    two_ranks: dict[str, Any],
) -> None:
    folder = two_ranks["out"] / "ckpt-fsdp"
    assert sorted(p.name for p in folder.iterdir()) == ["step-00000015", "step-00000020"]
    last = folder / "step-00000020"
    assert sorted(p.name for p in last.iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp", "trainer.pt",
    ]  # fmt: skip
    shards = [(last / f"__{r}_0.distcp").stat().st_size for r in (0, 1)]
    print(f"shard files of two ranks: {shards} bytes")
    assert max(shards) < 0.75 * sum(shards)  # the whole model in one would be about all of it
    # every weight and its optimizer state is stored as each rank's own rows, in its own file
    metadata = FileSystemReader(last).read_metadata()
    files: dict[str, set[str]] = {}
    for index, info in metadata.storage_data.items():
        files.setdefault(index.fqn, set()).add(info.relative_path)
    tensors = metadata.state_dict_metadata.items()
    sharded = [k for k, m in tensors if getattr(m, "size", None)]  # not a step count (a scalar)
    assert len(sharded) == 85  # 29 weights (the head is the embedding), 28 pairs of moments
    for key in sharded:
        chunks = metadata.state_dict_metadata[key].chunks
        assert len(chunks) == 2 and files[key] == {"__0_0.distcp", "__1_0.distcp"}, key
    assert two_ranks["ranks"][0]["same"]["fsdp"]["result"]["checkpoint"] == str(last)


def test_accumulating_ranks_sync_gradients_once_per_optimizer_step(
    two_ranks: dict[str, Any],
) -> None:
    for rank in two_ranks["ranks"]:  # one reduce-scatter per block and root, however many micros
        assert rank["sync"]["4"] == rank["sync"]["1"] >= 2
    out = two_ranks["out"]
    _close(_load(out / "short-accumulated.pt"), _load(out / "short-plain.pt"))


@pytest.mark.parametrize("variant", ["recomputed", "compiled", "offloaded", "kept_gathered"])
def test_each_option_trains_the_same_numbers(two_ranks: dict[str, Any], variant: str) -> None:
    # gradient checkpointing, torch.compile (aot_eager), CPU offload, reshard_after_forward off
    out = two_ranks["out"]
    _close(_load(out / f"short-{variant}.pt"), _load(out / "short-plain.pt"))
    seen = two_ranks["ranks"][0]["variants"][variant]
    assert seen["dtypes"] == ["torch.float32"] and seen["devices"] == ["cpu"]  # offloaded too


def test_fp8_trains_under_fsdp_as_under_ddp_and_gloo_refuses_its_float8_all_gather(
    two_ranks: dict[str, Any],
) -> None:
    seen, out = two_ranks["ranks"][0]["variants"], two_ranks["out"]
    for strategy in ("fp8", "fp8_ddp"):
        assert seen[strategy]["precision"] == "fp8" and seen[strategy]["fp8_layers"] == 8
        assert seen[strategy]["dtypes"] == ["torch.float32"]  # fp32 master weights
    sharded, replicated = _load(out / "short-fp8.pt"), _load(out / "short-fp8_ddp.pt")
    _close(sharded, replicated, atol=1e-3)  # float8 rounds the ranks' sums differently
    plain = _load(out / "short-plain.pt")
    assert any(not torch.allclose(sharded[k], plain[k], atol=1e-4) for k in plain)
    refused = seen["fp8_all_gather"]
    assert "gloo cannot all-gather float8" in refused and "leave fp8_all_gather off" in refused


def test_bf16_mixed_computes_in_bf16_and_keeps_fp32_master_weights(
    two_ranks: dict[str, Any],
) -> None:
    variants = two_ranks["ranks"][0]["variants"]
    assert variants["bf16"]["compute"] == ["torch.bfloat16"]
    assert variants["bf16"]["dtypes"] == ["torch.float32"]
    assert variants["bf16"]["loss"] == pytest.approx(variants["plain"]["loss"], abs=0.05)


@pytest.mark.parametrize("count", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_each_rank_holds_its_shard_of_parameters_gradients_and_optimizer_state(
    request: pytest.FixtureRequest, count: int
) -> None:
    ranks = request.getfixturevalue("two_ranks" if count == 2 else "four_ranks")["ranks"]
    for rank, seen in enumerate(r["holdings"] for r in ranks):
        assert seen["world"] == count
        held = seen["params"] + seen["grads"]
        optimizer, whole = seen["optimizer"], seen["optimizer_whole"]
        print(
            f"N={count} rank {rank}: params+grads {held:,} of {seen['whole']:,} bytes "
            f"(whole/N {seen['whole'] // count:,}, with padding {seen['bound']:,}); optimizer "
            f"{optimizer:,} of {whole:,} (whole/N {whole // count:,}, with padding and step "
            f"counts {seen['optimizer_bound']:,})"
        )
        assert held <= seen["bound"] < seen["whole"] // count + seen["whole"] // 100
        assert seen["optimizer"] <= seen["optimizer_bound"]
        assert seen["optimizer_bound"] < seen["optimizer_whole"] // count + 4096
        # while a block runs, no other block is gathered: its shard, the root's and one block's
        assert seen["gathered_blocks"] == 1
        assert seen["gathered_bytes"] <= seen["root_bytes"] + seen["block_bytes"]


def test_reshard_after_forward_off_keeps_every_blocks_weights_gathered(
    two_ranks: dict[str, Any],
) -> None:
    seen = two_ranks["ranks"][0]["holdings_kept_gathered"]
    assert seen["gathered_blocks"] == 3  # by the last block's forward, all three are whole


def test_a_non_finite_gradient_in_one_ranks_shard_skips_the_step_on_every_rank(
    two_ranks: dict[str, Any],
) -> None:
    # rank 1's NaN reaches only rank 0's shard: each rank must skip on the global norm
    assert [r["nonfinite"]["overflow_steps"] for r in two_ranks["ranks"]] == [1, 1]


def test_the_sharded_grad_scaler_skips_and_backs_off_on_every_rank(
    two_ranks: dict[str, Any],
) -> None:
    for rank in two_ranks["ranks"]:
        assert rank["scaler"] == {"scales": [65536.0, 32768.0, 32768.0], "overflow_steps": 1}


def test_a_llama_is_sharded_by_its_decoder_layers_and_exports_its_best_and_last_weights(
    two_ranks: dict[str, Any],
) -> None:
    transformers = pytest.importorskip("transformers")
    llama = two_ranks["ranks"][0]["llama"]
    assert llama["sharded"] == ["FSDPLlamaForCausalLM", *["FSDPLlamaDecoderLayer"] * 2]
    assert llama["result"]["stop_reason"].startswith("early stopping")
    folder = two_ranks["out"] / "llama"
    best = transformers.LlamaForCausalLM.from_pretrained(folder / "ckpt" / "best").state_dict()
    _close(best, _load(folder / "restored.pt"), atol=0)  # load_best_at_end gave them back
    _close(best, _load(folder / "ckpt" / "best" / "weights.pt")["model"], atol=0)
    last = transformers.LlamaForCausalLM.from_pretrained(folder / "end").state_dict()
    step = llama["result"]["steps"]
    _close(last, read_whole(folder / "ckpt" / f"step-{step:08d}"), atol=0)
    assert any(not torch.equal(best[k], last[k]) for k in best)


@pytest.mark.slow
def test_a_checkpoint_of_two_ranks_loads_on_four_with_the_same_weights_and_optimizer_state(
    two_ranks: dict[str, Any], four_ranks: dict[str, Any]
) -> None:
    written = _load(two_ranks["out"] / "at-snapshot.pt")
    loaded = _load(four_ranks["out"] / "at-start.pt")
    _close(loaded["model"], written["model"], atol=0)
    assert loaded["optimizer"]["param_groups"] == written["optimizer"]["param_groups"]
    for name, state in written["optimizer"]["state"].items():
        _close(loaded["optimizer"]["state"][name], state, atol=0)
    for rank in four_ranks["ranks"]:
        assert any(w.startswith("ReshardWarning") for w in rank["warnings"])
        # 5 of its 10 steps were done in epoch 2; four ranks finish it in 3 of their 5
        assert rank["result"]["steps"] == 18 and rank["result"]["world_size"] == 4


def test_a_killed_rank_is_restarted_and_the_job_ends_bit_for_bit(
    two_ranks: dict[str, Any],
) -> None:
    out, kill_at = two_ranks["out"], two_ranks["kill_at"]
    # the SIGKILLed rank failed the group and torchrun restarted it, once
    assert [(out / "killed" / f"restarts-{r}").read_text() for r in (0, 1)] == ["1", "1"]
    got, expected = _load(out / "killed" / "weights-0.pt"), _load(out / "whole" / "weights-0.pt")
    assert all(torch.equal(got[k], expected[k]) for k in expected), f"killed at {kill_at}"
    result = json.loads((out / "killed" / "result-0.json").read_text())
    assert result["resumed_from"] and result["steps"] == fault_worker.STEPS // 2


def test_a_rank_that_raises_ends_the_job_at_once_with_its_traceback_printed_once(
    two_ranks: dict[str, Any],
) -> None:
    done = two_ranks["done"]
    failed = float((two_ranks["out"] / "raise" / "failed-at").read_text())
    assert done.returncode != 0
    assert two_ranks["ended"] - failed < FAIL_FAST_S, done.stderr[-3000:]
    assert done.stderr.count("planted failure at step 3") == 1


@pytest.mark.slow
def test_the_benchmark_prints_fsdp_against_ddp_and_each_ranks_bytes(
    four_ranks: dict[str, Any],
) -> None:
    doc = json.loads((four_ranks["out"] / "bench" / "fsdp_vs_ddp.json").read_text())
    assert doc["world_size"] == 4 and "FSDP/DDP step time" in four_ranks["stdout"]
    assert all(len(doc["seconds_per_step"][a]) == 2 for a in ("ddp", "fsdp"))
    assert all(s > 0 for a in ("ddp", "fsdp") for s in doc["seconds_per_step"][a])
    for held in doc["held_bytes_by_rank"]:
        assert held["ddp"]["params"] == doc["param_bytes_whole"]
        assert held["fsdp"]["params"] <= doc["param_bytes_whole"] // 4 + 1024
        assert held["fsdp"]["optimizer"] < held["ddp"]["optimizer"] // 3
