#!/usr/bin/env bash
# Build the rlnode container image in one step: compile a static binary on the
# host, then wrap it in the FROM scratch image described by ./Dockerfile.
# No registry is needed (nothing is pulled).
#
# Usage: scripts/build-image.sh
# Tags:  $IMAGE:latest and $IMAGE:<git short sha>, or $IMAGE:dev outside a git
#        checkout; "-dirty" is appended to the sha when tracked files differ
#        from HEAD.
# Environment:
#   IMAGE        image name (default: rlnode)
#   GO           go command (default: go)
#   GOARCH       target architecture (default: the Docker daemon's)
#   DOCKER_BUILD_ARGS  extra arguments for docker build (word-split)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image="${IMAGE:-rlnode}"
go="${GO:-go}"

say() { printf 'build-image: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v docker >/dev/null || die "docker not found in PATH"
command -v "$go" >/dev/null || die "$go not found in PATH (set GO=/path/to/go)"
daemon_arch="$(docker version --format '{{.Server.Arch}}' 2>/dev/null)" ||
  die "cannot reach the Docker daemon (is it running? try: docker info)"
goarch="${GOARCH:-${daemon_arch:-$("$go" env GOARCH)}}"

rev=dev
if sha="$(git -C "$repo" rev-parse --short=7 HEAD 2>/dev/null)"; then
  rev="$sha"
  if ! git -C "$repo" diff --quiet HEAD -- 2>/dev/null; then
    rev="$sha-dirty"
  fi
fi

ctx="$(mktemp -d "${TMPDIR:-/tmp}/rlnode-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin/data"
cp "$repo/Dockerfile" "$repo/.dockerignore" "$ctx/"

say "compiling static binary: CGO_ENABLED=0 GOOS=linux GOARCH=$goarch $go build -trimpath -ldflags='-s -w' ./cmd/rlnode"
(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH="$goarch" \
  "$go" build -trimpath -ldflags='-s -w' -o "$ctx/bin/rlnode" ./cmd/rlnode)
say "binary: $(du -h "$ctx/bin/rlnode" | cut -f1) (linux/$goarch)"

say "docker build -t $image:latest -t $image:$rev (context: binary + empty /data only)"
# shellcheck disable=SC2086
docker build --build-arg "REVISION=$rev" -t "$image:latest" -t "$image:$rev" \
  ${DOCKER_BUILD_ARGS:-} "$ctx" >&2

id="$(docker image inspect --format '{{.Id}}' "$image:latest")"
size="$(docker image inspect --format '{{.Size}}' "$image:latest")"
say "built image ${id:7:12}: $image:latest and $image:$rev, $((size / 1000000)) MB"
say "next: scripts/compose-env.sh (writes .env with a cluster token, once), then docker-compose up -d (or: docker compose up -d)"
# The tag that names this build, for scripts: last line on stdout.
echo "$image:$rev"
