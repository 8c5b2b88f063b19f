#!/usr/bin/env bash
# Build the images kftrain.images names (`python -m kftrain.images`: folder, variant, image), each from
# containers/<folder>/Dockerfile at the repository root, unchanged. Without a Docker engine: buildah, in the
# project's image storage (scripts/lib.sh: image_env), FROM the base scripts/build_base_image.sh makes, with this
# machine's CA bundle mounted for the builds' pip and apt. With a Docker engine: docker build (its base from Docker Hub).
# Cached: each image carries the key of its inputs (the Dockerfile, the files its COPY lines name, the variant, the
# base image's id, the builder's version); an image whose key matches is not rebuilt. Each build appends a line
# to $KFTRAIN_IMAGE_CACHE/builds.jsonl (seconds, size, key), which bench P8 reads.
#   usage: scripts/build_images.sh [FOLDER[-VARIANT] ...]   (default: every image; e.g. launch data pytorch-cuda)
#   KFTRAIN_IMAGE_NO_CACHE=1: no layer reused (a cold build, the base image and package downloads aside)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PY:-.venv/bin/python}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
    builder="$(docker version --format 'docker {{.Server.Version}}')"
    cache="${KFTRAIN_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kftrain/images}"
    mkdir -p "$cache"
    # The base's id is part of every key: have it before the first build, not after.
    docker image inspect python:3.11-slim-bookworm >/dev/null 2>&1 || docker pull -q python:3.11-slim-bookworm
else
    ./scripts/install_image_tools.sh >/dev/null
    image_env
    ./scripts/build_base_image.sh
    engine=podman
    builder="$(buildah --version)"
    cache="$KFTRAIN_IMAGE_CACHE"
fi
base_id="$($engine image inspect --format '{{.Id}}' python:3.11-slim-bookworm)"

# files PATH...: the files under repository paths; in a git checkout those git sees (tracked, or untracked and
# not ignored), as a clean checkout has them.
files() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -co --exclude-standard --deduplicate -- "$@"
    else
        find "$@" -type f -not -path '*/__pycache__/*'
    fi | sort
}

# key FOLDER VARIANT: the inputs' hash. COPY sources (not --from a stage) are repository paths.
key() {
    local dockerfile="containers/$1/Dockerfile" sources
    sources="$(awk 'toupper($1) == "COPY" && $0 !~ /--from/ {for (i = 2; i < NF; i++) print $i}' "$dockerfile")"
    {
        cat "$dockerfile"
        echo "variant=$2 base=$base_id builder=$builder"
        # shellcheck disable=SC2086
        files $sources | while read -r f; do
            [ -f "$f" ] && sha256sum "$f"
        done
    } | sha256sum | cut -c1-16
}

# reachable URL: whether a package index a build needs answers from here (download.pytorch.org may not).
reachable() {
    "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20)' "$1" >/dev/null 2>&1
}

wanted=" $* "
status=0
skipped=()
while read -r folder variant ref; do
    name="$folder$([ "$variant" = - ] || echo "-$variant")"
    [ $# -eq 0 ] || [[ "$wanted" == *" $name "* ]] || continue
    k="$(key "$folder" "$variant")"
    if [ "$($engine image inspect --format '{{ index .Labels "org.kftrain.inputs" }}' "$ref" 2>/dev/null)" = "$k" ]; then
        echo "build_images: $ref is current (inputs $k)"
        continue
    fi
    # The index the variant's `case` arm installs from (e.g. PyTorch's CPU index); PyPI's CUDA torch is no stand-in.
    index="$(grep -E "^[[:space:]]*$variant\)" "containers/$folder/Dockerfile" | grep -oE 'https://[^ ]+' | head -n1 || true)"
    if [ -n "$index" ] && ! reachable "$index"; then
        echo "build_images: $ref not built: $index does not answer from here" >&2
        skipped+=("$ref ($index unreachable)")
        continue
    fi
    args=(-f "containers/$folder/Dockerfile" --label "org.kftrain.inputs=$k" -t "$ref")
    [ "$variant" = - ] || args+=(--build-arg "VARIANT=$variant")
    [ -z "${KFTRAIN_IMAGE_NO_CACHE:-}" ] || args+=(--no-cache)
    echo "build_images: building $ref (inputs $k)"
    start="$(date +%s.%N)"
    if [ "$engine" = docker ]; then
        docker build "${args[@]}" . || { status=1; continue; }
    else
        buildah bud --pull-never --layers --force-rm --network host \
            -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro "${args[@]}" . \
            || { status=1; continue; }
    fi
    seconds="$(awk "BEGIN {print $(date +%s.%N) - $start}")"
    size="$($engine image inspect --format '{{.Size}}' "$ref")"
    printf '{"image": "%s", "name": "%s", "key": "%s", "seconds": %.1f, "size_bytes": %s, "no_cache": %s, "builder": "%s", "date": "%s"}\n' \
        "$ref" "$name" "$k" "$seconds" "$size" "$([ -n "${KFTRAIN_IMAGE_NO_CACHE:-}" ] && echo true || echo false)" \
        "$builder" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$cache/builds.jsonl"
    echo "build_images: $ref built in ${seconds%.*} s, $size bytes"
done < <("$PY" -m kftrain.images)
[ ${#skipped[@]} -eq 0 ] || printf 'build_images: not built here: %s\n' "${skipped[@]}" >&2
exit $status
