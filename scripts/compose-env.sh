#!/usr/bin/env bash
# Writes .env next to docker-compose.yml with a generated cluster token, which
# docker-compose reads for ${RLNODE_CLUSTER_TOKEN}. The nodes listen on the
# Compose network (beyond loopback), so they refuse to start without one.
# An .env that already sets RLNODE_CLUSTER_TOKEN is left alone, so the
# cluster keeps its token across runs. Usage: scripts/compose-env.sh
set -euo pipefail
env_file="$(cd "$(dirname "$0")/.." && pwd)/.env"
if [ -f "$env_file" ] && grep -q '^RLNODE_CLUSTER_TOKEN=.' "$env_file"; then
	echo "$env_file already sets RLNODE_CLUSTER_TOKEN; leaving it"
	exit 0
fi
token="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
umask 077
touch "$env_file"
chmod 600 "$env_file"
printf 'RLNODE_CLUSTER_TOKEN=%s\n' "$token" >>"$env_file"
echo "wrote a generated RLNODE_CLUSTER_TOKEN to $env_file"
