"""A stage's findings as they are collected, each with the severity the policy gives its kind."""

from __future__ import annotations

from stagegate.model import Finding, Location
from stagegate.policy import Policy


class Findings:
    """Collects findings for one stage, with severities taken from the policy."""

    def __init__(self, stage: str, policy: Policy) -> None:
        self.stage, self.policy, self.items = stage, policy, []

    def add(
        self,
        kind: str,
        title: str,
        *,
        detail: str = "",
        location: Location | None = None,
        fix: str = "",
    ) -> None:
        self.items.append(
            Finding(self.policy.severity[kind], self.stage, kind, title, detail, location, fix)
        )
