"""amptrain.benchmark: measured AMP speedup, memory and accuracy.

Run it as ``python -m amptrain.benchmark --preset {gpu,cpu-smoke}``.
"""

from amptrain.benchmark.presets import PRESETS, Preset
from amptrain.benchmark.run import FORMAT_VERSION, parse_precisions, run_benchmark

__all__ = ["FORMAT_VERSION", "PRESETS", "Preset", "parse_precisions", "run_benchmark"]
