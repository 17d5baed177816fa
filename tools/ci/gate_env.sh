#!/usr/bin/env bash
# The default branch's tools on a CI host, outside any container: a virtualenv holding exactly
# the files tools/ci/requirements/gate.txt pins by hash (stagegate's two dependencies and
# sigstore; pip refuses any file whose hash differs, and anything not listed), and a
# `stagegate` command that runs the default branch's stagegate from its checkout.
#
#   tools/ci/gate_env.sh DIR      # then DIR/bin/stagegate, DIR/bin/python (with sigstore)
#
# Nothing is built: wheels only, no setup script of any package runs.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:?usage: gate_env.sh DIR}"
python3 -m venv "$dir"
dir="$(cd "$dir" && pwd)"
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --require-hashes --only-binary :all: -r "$here/requirements/gate.txt"
src="$(cd "$here/../../stagegate/src" && pwd)"
cat > "$dir/bin/stagegate" <<WRAPPER
#!/bin/sh
PYTHONPATH="$src" exec "$dir/bin/python" -m stagegate "\$@"
WRAPPER
chmod +x "$dir/bin/stagegate"
