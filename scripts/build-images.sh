#!/usr/bin/env bash
# Build the operator, bench and serving images for linux/amd64 and linux/arm64: `docker buildx`
# where a Docker daemon answers, else `buildah` (one manifest list per image). Cross-building needs
# binfmt/QEMU for the other architecture. Push with `docker buildx ... --push` or `buildah manifest
# push --all`.
set -euo pipefail
cd "$(dirname "$0")/.."
REGISTRY=${REGISTRY:-ghcr.io/kimi-operator}
PLATFORMS=${PLATFORMS:-linux/amd64,linux/arm64}
VERSION=$(sed -n '/^version = "\(.*\)"$/{s//\1/p;q}' pyproject.toml)
REVISION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
VLLM_VERSION=0.33.0

build() {  # dockerfile tag [build-arg...]
    local args=(--platform "$PLATFORMS" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" -f "$1")
    local extra
    for extra in "${@:3}"; do args+=(--build-arg "$extra"); done
    if docker info >/dev/null 2>&1; then
        docker buildx build "${args[@]}" -t "$2" .
    else
        buildah manifest rm "$2" >/dev/null 2>&1 || true
        buildah build "${args[@]}" --manifest "$2" .
    fi
}

build images/operator/Dockerfile "$REGISTRY/kimi-operator:$VERSION"
# The same with matplotlib: the image `kimi-operator bench --render-job` runs (docs/bench.md).
build images/operator/Dockerfile "$REGISTRY/kimi-operator-bench:$VERSION" EXTRAS=bench
build images/vllm/Dockerfile "$REGISTRY/vllm-kimi:$VLLM_VERSION"
