"""GitHub's REST API as the CI scripts use it: JSON in and out, pages followed, the token from
GH_TOKEN. The scripts take any object with these methods, so tests pass one that answers from
recorded payloads.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

MAX_PAGES = 30  # 30 pages of 100: the most any caller here reads


class Api(Protocol):
    """The calls the CI scripts make."""

    def get(self, path: str, **params: Any) -> Any:
        """GET ``path`` with query ``params``; the decoded JSON."""
        ...

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` as JSON to ``path``; the decoded JSON."""
        ...

    def pages(self, path: str, key: str | None = None, **params: Any) -> Iterator[Any]:
        """Every item of a paginated list (under ``key`` when the list is inside an object)."""
        ...


class RestApi:
    """The real API, with the token in ``token_var``: GH_TOKEN (the job's GITHUB_TOKEN) to
    read, GATE_TOKEN (the gate App's installation token) to post the required results."""

    def __init__(self, env: Mapping[str, str] | None = None, token_var: str = "GH_TOKEN") -> None:
        env = os.environ if env is None else env
        self.base = env.get("GITHUB_API_URL", "https://api.github.com")
        if not env.get(token_var):
            raise SystemExit(f"{token_var} is not set: this step has no token to act with")
        self.token = env[token_var]

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None, **params: Any) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(
            f"{self.base}{path}{query}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            },
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def get(self, path: str, **params: Any) -> Any:
        """GET ``path`` with query ``params``; the decoded JSON."""
        return self._call("GET", path, None, **params)

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` as JSON to ``path``; the decoded JSON."""
        return self._call("POST", path, body)

    def pages(self, path: str, key: str | None = None, **params: Any) -> Iterator[Any]:
        """Every item of a paginated list, 100 a page, at most MAX_PAGES pages."""
        for page in range(1, MAX_PAGES + 1):
            data = self.get(path, **{**params, "per_page": 100, "page": page})
            items = data[key] if key else data
            yield from items
            if len(items) < 100:
                return


def shown(value: object) -> str:
    """``value`` as one line of plain text for a log: every control character (a line break
    above all) escaped, so no name from an artifact or an event can begin a line of the job's
    log, where ``::command::`` would be read as a workflow command."""
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode() for c in str(value)
    )


def write_outputs(values: Mapping[str, str], env: Mapping[str, str] | None = None) -> None:
    """Append ``name=value`` lines to $GITHUB_OUTPUT (stdout outside Actions); values are one
    line each, so no value can add an output of its own."""
    env = os.environ if env is None else env
    lines = "".join(f"{k}={' '.join(str(v).splitlines())}\n" for k, v in values.items())
    target = env.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(lines)
    else:
        print(lines, end="")


def run_url(env: Mapping[str, str] | None = None) -> str:
    """The page of the running workflow run, for a status's link."""
    env = os.environ if env is None else env
    server, repo, run = env["GITHUB_SERVER_URL"], env["GITHUB_REPOSITORY"], env["GITHUB_RUN_ID"]
    return f"{server}/{repo}/actions/runs/{run}"


def read_event(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The triggering event's payload ($GITHUB_EVENT_PATH)."""
    env = os.environ if env is None else env
    with open(env["GITHUB_EVENT_PATH"], encoding="utf-8") as f:
        return json.load(f)
