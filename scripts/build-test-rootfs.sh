#!/usr/bin/env bash
# The base the image tests build the operator image on (tests/images/test_operator_image.py): a
# `debootstrap --variant=minbase` Debian bookworm with python3-venv, as a tar in .tools/cache (made
# once; about a minute of downloads and unpacking). Needs root and debootstrap
# (scripts/install-image-tools.sh). .ci/run makes it in the background while `make test` runs.
set -euo pipefail
cd "$(dirname "$0")/.."
tar_file=.tools/cache/bookworm-minbase-python3.tar
[[ -f $tar_file ]] && exit 0
mkdir -p .tools/cache
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv bookworm "$work/rootfs" \
    http://deb.debian.org/debian
tar -C "$work/rootfs" -cf "$tar_file.partial" .
mv "$tar_file.partial" "$tar_file"
echo "$tar_file"
