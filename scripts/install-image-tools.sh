#!/usr/bin/env bash
# Install buildah and debootstrap (Debian packages), which `make test-images` uses to build the
# operator image without a Docker daemon. Needs root; does nothing when both are there.
set -euo pipefail
if command -v buildah >/dev/null && command -v debootstrap >/dev/null; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "install-image-tools: run as root (apt-get install buildah debootstrap)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends buildah debootstrap >/dev/null
buildah --version
