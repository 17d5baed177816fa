#!/usr/bin/env bash
# The verification image: built and published only by image.yml on the default branch, in the
# protected "ci-image" environment, and used everywhere by its digest; no tag is ever trusted.
#
#   tools/ci/image.sh definition        print the hash of the files that define the image
#   tools/ci/image.sh publish OUT_DIR   (image.yml) build with --pull, push under a tag no other
#                                       build uses (hash-run-attempt), write OUT_DIR/image.json:
#                                       {"image": "ghcr.io/OWNER/amptrain-verify@sha256:...", ...}
#                                       and name= digest= to $GITHUB_OUTPUT (the attestation's)
#
# No judged path calls this script: judge.yml and the GPU runner use the default branch's digest,
# checked with its attestation by trusted_artifacts.py, and never build anything.
set -euo pipefail
cd "$(dirname "$0")/../.."

definition() {
    cat Dockerfile .dockerignore pyproject.toml stagegate/pyproject.toml constraints-cpu.txt \
        tools/image_requirements.py | sha256sum | cut -c1-16
}

publish() {
    local out="${1:?give the folder for image.json}"
    local repo tag ref
    repo="ghcr.io/${OWNER:?set OWNER to the repository owner}"
    repo="${repo,,}/amptrain-verify"
    tag="$(definition)-${GITHUB_RUN_ID:?}-${GITHUB_RUN_ATTEMPT:-1}"
    docker build --pull --tag "$repo:$tag" .
    printf '%s\n' "${GHCR_TOKEN:?}" | docker login ghcr.io --username "${ACTOR:?}" --password-stdin
    docker push "$repo:$tag"
    ref="$(docker inspect --format '{{index .RepoDigests 0}}' "$repo:$tag")"
    if [[ "$ref" != "$repo@sha256:"* || ! "${ref#"$repo@sha256:"}" =~ ^[0-9a-f]{64}$ ]]; then
        echo "the pushed image has no digest in $repo: $ref" >&2
        exit 1
    fi
    mkdir -p "$out"
    printf '{"image": "%s", "definition": "%s", "commit": "%s", "run_id": "%s"}\n' \
        "$ref" "$(definition)" "${GITHUB_SHA:?}" "$GITHUB_RUN_ID" > "$out/image.json"
    # For the attestation that says this workflow on the default branch made the image.
    printf 'name=%s\ndigest=%s\n' "$repo" "${ref#"$repo@"}" >> "${GITHUB_OUTPUT:-/dev/stdout}"
    echo "published $ref"
}

case "${1:-}" in
    definition) definition ;;
    publish) publish "${2:-}" ;;
    *)
        echo "usage: tools/ci/image.sh definition | publish OUT_DIR" >&2
        exit 2
        ;;
esac
