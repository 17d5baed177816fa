"""What the artifacts of trusted runs must hold before the gate uses them: the verification
image's reference (image.yml) and a GPU baseline with its provenance (gpu.yml on a push to the
default branch). trusted_runs.py chose the run; this checks what came out of it.

    python tools/ci/trusted_artifacts.py image DIR --run-id ID --owner OWNER [--attested-by F]
        writes image= (ghcr.io/OWNER/amptrain-verify@sha256:...), or fails saying why
    python tools/ci/trusted_artifacts.py provenance OUT --sha S --run-id ID --image REF \
        --host host.json --benchmark benchmark.json
        writes OUT/provenance.json and OUT/benchmark.json: a baseline candidate
    python tools/ci/trusted_artifacts.py baseline DIR --run-id ID --into BASELINE_DIR \
        [--attested-by F]
        writes baseline-dir= and note=: the baseline is accepted, or NOT VERIFIED and why

``--attested-by FILE`` (image.yml, gpu.yml) also requires, for the image's digest or each file
of the baseline, a build-provenance attestation of that workflow file run from refs/heads/main
in this repository (tools/ci/attestations.py; sigstore must be importable: run with the
python of tools/ci/gate_env.sh). GATE_ATTESTATIONS=off (a private repository without GitHub
Enterprise Cloud, where GitHub makes no attestations) skips it and says so in the note.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from github_api import RestApi, shown, write_outputs

Provenance = Callable[[str, list[str]], list[str]]  # (workflow, digests) -> problems

IMAGE_NAME = "amptrain-verify"
DIGEST = re.compile(r"ghcr\.io/(?P<owner>[a-z0-9][a-z0-9._-]*)/amptrain-verify@sha256:[0-9a-f]{64}")
SHA = re.compile(r"[0-9a-f]{40}")
PROVENANCE_KEYS = ("sha", "run_id", "image", "gpu_name", "driver", "torch", "cuda")


class ArtifactError(Exception):
    """An artifact that cannot be used, and why."""


def _read_object(path: Path) -> dict[str, Any]:
    if path.is_symlink() or not path.is_file():
        raise ArtifactError(f"{path.name} is missing or not a plain file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path.name} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path.name} is not a JSON object")
    return data


def image_ref(folder: Path, run_id: str, owner: str, provenance: Provenance | None = None) -> str:
    """The image digest that image.yml's run ``run_id`` published for ``owner``, attested by
    image.yml on the default branch when ``provenance`` checks it."""
    doc = _read_object(folder / "image.json")
    ref = doc.get("image")
    match = DIGEST.fullmatch(ref) if isinstance(ref, str) else None
    if match is None:
        raise ArtifactError(f"image.json names {ref!r}, not ghcr.io/OWNER/{IMAGE_NAME}@sha256:...")
    if match["owner"] != owner.lower():
        raise ArtifactError(f"image.json names {match['owner']}'s image, not {owner.lower()}'s")
    if str(doc.get("run_id")) != str(run_id):
        raise ArtifactError(f"image.json says run {doc.get('run_id')!r}, found in run {run_id}")
    require_provenance(provenance, "image.yml", [str(ref).split("@", 1)[1]])
    return str(ref)


def require_provenance(provenance: Provenance | None, workflow: str, digests: list[str]) -> None:
    """Refuse unless every digest is attested by ``workflow`` on the default branch."""
    if provenance is None:
        return
    problems = provenance(workflow, digests)
    if problems:
        raise ArtifactError(f"no attestation of {workflow} on main: {'; '.join(problems)}")


def attested(
    repo: str, env: dict[str, str] | None = None, api: Any = None, root: Any = None
) -> Provenance | None:
    """The real check (sigstore; Sigstore's trusted root through TUF and the attestations API
    unless ``root`` and ``api`` are given), or None where GATE_ATTESTATIONS=off."""
    env = dict(os.environ if env is None else env)
    if env.get("GATE_ATTESTATIONS") == "off":
        return None
    import attestations

    def check(workflow: str, digests: list[str]) -> list[str]:
        origin = attestations.Origin(repo, workflow)
        trusted = root if root is not None else attestations.trusted_root(None)
        return attestations.verify_all(api or RestApi(), digests, origin, trusted)

    return check


def _file_digests(folder: Path, names: tuple[str, ...]) -> list[str]:
    return ["sha256:" + hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in names]


def host_facts(path: Path, sha: str, image: str) -> dict[str, Any]:
    """host.json of a GPU job (written by gpu_stage.sh on the host, never by the stage):
    it must name the commit and the image the job was given."""
    host = _read_object(path)
    if host.get("sha") != sha or host.get("image") != image:
        raise ArtifactError(
            f"host.json ran {host.get('sha')!r} in {host.get('image')!r}, not {sha} in {image}"
        )
    return host


def provenance(
    out: Path, *, sha: str, run_id: str, image: str, host: Path, benchmark: Path
) -> dict[str, Any]:
    """Write a baseline candidate: the benchmark and where it came from."""
    facts = host_facts(host, sha, image)
    machine = _read_object(benchmark).get("machine_info") or {}
    doc = {
        "sha": sha,
        "run_id": str(run_id),
        "image": image,
        "gpu_name": facts.get("gpu_name"),
        "driver": facts.get("driver"),
        "torch": machine.get("torch"),
        "cuda": machine.get("cuda"),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "provenance.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(benchmark, out / "benchmark.json")
    return doc


def accept_baseline(folder: Path, run_id: str, provenance: Provenance | None = None) -> Path:
    """The baseline benchmark of the trusted run ``run_id``, once its provenance holds up (and,
    with ``provenance``, gpu.yml on the default branch attested both its files)."""
    prov = _read_object(folder / "provenance.json")
    empty = [k for k in PROVENANCE_KEYS if not isinstance(prov.get(k), str) or not prov[k]]
    if empty:
        raise ArtifactError(f"provenance.json does not record {', '.join(empty)}")
    if prov["run_id"] != str(run_id):
        raise ArtifactError(f"provenance.json says run {prov['run_id']}, found in run {run_id}")
    if not SHA.fullmatch(prov["sha"]) or not DIGEST.fullmatch(prov["image"]):
        raise ArtifactError("provenance.json's commit or image is not a full SHA or digest")
    bench = _read_object(folder / "benchmark.json")
    require_provenance(
        provenance, "gpu.yml", _file_digests(folder, ("provenance.json", "benchmark.json"))
    )
    machine = bench.get("machine_info") or {}
    if bench.get("device") != "cuda" or bench.get("gpu_verified") is not True:
        raise ArtifactError("benchmark.json was not measured on a CUDA device")
    for key in ("torch", "cuda", "gpu_name"):
        if machine.get(key) != prov[key]:
            raise ArtifactError(
                f"benchmark.json's {key} {machine.get(key)!r} is not provenance's {prov[key]!r}"
            )
    return folder / "benchmark.json"


def _provenance(args: argparse.Namespace) -> Provenance | None:
    return attested(os.environ["GITHUB_REPOSITORY"]) if args.attested_by else None


def _baseline_main(args: argparse.Namespace) -> int:
    try:
        bench = accept_baseline(args.folder, args.run_id, _provenance(args))
    except ArtifactError as exc:
        note = f"regression NOT VERIFIED: the baseline of run {args.run_id} is refused ({exc})"
        print(shown(note))
        write_outputs({"baseline-dir": "", "note": note})
        return 0
    args.into.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bench, args.into / "benchmark.json")
    print(f"baseline accepted from run {args.run_id}")
    write_outputs({"baseline-dir": str(args.into), "note": ""})
    return 0


def main(argv: list[str] | None = None) -> int:
    """The three subcommands in the module's docstring; exit 2 with the reason when refused."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    img = sub.add_parser("image")
    img.add_argument("folder", type=Path)
    img.add_argument("--run-id", required=True)
    img.add_argument("--owner", required=True)
    prov = sub.add_parser("provenance")
    prov.add_argument("out", type=Path)
    for name in ("--sha", "--run-id", "--image"):
        prov.add_argument(name, required=True)
    prov.add_argument("--host", type=Path, required=True)
    prov.add_argument("--benchmark", type=Path, required=True)
    base = sub.add_parser("baseline")
    base.add_argument("folder", type=Path)
    base.add_argument("--run-id", required=True)
    base.add_argument("--into", type=Path, required=True)
    for command, workflow in ((img, "image.yml"), (base, "gpu.yml")):
        command.add_argument("--attested-by", choices=[workflow], help="require its attestation")
    args = parser.parse_args(argv)
    args.attested_by = getattr(args, "attested_by", None)
    if args.command == "baseline":
        return _baseline_main(args)
    try:
        if args.command == "image":
            ref = image_ref(args.folder, args.run_id, args.owner, _provenance(args))
            write_outputs({"image": ref})
        else:
            provenance(
                args.out, sha=args.sha, run_id=args.run_id, image=args.image,
                host=args.host, benchmark=args.benchmark,
            )  # fmt: skip
    except ArtifactError as exc:
        print(f"refused: {shown(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
