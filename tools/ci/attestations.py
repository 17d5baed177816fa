"""Trust by workflow identity: an image, a baseline or a base record is used only when a
build-provenance attestation (GitHub's, signed through Sigstore) says that a workflow file of
this repository, run from ``refs/heads/main`` on a GitHub-hosted runner, made exactly these
bytes. The branch a run calls itself by is never asked: a tag named ``main`` signs as
``refs/tags/main``, a copy of the workflow as another file.

    python tools/ci/attestations.py verify --repo OWNER/REPO --workflow image.yml \\
        --digest sha256:HEX | --file PATH... [--trusted-root FILE] [--signer URI]

fetches the attestations of each digest from the API (``GET /repos/R/attestations/DIGEST``,
GH_TOKEN), verifies each bundle with sigstore (the certificate chain to the trusted root, the
transparency log entry, the signature over the statement) against the identity policy, and
checks that the statement's subject is that digest. Exit 0 when every digest has one such
attestation, 2 otherwise, printing why. Without ``--trusted-root`` the root comes from
Sigstore's TUF repository (network); the tests pass a recorded one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from github_api import Api, RestApi, shown

ISSUER = "https://token.actions.githubusercontent.com"
SLSA_V1 = "https://slsa.dev/provenance/v1"
IN_TOTO = "application/vnd.in-toto+json"


class AttestationError(Exception):
    """No attestation vouches for these bytes, and why."""


@dataclass(frozen=True)
class Origin:
    """Who must have made the bytes: ``workflow`` (a file in .github/workflows) of ``repo``,
    run from ``ref``. ``signer`` is the workflow that signed, where a reusable workflow did
    (GitHub's own attest workflow, say); by default the same file."""

    repo: str
    workflow: str
    ref: str = "refs/heads/main"
    server: str = "https://github.com"
    signer: str | None = None

    def build_config(self) -> str:
        """The certificate's Build Config URI: the workflow file the run started from."""
        return f"{self.server}/{self.repo}/.github/workflows/{self.workflow}@{self.ref}"


def identity_policy(origin: Origin) -> Any:
    """sigstore's policy for the signing certificate: every claim must match."""
    from sigstore.verify import policy

    return policy.AllOf([
        policy.OIDCIssuerV2(ISSUER),
        policy.OIDCSourceRepositoryURI(f"{origin.server}/{origin.repo}"),
        policy.OIDCSourceRepositoryRef(origin.ref),
        policy.OIDCBuildConfigURI(origin.build_config()),
        policy.OIDCBuildSignerURI(origin.signer or origin.build_config()),
        policy.OIDCRunnerEnvironment("github-hosted"),
    ])  # fmt: skip


def trusted_root(path: Path | None) -> Any:
    """Sigstore's trusted root: a recorded file, or the production one through TUF."""
    from sigstore.models import TrustedRoot

    return TrustedRoot.from_file(str(path)) if path else TrustedRoot.production()


def subject_digests(statement: dict[str, Any]) -> set[str]:
    """The sha256 digests an in-toto statement is about."""
    return {
        f"sha256:{s['digest']['sha256']}"
        for s in statement.get("subject") or []
        if isinstance(s, dict) and isinstance(s.get("digest"), dict) and "sha256" in s["digest"]
    }


def verify_bundle(bundle: str, digest: str, origin: Origin, root: Any) -> dict[str, Any]:
    """The provenance statement of ``bundle`` once it verifies for ``origin`` and names
    ``digest`` (``sha256:HEX``); an AttestationError saying why otherwise."""
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle
    from sigstore.verify import Verifier

    try:
        payload_type, payload = Verifier(trusted_root=root).verify_dsse(
            Bundle.from_json(bundle), identity_policy(origin)
        )
    except (SigstoreError, ValueError) as exc:
        why = f"the bundle does not verify for {origin.build_config()}: {exc}"
        raise AttestationError(why) from None
    statement = json.loads(payload)
    if payload_type != IN_TOTO or statement.get("predicateType") != SLSA_V1:
        raise AttestationError(f"not a SLSA provenance statement ({payload_type})")
    if digest not in subject_digests(statement):
        raise AttestationError(f"the attestation is about {sorted(subject_digests(statement))}")
    return statement


def bundles(api: Api, repo: str, digest: str) -> list[str]:
    """Every attestation bundle GitHub holds for ``digest`` in ``repo``, as JSON text."""
    answer = api.get(f"/repos/{repo}/attestations/{digest}", per_page=100)
    return [json.dumps(a["bundle"]) for a in answer.get("attestations") or [] if "bundle" in a]


def verify_digest(api: Api, digest: str, origin: Origin, root: Any) -> dict[str, Any]:
    """The first of ``digest``'s attestations that verifies for ``origin``."""
    reasons = []
    for bundle in bundles(api, origin.repo, digest):
        try:
            return verify_bundle(bundle, digest, origin, root)
        except AttestationError as exc:
            reasons.append(str(exc))
    raise AttestationError(f"{digest}: " + ("; ".join(reasons) or "no attestation"))


def file_digest(path: Path) -> str:
    """``sha256:HEX`` of a file."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def verify_all(api: Api, digests: Iterable[str], origin: Origin, root: Any) -> list[str]:
    """Why any of ``digests`` is not vouched for by ``origin`` (none: all are)."""
    problems = []
    for digest in digests:
        try:
            verify_digest(api, digest, origin, root)
        except AttestationError as exc:
            problems.append(str(exc))
    return problems


def main(argv: list[str] | None = None) -> int:
    """Verify the digests (or files) given; exit 2 naming each one refused."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["verify"])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--workflow", required=True, help="file name in .github/workflows")
    parser.add_argument("--digest", action="append", default=[], help="sha256:HEX")
    parser.add_argument("--file", action="append", default=[], type=Path)
    parser.add_argument("--trusted-root", type=Path)
    parser.add_argument("--signer", help="the signing workflow, where a reusable one signs")
    args = parser.parse_args(argv)
    digests = [*args.digest, *(file_digest(p) for p in args.file)]
    if not digests:
        parser.error("give --digest or --file")
    origin = Origin(args.repo, args.workflow, signer=args.signer)
    problems = verify_all(RestApi(), digests, origin, trusted_root(args.trusted_root))
    for problem in problems:
        print(f"attestations: refused: {shown(problem)}", file=sys.stderr)
    if not problems:
        print(f"attestations: {len(digests)} digest(s) made by {origin.build_config()}")
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
