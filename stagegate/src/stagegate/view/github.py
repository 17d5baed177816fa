"""GitHub outputs: the job summary, a sticky pull-request comment body, error annotations."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from stagegate.model import Verdict
from stagegate.view.render import render
from stagegate.view.text import cut

STEP_SUMMARY_LIMIT = 1024 * 1024  # bytes GitHub accepts per step summary
COMMENT_LIMIT = 65536  # characters in an issue comment
COMMENT_MARKER = "<!-- stagegate:verification-report -->"
MAX_ANNOTATIONS = 10


def _fit_bytes(text: str, limit: int, note: str) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    room = limit - len(note.encode("utf-8")) - 8
    return data[:room].decode("utf-8", errors="ignore") + "\n\n" + note + "\n"


def append_step_summary(summary_md: str, env: Mapping[str, str]) -> Path | None:
    """Append the summary to ``$GITHUB_STEP_SUMMARY`` within its size limit; None if unset."""
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    path = Path(target)
    used = path.stat().st_size if path.exists() else 0
    text = _fit_bytes(
        summary_md,
        max(0, STEP_SUMMARY_LIMIT - used - 1),
        "_Summary cut to fit the job summary; see the reports artifact._",
    )
    with path.open("a", encoding="utf-8") as f:
        f.write(text + "\n")
    return path


# A link to a report beside the summary ("[static](static.md)"): it resolves in the reports
# folder, never in a pull-request comment.
_REPORT_LINK = re.compile(r"\[([^\]\n]*)\]\([\w.-]+\.md\)")


def comment_body(summary_md: str) -> str:
    """A PR comment: the hidden marker (so one sticky comment is updated) and the summary, its
    links to the reports beside it plain text (they are in the run's artifact)."""
    summary_md = _REPORT_LINK.sub(r"\1", summary_md)
    room = COMMENT_LIMIT - 1000  # the marker and the truncation note
    truncated = len(summary_md) > room
    body = render(
        "comment.md.j2", marker=COMMENT_MARKER, summary=cut(summary_md, room), truncated=truncated
    )
    return body


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(verdict: Verdict) -> list[str]:
    """``::error`` workflow commands for the first blocking findings that have a location."""
    lines = []
    for stage in verdict.stages:
        for f in stage.blocking:
            if f.location is None:
                continue
            props = f"file={_escape_property(f.location.file)}"
            if f.location.line:
                props += f",line={f.location.line}"
            props += f",title={_escape_property(f'{stage.name}: {f.severity.value}')}"
            message = cut(f"{f.title}. {f.detail}".strip(), 500)
            lines.append(f"::error {props}::{_escape_data(message)}")
            if len(lines) == MAX_ANNOTATIONS:
                return lines
    return lines
