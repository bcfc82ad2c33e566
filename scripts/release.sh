#!/usr/bin/env bash
# Build an rlnode release: static linux/amd64 and linux/arm64 binaries
# stamped with the version, their SHA256SUMS, and (where Docker is
# present) the FROM scratch image tagged with the version. The build is
# reproducible: the same commit, version and Go toolchain give the same
# bytes (-trimpath drops local paths, -buildid= an empty build id,
# -buildvcs=false leaves the checkout's state out; the version is the only
# stamp).
#
# Usage: scripts/release.sh VERSION        e.g. scripts/release.sh v0.4.0
# Output: dist/VERSION/rlnode-VERSION-linux-{amd64,arm64} and SHA256SUMS,
#         and the image rlnode:VERSION (IMAGE=name to rename) when docker
#         is in PATH and its daemon answers (NO_IMAGE=1 to skip).
# Environment: GO (go command, default go), IMAGE (default rlnode),
#         OUT (default dist).
# Before a release: move the version's lines in CHANGELOG.md from
# Unreleased to a section named after it, and move previousRelease in
# cmd/rlnode/rolling_upgrade_test.go to the release before it.
set -euo pipefail

version="${1:-}"
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  { echo "usage: scripts/release.sh vMAJOR.MINOR.PATCH[-pre] (got '${version}')" >&2; exit 2; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
go="${GO:-go}"
image="${IMAGE:-rlnode}"
out="${OUT:-$repo/dist}/$version"

say() { printf 'release: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v "$go" >/dev/null || die "$go not found in PATH (set GO=/path/to/go)"
if ! git -C "$repo" diff --quiet HEAD -- 2>/dev/null; then
  say "warning: the checkout has uncommitted changes; the binaries will not match the commit"
fi

mkdir -p "$out"
ldflags="-s -w -buildid= -X main.version=$version"
for arch in amd64 arm64; do
  bin="$out/rlnode-$version-linux-$arch"
  say "building $bin"
  (cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" \
    "$go" build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$bin" ./cmd/rlnode)
done
(cd "$out" && sha256sum rlnode-"$version"-linux-* >SHA256SUMS)
say "checksums: $out/SHA256SUMS"
cat "$out/SHA256SUMS" >&2

if [[ -n "${NO_IMAGE:-}" ]] || ! command -v docker >/dev/null; then
  say "no image (docker not in PATH, or NO_IMAGE set)"
  exit 0
fi
daemon_arch="$(docker version --format '{{.Server.Arch}}' 2>/dev/null)" ||
  { say "no image: the Docker daemon does not answer"; exit 0; }
case "$daemon_arch" in amd64|arm64) ;; *) say "no image: daemon architecture $daemon_arch"; exit 0 ;; esac

ctx="$(mktemp -d "${TMPDIR:-/tmp}/rlnode-release.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin/data"
cp "$repo/Dockerfile" "$repo/.dockerignore" "$ctx/"
cp "$out/rlnode-$version-linux-$daemon_arch" "$ctx/bin/rlnode"
say "docker build -t $image:$version (linux/$daemon_arch, no registry)"
docker build --build-arg "REVISION=$version" -t "$image:$version" "$ctx" >&2
say "image: $image:$version"
