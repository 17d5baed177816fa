"""A stage's findings as the judge makes them, each with the severity the policy gives its kind."""

from __future__ import annotations

from stagegate.judge.policy import Policy
from stagegate.kinds import Kind
from stagegate.model import Finding, Location


class Findings:
    """Collects findings for one stage, with severities taken from the policy."""

    def __init__(self, stage: str, policy: Policy) -> None:
        self.stage, self.policy = stage, policy
        self.items: list[Finding] = []

    def add(
        self,
        kind: Kind,
        title: str,
        *,
        detail: str = "",
        location: Location | None = None,
        fix: str = "",
    ) -> None:
        """Add a finding of ``kind``, at the severity the policy gives it."""
        kind = Kind(kind)  # a name no kind has is a ValueError here, never a quiet finding
        severity = self.policy.severity[kind]
        self.items.append(Finding(severity, self.stage, kind, title, detail, location, fix))

    @property
    def blocking(self) -> bool:
        """Some finding so far blocks the merge."""
        return any(x.severity.blocks for x in self.items)
