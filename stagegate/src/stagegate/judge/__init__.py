"""The judge: the only place that decides. From collected data and the policy it makes every
finding, each stage's status and score, and the decision, all as typed values."""

from stagegate.judge.stage import judge_stage
from stagegate.judge.verdict import decide

__all__ = ["decide", "judge_stage"]
