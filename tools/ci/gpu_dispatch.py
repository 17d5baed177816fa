"""The dispatch contract between this repository's gpu.yml and the GPU runner, which lives in a
repository of its own that only maintainers can push to (no pull request of this repository
can name its runner: a runner registered to that repository takes jobs of that repository
alone).

    python tools/ci/gpu_dispatch.py send      # gpu.yml's dispatch job, with the gate App's
                                             # token for the runner repository (GH_TOKEN)
    python tools/ci/gpu_dispatch.py verify    # the runner repository's gpu-runner.yml, first

``send`` dispatches gpu-runner.yml on the runner repository's default branch with the admitted
commit, its base and the image digest, keyed by this run (repository, run id, attempt), waits
for that run and writes ``run-id=`` and ``conclusion=``. ``verify`` refuses (exit 2, every
reason printed) unless each check below holds; nothing of the commit is fetched before it:

- workflow: the running file is the runner repository's own gpu-runner.yml (not a copy);
- ref: it runs from the runner repository's default branch, started by workflow_dispatch;
- sender: the gate App dispatched it, and the App started this attempt (no one re-ran it);
- attempt: this is the run's first attempt (a re-run replays an old dispatch);
- source: the dispatch names the repository this runner serves;
- source run: that repository's run is its gpu.yml, on its default branch, still running;
- admission: the gate App marked the commit "benchmark running" from that very run;
- once: no earlier run of gpu-runner.yml carries the same key (a dispatch sent twice).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from github_api import Api, RestApi, read_event, shown, write_outputs
from verdict_status import GPU, RUNNING

RUNNER_WORKFLOW = ".github/workflows/gpu-runner.yml"
SOURCE_WORKFLOW = ".github/workflows/gpu.yml"
SOURCE_EVENTS = {"push", "workflow_run", "issue_comment", "workflow_dispatch"}
SHA = re.compile(r"[0-9a-f]{40}")
IMAGE = re.compile(r"ghcr\.io/[a-z0-9][a-z0-9._-]*/amptrain-verify@sha256:[0-9a-f]{64}")
POLL_S, WAIT_S = 20, 50 * 60


class ContractError(Exception):
    """A dispatch that cannot be sent or waited for."""


@dataclass(frozen=True)
class Dispatch:
    """The inputs of gpu-runner.yml: what main's gpu.yml admitted, and which run asked."""

    source_repo: str
    source_run_id: str
    source_run_attempt: str
    sha: str
    base: str
    image: str

    def key(self) -> str:
        """The run name gpu-runner.yml shows: one per attempt of one source run."""
        return f"gpu {self.source_repo}#{self.source_run_id}.{self.source_run_attempt}"

    def malformed(self) -> str | None:
        """Why the inputs are not a commit, a base, an image digest and a run, or None."""
        if not SHA.fullmatch(self.sha) or (self.base and not SHA.fullmatch(self.base)):
            return "sha and base must be full commit SHAs"
        if not IMAGE.fullmatch(self.image):
            return f"{self.image!r} is not the verification image by digest"
        if not (self.source_run_id.isdigit() and self.source_run_attempt.isdigit()):
            return "the source run is not named by its id and attempt"
        return None


@dataclass(frozen=True)
class Runner:
    """What GitHub says is running on the runner repository's side (no workflow sets these),
    and what it was configured to serve (its repository variables)."""

    repo: str  # GITHUB_REPOSITORY
    default_branch: str
    workflow_ref: str  # GITHUB_WORKFLOW_REF
    ref: str  # GITHUB_REF
    event_name: str  # GITHUB_EVENT_NAME
    run_id: str  # GITHUB_RUN_ID
    run_attempt: str  # GITHUB_RUN_ATTEMPT
    sender: str  # the event's sender: who dispatched
    triggering_actor: str  # GITHUB_TRIGGERING_ACTOR: who started this attempt
    app_login: str  # the gate App's bot login: "<slug>[bot]"
    source_repo: str  # the one repository this runner serves


Check = Callable[[Runner, Dispatch, Api], str | None]


def _workflow(r: Runner, d: Dispatch, api: Api) -> str | None:
    path = r.workflow_ref.partition("@")[0]
    wanted = f"{r.repo}/{RUNNER_WORKFLOW}"
    return None if path == wanted else f"the running file is {path}, not {wanted}"


def _ref(r: Runner, d: Dispatch, api: Api) -> str | None:
    main = f"refs/heads/{r.default_branch}"
    at = r.workflow_ref.partition("@")[2]
    if r.event_name != "workflow_dispatch" or r.ref != main or at != main:
        return f"{r.event_name} on {r.ref} ({at}), not workflow_dispatch on {main}"
    return None


def _sender(r: Runner, d: Dispatch, api: Api) -> str | None:
    if r.sender != r.app_login or r.triggering_actor != r.app_login:
        return f"sent by {r.sender!r}, started by {r.triggering_actor!r}, not {r.app_login}"
    return None


def _attempt(r: Runner, d: Dispatch, api: Api) -> str | None:
    return None if r.run_attempt == "1" else f"attempt {r.run_attempt}: a re-run replays"


def _source(r: Runner, d: Dispatch, api: Api) -> str | None:
    if d.source_repo != r.source_repo:
        return f"{d.source_repo!r} is not the repository this runner serves ({r.source_repo})"
    return d.malformed()


def _source_run(r: Runner, d: Dispatch, api: Api) -> str | None:
    run = api.get(f"/repos/{r.source_repo}/actions/runs/{d.source_run_id}")
    name, owner = f"run {d.source_run_id}", (run.get("repository") or {}).get("full_name")
    if run.get("path") != SOURCE_WORKFLOW or owner != r.source_repo:
        return f"{name} runs {owner}'s {run.get('path')!r}, not {SOURCE_WORKFLOW}"
    if run.get("event") not in SOURCE_EVENTS or run.get("head_branch") != r.default_branch:
        return f"{name} ran for {run.get('event')} on {run.get('head_branch')!r}"
    if str(run.get("run_attempt")) != d.source_run_attempt or run.get("status") == "completed":
        return f"{name} attempt {run.get('run_attempt')} is {run.get('status')}: not this one"
    return None


def _admission(r: Runner, d: Dispatch, api: Api) -> str | None:
    run_url = api.get(f"/repos/{r.source_repo}/actions/runs/{d.source_run_id}").get("html_url")
    statuses = api.get(f"/repos/{r.source_repo}/commits/{d.sha}/statuses", per_page=100)
    latest = next(
        (s for s in statuses
         if s.get("context") == GPU and (s.get("creator") or {}).get("login") == r.app_login),
        None,
    )  # fmt: skip
    if latest is None or latest.get("state") != "pending" or latest.get("description") != RUNNING:
        return f"the gate App has not marked {d.sha[:12]} {RUNNING!r}"
    if not run_url or latest.get("target_url") != run_url:
        return f"{d.sha[:12]} was admitted by {latest.get('target_url')}, not by {run_url}"
    return None


def _once(r: Runner, d: Dispatch, api: Api) -> str | None:
    runs = api.get(
        f"/repos/{r.repo}/actions/workflows/gpu-runner.yml/runs", per_page=100
    ).get("workflow_runs", [])  # fmt: skip
    earlier = [
        x["id"] for x in runs if x.get("display_title") == d.key() and int(x["id"]) < int(r.run_id)
    ]
    return f"run {earlier[0]} already took {d.key()!r}" if earlier else None


CHECKS: dict[str, Check] = {
    "workflow": _workflow, "ref": _ref, "sender": _sender, "attempt": _attempt,
    "source": _source, "source run": _source_run, "admission": _admission, "once": _once,
}  # fmt: skip


def refusals(runner: Runner, dispatch: Dispatch, api: Api) -> dict[str, str]:
    """Every check that refuses the dispatch, with its reason (none: it may run). The API
    checks run only once the ones that need no API hold."""
    found: dict[str, str] = {}
    for name, check in CHECKS.items():
        if name in ("source run", "admission", "once") and found:
            break
        why = check(runner, dispatch, api)
        if why:
            found[name] = why
    return found


def send(api: Api, runner_repo: str, branch: str, dispatch: Dispatch) -> None:
    """Dispatch gpu-runner.yml on ``runner_repo``'s ``branch``."""
    why = dispatch.malformed()
    if why:
        raise ContractError(why)
    api.post(
        f"/repos/{runner_repo}/actions/workflows/gpu-runner.yml/dispatches",
        {"ref": branch, "inputs": asdict(dispatch)},
    )


def wait(
    api: Api,
    runner_repo: str,
    key: str,
    app_login: str,
    sleep: Callable[[float], None] = time.sleep,
    limit_s: float = WAIT_S,
) -> tuple[int, str]:
    """The run of gpu-runner.yml named ``key`` that the App started, once it completed: its id
    and conclusion."""
    waited = 0.0
    while waited <= limit_s:
        runs = api.get(
            f"/repos/{runner_repo}/actions/workflows/gpu-runner.yml/runs",
            event="workflow_dispatch", per_page=100,
        ).get("workflow_runs", [])  # fmt: skip
        mine = sorted(
            (r for r in runs if r.get("display_title") == key
             and (r.get("triggering_actor") or {}).get("login") == app_login),
            key=lambda r: r["id"],
        )  # fmt: skip
        if mine and mine[0].get("status") == "completed":
            return int(mine[0]["id"]), str(mine[0].get("conclusion") or "")
        sleep(POLL_S)
        waited += POLL_S
    raise ContractError(f"no completed run named {key!r} after {limit_s:.0f} s")


def runner_from(env: Mapping[str, str], event: Mapping[str, Any]) -> Runner:
    """The runner side's context, from the job's variables and the event."""
    return Runner(
        env["GITHUB_REPOSITORY"], event["repository"]["default_branch"],
        env["GITHUB_WORKFLOW_REF"], env["GITHUB_REF"], env["GITHUB_EVENT_NAME"],
        env["GITHUB_RUN_ID"], env["GITHUB_RUN_ATTEMPT"], event["sender"]["login"],
        env["GITHUB_TRIGGERING_ACTOR"], f"{env['GATE_APP_SLUG']}[bot]", env["GATE_SOURCE_REPO"],
    )  # fmt: skip


def dispatch_from(inputs: Mapping[str, Any]) -> Dispatch:
    """The dispatch's inputs, every field as text."""
    return Dispatch(**{f.name: str(inputs.get(f.name) or "") for f in fields(Dispatch)})


def _verify(env: Mapping[str, str]) -> int:
    event = read_event()
    found = refusals(runner_from(env, event), dispatch_from(event.get("inputs") or {}), RestApi())
    for name, why in found.items():
        print(f"gpu_dispatch: refused ({name}): {shown(why)}", file=sys.stderr)
    return 2 if found else 0


def _send(env: Mapping[str, str]) -> int:
    dispatch = dispatch_from({
        "source_repo": env["GITHUB_REPOSITORY"], "source_run_id": env["GITHUB_RUN_ID"],
        "source_run_attempt": env["GITHUB_RUN_ATTEMPT"], "sha": env["SHA"],
        "base": env.get("BASE_SHA", ""), "image": env["IMAGE"],
    })  # fmt: skip
    api, runner_repo = RestApi(), env["GPU_RUNNER_REPO"]
    send(api, runner_repo, env.get("GPU_RUNNER_BRANCH", "main"), dispatch)
    run_id, conclusion = wait(api, runner_repo, dispatch.key(), f"{env['GATE_APP_SLUG']}[bot]")
    print(f"{runner_repo} run {run_id}: {conclusion}")
    write_outputs({"run-id": str(run_id), "conclusion": conclusion})
    return 0


def main(argv: list[str] | None = None) -> int:
    """send (this repository's gpu.yml) or verify (the runner repository's gpu-runner.yml)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["send", "verify"])
    args = parser.parse_args(argv)
    try:
        return _send(os.environ) if args.command == "send" else _verify(os.environ)
    except ContractError as exc:
        print(f"gpu_dispatch: {shown(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
