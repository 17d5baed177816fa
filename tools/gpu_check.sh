#!/usr/bin/env bash
# The GPU checks of one lent GPU machine, run with the machine's own python3 and torch (no
# Docker, no registry): each item capped in time, judged by stagegate like any stage, and its
# files packed under $OUT as soon as they exist.
#
#   SHA=<40 hex> [PLANT_SHA=<40 hex> PLANT_SRC=DIR] tools/gpu_check.sh [ITEM...]
#
# ITEMs, in the order given (default: all five, in this order):
#   cuda     the cuda-marked tests as the cuda stage (JUnit), beside the gate's witness, judged
#            with --require cuda --gate-witness
#   cuda-plant  the same on CUDA_PLANT_SRC's tree (a fault planted and hidden): must BLOCK
#   ab       the A/B regression stage on the gpu preset: the commit against itself (must PASS,
#            half-width under 1%), then PLANT_SRC's commit (a planted slowdown) against SHA
#            (must BLOCK with its ratio and interval)
#   profile  benchmarks/step_profile.py on the gpu preset: eager and compiled, top kernels
#   fsdp     benchmarks/fsdp_vs_ddp.py in one process on the PRESET's model, bf16-mixed: the
#            model unsharded against sharded with strategy="fsdp"'s fully_shard (a group of one)
#   bench    the judged benchmark, compiled (EAGER=1: eager, in about half the time):
#            python -m amptrain.benchmark --preset "$PRESET" --compile
#            (its fp8 arm needs torchao 0.18.0, amptrain[fp8]: put its wheel in WHEELS where the
#            machine lacks it; without it the arm fails, and the judge blocks)
# SHA is the commit of this tree (the records name it; git need not exist here). Wheels that
# the machine lacks (stagegate's defusedxml, the tests' jsonschema) are taken from WHEELS
# (default .whl/). PRESET (default gpu) sizes ab and bench: cpu-smoke tries the script on a CPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

: "${OUT:?OUT must name the folder the results go to}"
[[ "${SHA:-}" =~ ^[0-9a-f]{40}$ ]] || { echo "gpu_check: SHA must be a full commit id" >&2; exit 2; }
WORK="${WORK:-/tmp/gpu-check}"
PY="${PYTHON:-python3}"  # the machine's own, which holds its torch
mkdir -p "$OUT" "$WORK"
LOG="$OUT/log.txt"
exec > >(tee -a "$LOG") 2>&1

PRESET="${PRESET:-gpu}"
if compgen -G "${WHEELS:-.whl}/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WORK/site" "${WHEELS:-.whl}"/*.whl || exit 2
fi
export PYTHONPATH="$WORK/site:$PWD/src:$PWD/stagegate/src" PYTHONUNBUFFERED=1
# The records and files name SHA, never a git checkout's state; W&B stays off.
export GIT_DIR=/nonexistent GITHUB_SHA="$SHA" WANDB_MODE=disabled
export TORCHINDUCTOR_CACHE_DIR="$WORK/inductor"  # a later call on the same machine reuses it
STAGEGATE=("$PY" -m stagegate)

# NAME: WORK/NAME packed into OUT/NAME.tgz (records, files, reports).
pack() { tar -C "$WORK" -czf "$OUT/$1.tgz" "$1" 2>/dev/null || true; }

# NAME LIMIT_S STAGE FILE-OPTION -- COMMAND...: COMMAND as stage STAGE in WORK/NAME/raw.
stage() {
    local name="$1" limit="$2" stage="$3" files="$4"
    shift 5
    rm -rf "${WORK:?}/$name" && mkdir -p "$WORK/$name/raw"
    "${STAGEGATE[@]}" run "$stage" --out-dir "$WORK/$name/raw" "$files" --timeout "$limit" -- "$@"
    echo "== $name: stage $stage exited $?"
}

# NAME REPORT-OPTION...: stagegate's verdict on WORK/NAME/raw, in WORK/NAME/reports.
judge() {
    local name="$1" code=0
    shift
    "${STAGEGATE[@]}" report "$WORK/$name/raw" --out "$WORK/$name/reports" \
        --changed-files /dev/null "$@" >"$WORK/$name/report.log" 2>&1 || code=$?
    echo "== $name: stagegate report exit $code (0 PASS, 1 BLOCK, 2 unusable input)"
    "$PY" - "$WORK/$name/reports/verdict.json" <<'EOF' || true
import json, sys
v = json.load(open(sys.argv[1]))
print("   decision:", v["decision"], "score:", v["score"])
for stage in v["stages"]:
    print("   stage", stage["name"], stage["status"], stage["note"])
    for f in stage["findings"]:
        print("   -", f["severity"], f["kind"], "|", f["title"], "|", (f["detail"] or "")[:400])
EOF
    pack "$name"
}

facts() {
    {
        nvidia-smi
        nvidia-smi -L  # a MIG slice is listed under its GPU
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,mig.mode.current \
            --format=csv,noheader,nounits
    } >"$OUT/machine.txt" 2>&1
    "$PY" - >>"$OUT/machine.txt" 2>&1 <<'EOF'
import importlib.util, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.get_device_name(),
      "capability", torch.cuda.get_device_capability(), "torchao (fp8 arm)",
      bool(importlib.util.find_spec("torchao")))
EOF
    tail -n 1 "$OUT/machine.txt"
}

# NAME TREE: the cuda-marked tests of TREE's files that hold them as the cuda stage, beside the
# gate's witness (this tree's, as gpu_stage.sh loads main's), judged against the gate's file.
# Collecting every test file would import packages this machine lacks (wandb, datasets).
cuda_stage() {
    local name="$1" tree="$2" raw="$WORK/$1/raw" files gate
    local plugin=(-p stagegate.pytest_plugin)  # the pytest options' --stagegate-guard is its
    "$PY" -c "import importlib.metadata as m, sys; sys.exit(not any(
        e.value.startswith('stagegate') for e in m.entry_points(group='pytest11')))" && plugin=()
    gate=$("$PY" tools/ci/cpu_stage.py --gate-witness "$WORK") || return
    mapfile -t files < <(cd "$tree" && grep -l "mark.cuda" tests/amptrain/test_*.py)
    (cd "$tree" && PYTHONPATH="$gate:$WORK/site:$PWD/src:$PWD/stagegate/src" \
        stage "$name" 240 cuda "--junit=$raw/junit-cuda.xml" -- \
        "$PY" -m pytest "${plugin[@]}" -p stagegate_gate.witness_file -m cuda -p no:cacheprovider \
        --junitxml="$raw/junit-cuda.xml" "${files[@]}")
    judge "$name" --only cuda --require cuda --gate-witness
}

cuda() { cuda_stage cuda "$PWD"; }

# CUDA_PLANT_SRC's tree (a fault planted, and hidden from pytest's report) as the cuda stage
# under this tree's gate witness: must BLOCK.
cuda-plant() { cuda_stage cuda-plant "${CUDA_PLANT_SRC:?CUDA_PLANT_SRC must name a tree}"; }

# NAME HEAD_SRC HEAD_SHA: the A/B of HEAD against SHA, recorded at HEAD_SHA, judged with SHA
# as the base asked for. On an H200, 30 windows of 10 steps a side gave the commit against
# itself a half-width of 0.3% (10 windows: 1.3%); the steps a window are the policy's
# ab_window_steps (the A/B's default), which the judge holds the file to.
ab_run() {
    local name="$1" src="$2" head="$3" raw="$WORK/$1/raw"
    GITHUB_SHA="$head" stage "$name" 200 regression "--ab=$raw/ab.json" -- \
        "$PY" -m amptrain.benchmark.ab --preset "$PRESET" --windows 30 \
        --base-src src --base-sha "$SHA" --head-src "$src" --head-sha "$head" --out "$raw/ab.json"
    judge "$name" --only regression --require regression --ab-base "$SHA"
}

ab() {
    ab_run ab-self src "$SHA"
    if [ -n "${PLANT_SRC:-}" ]; then
        ab_run ab-planted "$PLANT_SRC" "${PLANT_SHA:?PLANT_SHA must name the commit of PLANT_SRC}"
    fi
}

fsdp() {
    timeout 300 "$PY" benchmarks/fsdp_vs_ddp.py --preset "$PRESET" --precision bf16-mixed \
        --windows 10 --steps 10 --out "$OUT/fsdp"
    echo "== fsdp exited $?"
}

profile() {
    timeout 300 "$PY" benchmarks/step_profile.py --preset gpu --top 16 \
        --out "$OUT/step-profile.json"
    echo "== profile exited $?"
}

bench() {
    local raw="$WORK/bench/raw" compile=(--compile)
    [ -z "${EAGER:-}" ] || compile=()
    stage bench 540 performance "--benchmark=$raw/benchmark.json" -- \
        "$PY" -m amptrain.benchmark --preset "$PRESET" "${compile[@]}" --out "$raw/benchmark.json" \
        --quiet
    judge bench --only performance --require performance
}

items=("$@")
[ ${#items[@]} -gt 0 ] || items=(cuda ab fsdp profile bench)
facts
for item in "${items[@]}"; do
    case "$item" in
        cuda | cuda-plant | ab | fsdp | profile | bench)
            start=$SECONDS; "$item"; echo "== $item: $((SECONDS - start)) s" ;;
        *) echo "gpu_check: unknown item $item (cuda, cuda-plant, ab, fsdp, profile, bench)" >&2; exit 2 ;;
    esac
done
