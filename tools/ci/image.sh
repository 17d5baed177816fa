#!/usr/bin/env bash
# The verification image for this commit, built once and shared.
#
#   tools/ci/image.sh get       pull the published image, or build it here when none exists yet
#   tools/ci/image.sh publish   (main only) build and push it when none exists yet
#
# The image is tagged by a hash of the files that define it, so a commit that changes none of
# them reuses the image main published. A pulled image is used by its digest from then on; a
# build always pulls its base from the registry (--pull), never trusting a local tag. Writes
# image=REF to $GITHUB_OUTPUT.
set -euo pipefail
cd "$(dirname "$0")/../.."

mode="${1:-get}"
owner="${OWNER:?set OWNER to the repository owner}"
tag="$(cat Dockerfile pyproject.toml stagegate/pyproject.toml constraints-cpu.txt \
    tools/image_requirements.py | sha256sum | cut -c1-16)"
repo="ghcr.io/${owner,,}/amptrain-verify"

if docker pull --quiet "$repo:$tag"; then
    ref="$(docker inspect --format '{{index .RepoDigests 0}}' "$repo:$tag")"
elif [ "$mode" = publish ]; then
    docker build --pull --tag "$repo:$tag" .
    printf '%s\n' "${GHCR_TOKEN:?}" | docker login ghcr.io --username "${ACTOR:?}" --password-stdin
    docker push "$repo:$tag"
    ref="$(docker inspect --format '{{index .RepoDigests 0}}' "$repo:$tag")"
else
    # No image for this definition yet (the pull request changes it): build it, push nothing.
    docker build --pull --tag "amptrain-verify:$tag" .
    ref="amptrain-verify:$tag"
fi
echo "image=$ref" >> "${GITHUB_OUTPUT:-/dev/stdout}"
