#!/usr/bin/env bash
# Stage 4 on the self-hosted GPU runner. gpu.yml runs this script from its checkout of the
# default branch; nothing of the commit under test runs on the host.
#
#   IMAGE=ghcr.io/OWNER/amptrain-verify@sha256:... SHA=<40 hex> STAGEGATE=/path/to/stagegate \
#       [BASE_TREE=DIR BASE_SHA=<40 hex>] tools/ci/gpu_stage.sh PR_TREE WORK
#
# PR_TREE is the commit's checkout: it is only ever mounted read-only into the pinned image
# (by digest), never built, sourced or run here, so a changed Dockerfile or tools/ci/image.sh
# in it does nothing. The container runs with no network, no Docker socket, no capabilities,
# no secrets (only the variables named below), a read-only root and a fresh output folder.
# The default branch's stagegate, on the host, records the stage around the container:
# WORK/reports/raw/performance.json (command, exit code, duration, timeout) names
# reports/raw/benchmark.json, the one file taken from the container, and only if it is a plain
# file. WORK/host.json records the commit, the image and the host's GPU and driver.
# With BASE_TREE (the base commit's checkout, as data) and BASE_SHA, the regression stage
# follows: WORK/reports/raw/regression.json names reports/raw/ab.json, the A/B of the base's
# training step against the commit's, interleaved on the same GPU in one container. Its
# coordinator is the base's own amptrain.benchmark.ab (PYTHONPATH=/base/src); only the
# head's worker imports the commit's library. Both trees are mounted read-only.
# The cuda stage (WORK/reports/raw/cuda.json, naming reports/raw/junit-cuda.xml) runs the
# commit's cuda-marked tests in the same image: fp16 GradScaler, sync debug mode, and NCCL
# where two GPUs exist (skipped, with that reason, where not).
set -euo pipefail

MAX_BENCHMARK_BYTES=$((64 * 1024 * 1024))

die() {
    echo "gpu_stage: $*" >&2
    exit 2
}

# NAME WORKDIR OPTION... -- COMMAND: COMMAND in the pinned image, sealed (no network, no
# capabilities, read-only root and trees), as stagegate runs it in WORK; its container is
# removed however the stage ends. OPTIONs are the stage's own docker run options (--env,
# --volume); /workspace is the commit's tree, /out the output folder.
in_container() {
    local name="$1" workdir="$2" rc=0 options=()
    shift 2
    while [ "$1" != "--" ]; do options+=("$1"); shift; done
    shift
    CONTAINER_NAME="amptrain-$name-${GITHUB_RUN_ID:-local}-$$"
    trap 'docker rm --force "$CONTAINER_NAME" >/dev/null 2>&1 || true' EXIT
    trap 'exit 143' TERM INT
    docker run --rm --name "$CONTAINER_NAME" --gpus all --network none \
        --read-only --tmpfs /tmp:rw,exec,nosuid,size=16g --shm-size 2g \
        --cap-drop ALL --security-opt no-new-privileges --pids-limit 4096 \
        --user "$(id -u):$(id -g)" \
        --env HOME=/tmp --env PYTHONDONTWRITEBYTECODE=1 --env WANDB_MODE=disabled \
        --volume "$PR_TREE:/workspace:ro" --volume "$PWD/container-out:/out:rw" "${options[@]}" \
        --workdir "$workdir" "$IMAGE" "$@" || rc=$?
    return "$rc"
}

# FILE: container-out/FILE copied to reports/raw/FILE, only a plain file of a sane size.
keep_output() {
    local out="container-out/$1"
    if [ -f "$out" ] && [ ! -L "$out" ] && [ "$(stat -c %s "$out")" -le "$MAX_BENCHMARK_BYTES" ]; then
        cp -- "$out" "reports/raw/$1"
    else
        echo "gpu_stage: the container left no plain $1 (or one too large)" >&2
    fi
}

# The stage's command, run by stagegate in WORK: the benchmark inside the container.
container() {
    local rc=0
    in_container gpu /workspace \
        --env PYTHONPATH=/workspace/src --env GITHUB_SHA="$GITHUB_SHA" -- \
        python -m amptrain.benchmark --preset gpu --compile --out /out/benchmark.json --quiet ||
        rc=$?
    keep_output benchmark.json
    return "$rc"
}

# The regression stage's command, run by stagegate in WORK: the A/B inside the container.
ab_container() {
    local rc=0
    in_container ab /tmp --env PYTHONPATH=/base/src --volume "$BASE_TREE:/base:ro" -- \
        python -m amptrain.benchmark.ab --preset gpu \
        --base-src /base/src --base-sha "$BASE_SHA" \
        --head-src /workspace/src --head-sha "$SHA" --out /out/ab.json || rc=$?
    keep_output ab.json
    return "$rc"
}

# The cuda stage's command: the commit's cuda-marked tests inside the container, with JUnit.
# The stagegate pytest plugin the project's pytest options name comes from the commit's tree;
# the witness the judge reads is the default branch's (WORK/gate, read-only at /gate, first on
# the path, as cpu_stage.py runs it for the CPU stages).
cuda_container() {
    local rc=0
    in_container cuda /workspace --volume "$PWD/gate:/gate:ro" \
        --env PYTHONPATH=/gate:/workspace/src:/workspace/stagegate/src -- \
        python -m pytest -p stagegate.pytest_plugin -p stagegate_gate.witness_file -m cuda \
        -p no:cacheprovider --junitxml=/out/junit-cuda.xml || rc=$?
    keep_output junit-cuda.xml
    keep_output junit-cuda.xml.counts.json  # the plugin's witness of the tests that raised
    keep_output junit-cuda.xml.witness.json  # and the gate's
    return "$rc"
}

host_facts() {
    local gpu
    gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)"
    python3 - "$SHA" "$IMAGE" "$gpu" "${RUNNER_NAME:-}" > host.json <<'EOF'
import json, sys
sha, image, gpu, runner = sys.argv[1:5]
name, _, driver = gpu.partition(",")
print(json.dumps({"sha": sha, "image": image, "gpu_name": name.strip(),
                  "driver": driver.strip(), "runner": runner}, indent=2))
EOF
}

stage() {
    local pr work base="" status=0
    [ -d "${1:-}" ] || die "usage: gpu_stage.sh PR_TREE WORK"
    pr="$(cd "$1" && pwd)"
    work="${2:?usage: gpu_stage.sh PR_TREE WORK}"
    [[ "${IMAGE:-}" =~ ^ghcr\.io/[a-z0-9][a-z0-9._-]*/amptrain-verify@sha256:[0-9a-f]{64}$ ]] ||
        die "IMAGE must be the pinned image by digest, not ${IMAGE:-nothing}"
    [[ "${SHA:-}" =~ ^[0-9a-f]{40}$ ]] || die "SHA must be a full commit SHA"
    [ -x "${STAGEGATE:-}" ] || die "STAGEGATE must be the default branch's stagegate"
    if [ -n "${BASE_SHA:-}" ]; then
        [[ "$BASE_SHA" =~ ^[0-9a-f]{40}$ ]] || die "BASE_SHA must be a full commit SHA"
        [ -d "${BASE_TREE:-}" ] || die "BASE_TREE must be the base commit's checkout"
        base="$(cd "$BASE_TREE" && pwd)"
    fi
    rm -rf "$work"
    mkdir -p "$work/reports/raw" "$work/container-out"
    docker pull --quiet "$IMAGE"
    cd "$work"
    python3 "$(dirname "$SELF")/cpu_stage.py" --gate-witness "$PWD" >/dev/null ||
        die "the default branch's witness could not be laid out in $PWD/gate"
    # GIT_DIR: the record's commit is the admitted SHA, never the host checkout's.
    GIT_DIR=/nonexistent GITHUB_SHA="$SHA" PR_TREE="$pr" \
        "$STAGEGATE" run performance --out-dir reports/raw \
        --benchmark reports/raw/benchmark.json --timeout "${STAGE_TIMEOUT:-1500}" \
        -- "$SELF" --container || status=$?
    GIT_DIR=/nonexistent GITHUB_SHA="$SHA" PR_TREE="$pr" \
        "$STAGEGATE" run cuda --out-dir reports/raw \
        --junit reports/raw/junit-cuda.xml --timeout "${STAGE_TIMEOUT:-1500}" \
        -- "$SELF" --cuda-container || status=$?
    if [ -n "$base" ]; then
        GIT_DIR=/nonexistent GITHUB_SHA="$SHA" PR_TREE="$pr" BASE_TREE="$base" \
            "$STAGEGATE" run regression --out-dir reports/raw \
            --ab reports/raw/ab.json --timeout "${STAGE_TIMEOUT:-1500}" \
            -- "$SELF" --ab-container || status=$?
    fi
    host_facts
    return "$status"
}

SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
export SELF
if [ "${1:-}" = "--container" ]; then
    container
elif [ "${1:-}" = "--ab-container" ]; then
    ab_container
elif [ "${1:-}" = "--cuda-container" ]; then
    cuda_container
else
    stage "$@"
fi
