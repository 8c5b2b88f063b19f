#!/usr/bin/env bash
# Install Debian's chromium when it is missing: the test of the evaluation's HTML report renders it headless.
# Idempotent: does nothing when a chromium is already on PATH. Needs root (or sudo) for apt; without either it
# says so and exits 0, and that test skips, naming what is missing.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for exe in chromium chromium-browser google-chrome; do
    if command -v "$exe" >/dev/null 2>&1; then
        echo "install_chromium: $exe already present"
        exit 0
    fi
done

apt_install install_chromium 0 \
    "no chromium and no apt-get here; the HTML report rendering test will skip" \
    "need root to apt-get install chromium; the HTML report rendering test will skip" \
    chromium
echo "install_chromium: $(chromium --version 2>/dev/null || echo installed)"
