# rlnode container image: a static rlnode binary on an empty (scratch) base.
#
# Build it with scripts/build-image.sh, which compiles the binary on the host
#   CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o bin/rlnode ./cmd/rlnode
# creates the empty bin/data directory and runs docker build on a context
# holding only those two. By hand, from the repository root:
#   CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o bin/rlnode ./cmd/rlnode
#   mkdir -p bin/data && docker build -t rlnode:latest .
# (.dockerignore keeps everything else out of the build context.)
#
# How this differs from a multi-stage build: a multi-stage Dockerfile would
# start with "FROM golang:1.26 AS build", compile inside that stage and COPY
# the binary from it into the final stage. That needs the golang base image
# from a registry and builds with the image's Go toolchain and an empty module
# cache. Here the binary comes from the host's Go toolchain and module cache,
# so the build needs no registry and no network at all (scratch is not pulled;
# it is the empty image built into Docker), works with the classic builder
# and BuildKit alike, and the final image is the same either way: the binary
# and an empty /data, nothing else. The price is that the host must have Go,
# and the binary must be static (CGO_ENABLED=0) and built for the Docker
# daemon's architecture (GOOS=linux; the script sets GOARCH from the daemon).
# There is no "# syntax=" line on purpose: it would make BuildKit pull a
# frontend image.
FROM scratch

ARG REVISION=dev
LABEL org.opencontainers.image.title="rlnode" \
      org.opencontainers.image.description="Raft-replicated rate limiter" \
      org.opencontainers.image.source="https://github.com/rlnode/rlnode" \
      org.opencontainers.image.revision="${REVISION}"

COPY bin/rlnode /rlnode

# scratch has no shell, so there is no RUN mkdir/chown: copy an empty
# directory instead so that /data exists, owned by the non-root user. A named
# volume mounted at /data is seeded from this directory the first time it is
# used, ownership included, so the node can write its Raft state there.
# (A bind mount keeps the host directory's owner: chown it to 65532 first.)
COPY --chown=65532:65532 bin/data/ /data/

# Numeric, so no /etc/passwd is needed.
USER 65532:65532

VOLUME /data
# 8080: HTTP API (checks, status, admin, /metrics); 8300: Raft. Publish only
# 8080: keep the Raft port on the nodes' private network (see README,
# Security), whatever else protects it.
EXPOSE 8080 8300

ENTRYPOINT ["/rlnode"]
# The default is a standalone one-node cluster: it listens on all interfaces
# (so it needs a cluster token, e.g. docker run -e RLNODE_CLUSTER_TOKEN=...,
# or TLS files, and refuses to start without) and advertises loopback
# addresses, which is enough for a single node (it
# never dials itself) but not for a cluster. rlnode refuses to advertise
# 0.0.0.0, so cluster members must be given addresses their peers can dial
# and resolve: pass the whole command, as docker-compose.yml does, e.g.
#   serve --id n2 --http-addr 0.0.0.0:8080 --raft-addr 0.0.0.0:8300
#         --http-advertise n2:8080 --raft-advertise n2:8300
#         --data-dir /data --join http://n1:8080
# Admin commands work the same way: docker run --rm rlnode peers --addr URL
CMD ["serve", "--http-addr", "0.0.0.0:8080", "--raft-addr", "0.0.0.0:8300", \
     "--http-advertise", "127.0.0.1:8080", "--raft-advertise", "127.0.0.1:8300", \
     "--data-dir", "/data"]
