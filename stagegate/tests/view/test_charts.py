"""Charts as GitHub draws them: bars from zero, whole-number steps, coinciding lines named."""

from __future__ import annotations

import re

from stagegate.view.charts import bar_chart, line_chart


def test_bars_start_at_zero_so_heights_are_proportional() -> None:
    mermaid, _ = bar_chart("Step time", "ms", {"32-true": 85.4, "bf16-mixed": 37.6})
    (axis,) = [line for line in mermaid.splitlines() if "y-axis" in line]
    low, high = map(float, re.search(r"(-?[\d.]+) --> ([\d.]+)", axis).groups())
    assert low == 0 and high >= 85.4


def test_negative_bars_widen_the_axis_below_zero() -> None:
    mermaid, _ = bar_chart("Change", "%", {"a": -4.0, "b": 2.0})
    assert re.search(r"y-axis \"%\" -4\.4 --> 2\.2", mermaid)


def test_epochs_are_whole_numbers() -> None:
    mermaid, _ = line_chart("Loss", "epoch", "loss", {"fp32": [3.0, 2.0, 1.5]})
    assert '    x-axis "epoch" [1, 2, 3]' in mermaid.splitlines()


def test_downsampled_steps_are_labelled_by_their_first_step() -> None:
    mermaid, _ = line_chart("Loss", "step", "loss", {"a": [float(i) for i in range(250)]})
    labels = re.search(r"x-axis \"step\" \[([^\]]*)\]", mermaid).group(1).split(", ")
    assert labels[:3] == ["1", "4", "7"] and all(label.isdigit() for label in labels)


def test_lines_that_coincide_are_named_as_such() -> None:
    _, legend = line_chart(
        "Loss", "epoch", "loss", {"fp32": [3.0, 2.0], "fp16": [3.0, 2.0], "bf16": [3.1, 2.1]}
    )
    assert "2. fp16 (coincides exactly with 1; drawn as one line)" in legend
    assert "3. bf16," not in legend and legend.endswith("3. bf16")
