"""Jinja2 rendering of the view models: templates only loop and substitute."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import jinja2

from stagegate.model import Verdict
from stagegate.view.stage import StageView
from stagegate.view.summary import SummaryView
from stagegate.view.text import cut

VERDICT_FORMAT_VERSION = 1


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("stagegate.view", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # markdown, escaped in Python by stagegate.view.text
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def _tidy(text: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def render(template: str, **values: Any) -> str:
    """Render one template with ``values``; an undefined name is an error, never blank."""
    return _tidy(_env().get_template(template).render(**values))


def render_stage(view: StageView) -> str:
    return render("stage.md.j2", v=view)


def render_summary(view: SummaryView) -> str:
    return render("summary.md.j2", v=view)


TEXT_BOUND = 4000  # characters of any one text in verdict.json; the reports say where the rest is


def verdict_json(verdict: Verdict, generated_at: str, commit: str) -> str:
    """The decision for machines: stages, findings, deductions, reasons."""
    doc = {
        "format_version": VERDICT_FORMAT_VERSION,
        "decision": verdict.decision.value,
        "score": verdict.score,
        "generated_at": generated_at,
        "commit": commit,
        "blocking_reasons": [cut(r, TEXT_BOUND) for r in verdict.blocking_reasons],
        "required_fixes": [cut(r, TEXT_BOUND) for r in verdict.required_fixes],
        "stages": [
            {
                "name": s.name,
                "status": s.status.value,
                "required": s.required,
                "score": s.score,
                "note": s.note,
                "exit_code": s.data.record.exit_code if s.data.record else None,
                "duration_s": s.data.record.duration_s if s.data.record else None,
                "findings": [
                    {
                        "severity": f.severity.value,
                        "kind": f.kind,
                        "title": cut(f.title, TEXT_BOUND),
                        "detail": cut(f.detail, TEXT_BOUND),
                        "location": cut(str(f.location), TEXT_BOUND) if f.location else None,
                        "fix": cut(f.fix, TEXT_BOUND),
                    }
                    for f in s.findings
                ],
            }
            for s in verdict.stages
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
