"""A stage's findings as the judge makes them, each with the severity the policy gives its kind."""

from __future__ import annotations

from stagegate.model import Finding, Location
from stagegate.policy import Policy


class Findings:
    """Collects findings for one stage, with severities taken from the policy."""

    def __init__(self, stage: str, policy: Policy) -> None:
        self.stage, self.policy = stage, policy
        self.items: list[Finding] = []

    def add(
        self,
        kind: str,
        title: str,
        *,
        detail: str = "",
        location: Location | None = None,
        fix: str = "",
    ) -> None:
        """Add a finding of ``kind`` (a key of the policy's severity table)."""
        self.items.append(
            Finding(self.policy.severity[kind], self.stage, kind, title, detail, location, fix)
        )

    @property
    def blocking(self) -> bool:
        """Some finding so far blocks the merge."""
        return any(x.severity.blocks for x in self.items)
