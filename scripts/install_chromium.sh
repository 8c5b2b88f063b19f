#!/usr/bin/env bash
# Install Debian's chromium when it is missing: the test of the evaluation's HTML report renders it headless.
# Idempotent: does nothing when a chromium is already on PATH. Needs root (or sudo) for apt; without either it
# says so and exits 0, and that test skips, naming what is missing.
set -euo pipefail

for exe in chromium chromium-browser google-chrome; do
    if command -v "$exe" >/dev/null 2>&1; then
        echo "install_chromium: $exe already present"
        exit 0
    fi
done

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_chromium: no chromium and no apt-get here; the HTML report rendering test will skip" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_chromium: need root to apt-get install chromium; the HTML report rendering test will skip" >&2
        exit 0
    fi
fi

echo "install_chromium: installing chromium"
export DEBIAN_FRONTEND=noninteractive
if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' || true)" ]; then
    $SUDO apt-get update -qq
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends chromium; then
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends chromium
fi
echo "install_chromium: $(chromium --version 2>/dev/null || echo installed)"
