"""Trust by workflow identity (tools/ci/attestations.py), verified offline with sigstore on a
real build-provenance attestation of a public repository and the trusted root of its day
(tests/ci/fixtures/attestations/README.md says where they come from). A tampered bundle, a
claim of ``refs/tags/main`` and another workflow file are each refused."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from sigstore.errors import VerificationError

from .ci_tools import FakeApi, tool

attestations = tool("attestations")

FIXTURES = Path(__file__).parent / "fixtures" / "attestations"
BUNDLE = (FIXTURES / "attest-demo.sigstore.json").read_text()
ROOT = attestations.trusted_root(FIXTURES / "trusted_root.json")
DIGEST = attestations.file_digest(FIXTURES / "attest-demo-artifact.whl")
SIGNER = (
    "https://github.com/github/artifact-attestations-workflows/.github/workflows/attest.yml"
    "@09b495c3f12c7881b3cc17209a327792065c1a1d"
)
ORIGIN = attestations.Origin("malancas/attest-demo", "shared.yml", signer=SIGNER)


def test_the_real_attestation_verifies_for_the_workflow_that_made_it() -> None:
    assert DIGEST == "sha256:49a3aa6075e0f49f82843e74b5baa614ad2a588e6675612bf108a0a008c5ac25"
    statement = attestations.verify_bundle(BUNDLE, DIGEST, ORIGIN, ROOT)
    workflow = statement["predicate"]["buildDefinition"]["externalParameters"]["workflow"]
    assert (workflow["path"], workflow["ref"]) == (
        ".github/workflows/shared.yml",
        "refs/heads/main",
    )


def _tampered_payload() -> str:
    bundle = json.loads(BUNDLE)
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps(bundle)


def _tampered_signature() -> str:
    bundle = json.loads(BUNDLE)
    raw = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    raw[-1] ^= 1
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
    return json.dumps(bundle)


@pytest.mark.parametrize(
    ("bundle", "origin", "digest"),
    [
        (_tampered_payload(), ORIGIN, DIGEST),  # the statement edited after signing
        (_tampered_signature(), ORIGIN, DIGEST),
        (BUNDLE, attestations.Origin("malancas/attest-demo", "shared.yml", "refs/tags/main",
                                     signer=SIGNER), DIGEST),  # a tag named main
        (BUNDLE, attestations.Origin("malancas/attest-demo", "image.yml", signer=SIGNER),
         DIGEST),  # another workflow file
        (BUNDLE, attestations.Origin("someone/attest-demo", "shared.yml", signer=SIGNER),
         DIGEST),  # another repository
        (BUNDLE, attestations.Origin("malancas/attest-demo", "shared.yml"), DIGEST),
        (BUNDLE, ORIGIN, "sha256:" + "1" * 64),  # other bytes than the ones attested
    ],
    ids=["payload", "signature", "refs/tags/main", "other workflow", "other repository",
         "other signer", "other bytes"],
)  # fmt: skip
def test_anything_but_those_bytes_from_that_workflow_on_main_is_refused(
    bundle: str, origin: Any, digest: str
) -> None:
    with pytest.raises(attestations.AttestationError):
        attestations.verify_bundle(bundle, digest, origin, ROOT)


def test_another_trusted_root_refuses_the_chain(tmp_path: Path) -> None:
    root = json.loads((FIXTURES / "trusted_root.json").read_text())
    root["certificateAuthorities"] = root["certificateAuthorities"][:0]
    (tmp_path / "root.json").write_text(json.dumps(root))
    with pytest.raises(attestations.AttestationError):
        attestations.verify_bundle(BUNDLE, DIGEST, ORIGIN, attestations.trusted_root(
            tmp_path / "root.json"))  # fmt: skip


def test_the_digests_attestations_come_from_the_api_and_one_must_verify() -> None:
    path = f"/repos/malancas/attest-demo/attestations/{DIGEST}"
    real, forged = json.loads(BUNDLE), json.loads(_tampered_signature())
    both = FakeApi({path: {"attestations": [{"bundle": forged}, {"bundle": real}]}})
    assert attestations.verify_all(both, [DIGEST], ORIGIN, ROOT) == []
    only_forged = FakeApi({path: {"attestations": [{"bundle": forged}]}})
    assert attestations.verify_all(only_forged, [DIGEST], ORIGIN, ROOT)
    assert attestations.verify_all(FakeApi({path: {"attestations": []}}), [DIGEST], ORIGIN, ROOT)


# ---- the identity policy, claim by claim -----------------------------------------------------
# A certificate claiming refs/tags/main cannot be had from Fulcio here; the same claims as the
# real certificate, one changed, are signed by a key of the test's own, and the policy (the
# part of the verification that reads the claims) must refuse each.

REAL_CERT = x509.load_der_x509_certificate(
    base64.b64decode(json.loads(BUNDLE)["verificationMaterial"]["certificate"]["rawBytes"])
)
OIDC = "1.3.6.1.4.1.57264.1."
CLAIMS = {"ref": "14", "build config": "18", "signer": "9", "repository": "12", "runner": "11"}


def _utf8(text: str) -> bytes:
    data = text.encode()
    length = bytes([len(data)]) if len(data) < 128 else bytes([0x81, len(data)])
    return b"\x0c" + length + data


def _certificate(changes: dict[str, str]) -> x509.Certificate:
    """The real certificate's claims, those in ``changes`` replaced, on a key of our own."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(1))
    )  # fmt: skip
    for ext in REAL_CERT.extensions:
        oid = ext.oid.dotted_string
        if not oid.startswith(OIDC):
            continue
        suffix = oid.removeprefix(OIDC)
        value = ext.value.value
        if suffix in changes:
            value = _utf8(changes[suffix])
        builder = builder.add_extension(x509.UnrecognizedExtension(ext.oid, value), False)
    return builder.sign(key, hashes.SHA256())


ATTACKS = {
    "ref": "refs/tags/main",
    "build config": "https://github.com/malancas/attest-demo/.github/workflows/copy.yml"
    "@refs/heads/main",
    "signer": "https://github.com/malancas/attest-demo/.github/workflows/sign.yml@refs/heads/x",
    "repository": "https://github.com/someone/attest-demo",
    "runner": "self-hosted",
}


def test_the_policy_accepts_the_real_claims() -> None:
    attestations.identity_policy(ORIGIN).verify(_certificate({}))


@pytest.mark.parametrize("claim", sorted(ATTACKS))
def test_each_claim_alone_is_refused_when_changed(claim: str) -> None:
    cert = _certificate({CLAIMS[claim]: ATTACKS[claim]})
    with pytest.raises(VerificationError):
        attestations.identity_policy(ORIGIN).verify(cert)


# ---- what the consumers require ---------------------------------------------------------------

trusted_artifacts = tool("trusted_artifacts")


def _provenance(api: Any) -> Any:
    """The consumers' check with the real verifier, the recorded root and attestation API."""

    def check(workflow: str, digests: list[str]) -> list[str]:
        origin = attestations.Origin("malancas/attest-demo", workflow, signer=SIGNER)
        return attestations.verify_all(api, digests, origin, ROOT)

    return check


def test_consumers_require_the_attestation_of_their_own_workflow(tmp_path: Path) -> None:
    api = FakeApi({f"/repos/malancas/attest-demo/attestations/{DIGEST}": {
        "attestations": [{"bundle": json.loads(BUNDLE)}]}})  # fmt: skip
    trusted_artifacts.require_provenance(_provenance(api), "shared.yml", [DIGEST])
    image = f"ghcr.io/owner/amptrain-verify@{DIGEST}"
    (tmp_path / "image.json").write_text(json.dumps({"image": image, "run_id": "5"}))
    assert trusted_artifacts.image_ref(tmp_path, "5", "owner") == image  # format alone
    with pytest.raises(trusted_artifacts.ArtifactError, match=r"image\.yml"):
        trusted_artifacts.image_ref(tmp_path, "5", "owner", _provenance(api))  # shared.yml's


def test_attestations_are_skipped_only_where_they_are_turned_off() -> None:
    assert trusted_artifacts.attested("o/r", {"GATE_ATTESTATIONS": "off"}) is None
    assert callable(trusted_artifacts.attested("o/r", {}))


def test_a_consumer_refuses_bytes_whose_only_attestation_another_workflow_signed() -> None:
    # The consumers' own check, as judge.yml runs it for base records: the real bundle is the
    # one GitHub answers for those bytes, but it was not signed by judge.yml of that repository.
    api = FakeApi({f"/repos/malancas/attest-demo/attestations/{DIGEST}": {
        "attestations": [{"bundle": json.loads(BUNDLE)}]}})  # fmt: skip
    check = trusted_artifacts.attested("malancas/attest-demo", {}, api, ROOT)
    with pytest.raises(trusted_artifacts.ArtifactError, match=r"judge\.yml"):
        trusted_artifacts.require_provenance(check, "judge.yml", [DIGEST])
