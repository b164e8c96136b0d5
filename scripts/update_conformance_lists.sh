#!/usr/bin/env bash
# Regenerates tests/conformance/<suite>_pass.txt (the must-pass lists that ctest enforces) from
# a full ds-conformance run, and prints the per-suite counts for the README.
#
#   scripts/update_conformance_lists.sh [BUILD_DIR] [DATA_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$here/build}"
data="${2:-$here/../shared/onnx-backend-tests}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for suite in node simple pytorch-converted pytorch-operator; do
  # ds-conformance exits 1 when any test fails (the lists record which pass); the JSON it
  # writes is what counts here, and its absence ends the script.
  { "$build/tools/ds-conformance" --suite "$data/$suite" --quiet --json "$tmp/$suite.json" || true; } |
    tail -1 | sed "s/^/$suite: /"
  [ -s "$tmp/$suite.json" ] || { echo "update_conformance_lists: no results for $suite" >&2; exit 1; }
  /usr/bin/python3 - "$tmp/$suite.json" "$here/tests/conformance/${suite}_pass.txt" "$suite" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))
names = sorted(t["name"] for t in res["tests"] if t["status"] == "pass")
with open(sys.argv[2], "w") as f:
    f.write(f"# {sys.argv[3]}: tests that must pass (scripts/update_conformance_lists.sh)\n")
    f.write("\n".join(names) + "\n")
PY
done
