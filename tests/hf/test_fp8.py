"""precision="fp8" on transformers models built from configs, emulated on the CPU: the layers
each family trains in float8 are the planned ones (its blocks' projections, never the
embeddings or the head), and a model fp8 trained is saved in its own format, in its own dtype,
and loads where torchao is not installed."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from amptrain import fine_tune, fp8, resolve_precision
from amptrain.pretrained import SavePretrained

from .conftest import MODELS, encode

pytest.importorskip("torchao.float8")  # amptrain[fp8]; the test extra installs it
from torchao.float8.float8_linear import Float8Linear

EMULATED = {"precision": "fp8", "fp8_emulate": True}
# each block's projections: GPT-2's attention (c_attn, c_proj) and MLP (c_fc, c_proj), as
# Conv1D; Llama's q, k, v, o and gate, up, down
PLANNED = {
    "gpt2": [f"transformer.h.{i}.{n}" for i in range(2)
             for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")],
    "llama": [f"model.layers.{i}.{n}" for i in range(2)
              for n in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                        "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLANNED))
def test_each_family_trains_its_blocks_projections_in_float8(name: str, tokenizer: Any) -> None:
    model = MODELS[name]()
    plan = fp8.plan_layers(model)
    assert sorted(plan.converted) == sorted(PLANNED[name]) and plan.converted
    assert fp8.convert(model, resolve_precision("fp8", "cpu", fp8_emulate=True)) == len(
        PLANNED[name]
    )
    float8 = sorted(n for n, m in model.named_modules() if isinstance(m, Float8Linear))
    assert float8 == sorted(PLANNED[name]) and fp8.count(model) == len(PLANNED[name])
    assert type(model.get_output_embeddings()) is nn.Linear  # the head stays in bf16
    assert not any(isinstance(m, Float8Linear) for m in model.get_input_embeddings().modules())
    ids = torch.tensor(encode(tokenizer, 2)["input_ids"][0]).unsqueeze(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    assert math.isfinite(loss.item())


LOAD = """
import sys, torch, transformers
sys.modules["torchao"] = None  # as where amptrain[fp8] is not installed
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
ids = torch.load(sys.argv[2])
model.eval()
with torch.no_grad():
    torch.save({"logits": model(ids).logits, "state": model.state_dict()}, sys.argv[3])
print(sorted({str(p.dtype) for p in model.parameters()}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLANNED))
def test_a_model_fp8_trained_is_saved_in_its_own_dtype_and_loads_without_torchao(
    name: str, tokenizer: Any, tmp_path: Path
) -> None:
    model, rows = MODELS[name](), encode(tokenizer, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    saver = SavePretrained(model, tmp_path / "out")
    result = fine_tune(model, rows, tokenizer=tokenizer, **EMULATED, max_steps=3, batch_size=4,
                       num_workers=0, callbacks=[saver])  # fmt: skip
    assert result.precision == "fp8" and result.fp8_layers == len(PLANNED[name])
    assert not any(isinstance(m, Float8Linear) for m in model.modules())  # its own layers back
    assert model.state_dict().keys() == before.keys()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    ids = torch.tensor(rows["input_ids"][0]).unsqueeze(0)
    torch.save(ids, tmp_path / "ids.pt")
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD, tmp_path / "out", tmp_path / "ids.pt", tmp_path / "out.pt"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.split("\n")[-2] == "['torch.float32']"  # the model's own dtype
    model.eval()
    with torch.no_grad():
        ours = model(ids).logits
    there = torch.load(tmp_path / "out.pt")
    # the weights it loads are the trained ones, bit for bit; its logits, computed by another
    # process's kernels, the same within float32's rounding
    assert there["state"].keys() == model.state_dict().keys()
    assert all(torch.equal(there["state"][k], v) for k, v in model.state_dict().items())
    torch.testing.assert_close(there["logits"], ours)
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert any(k.startswith(tuple(PLANNED[name])) for k in changed)  # fp8 trained them
