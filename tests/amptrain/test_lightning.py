"""AmpWandbCallback under a real Lightning Trainer on CPU, read back from a real CSVLogger."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from lightning.pytorch.plugins import MixedPrecision  # noqa: E402

from amptrain import AmpWandbCallback, TinyGPT, lm_loss, synthetic_token_data  # noqa: E402

pytestmark = [
    # Lightning's own notices about these settings, not ours.
    pytest.mark.filterwarnings("ignore:.*is supported for historical reasons.*"),
    pytest.mark.filterwarnings("ignore:.*AMP with fp16 is not supported on CPU.*"),
    pytest.mark.filterwarnings("ignore:.*smaller than the logging interval.*"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*litlogger.*"),
]


class _Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = TinyGPT(32, d_model=16, n_layers=1, n_heads=2, max_seq_len=8)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return lm_loss(self.model(batch), batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def _fit(tmp_path: Path, **trainer_args: object) -> tuple[object, list[dict[str, str]], str]:
    logger = CSVLogger(tmp_path)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=3,
        logger=logger,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[AmpWandbCallback(log_every_n_steps=1)],
        **trainer_args,
    )
    data = torch.utils.data.DataLoader(synthetic_token_data(12, 8, 32), batch_size=4)
    trainer.fit(_Module(), data)
    log_dir = Path(logger.log_dir)
    with (log_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    return trainer, rows, (log_dir / "hparams.yaml").read_text()


@pytest.mark.parametrize(
    ("precision", "used", "enabled"),
    [
        ("16", "bf16-mixed", "1.0"),
        ("16-mixed", "bf16-mixed", "1.0"),
        ("16-true", "16-true", "0.0"),
        ("bf16", "bf16-mixed", "1.0"),
    ],
)
def test_callback_logs_the_precision_lightning_uses(
    tmp_path: Path, precision: str, used: str, enabled: str
) -> None:
    # On CPU Lightning swaps fp16 mixed precision for bf16: the log must say what really ran.
    _, rows, hparams = _fit(tmp_path, precision=precision)
    assert f"amp/precision: {used}" in hparams
    assert rows and all(r["amp/enabled"] == enabled for r in rows)
    assert all(not r.get("amp/loss_scale") for r in rows)  # no fp16 scaler, no scale


def test_callback_logs_the_fp16_loss_scale_from_the_precision_plugin(tmp_path: Path) -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    _trainer, rows, hparams = _fit(
        tmp_path, plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)]
    )
    assert "amp/precision: 16-mixed" in hparams
    scales = [float(r["amp/loss_scale"]) for r in rows]
    assert len(scales) >= 3 and scales[-1] == scaler.get_scale() > 0


def test_callback_without_a_wandb_run_does_not_import_wandb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "wandb", raising=False)  # restored after the test
    _fit(tmp_path, precision="32-true")
    assert "wandb" not in sys.modules


def test_callback_rejects_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="log_every_n_steps"):
        AmpWandbCallback(log_every_n_steps=0)
