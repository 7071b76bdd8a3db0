#!/usr/bin/env bash
# A local high-availability PostgreSQL: etcd and Patroni managing two PostgreSQL 15 nodes on
# 127.0.0.1 with synchronous replication (bench/ha_cluster.py; docs/high-availability.md).
#   scripts/ha-cluster.sh start [DIR]   prints the multi-host connection string
#   scripts/ha-cluster.sh stop [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${2:-/var/tmp/orderflow-ha}"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
exec "$PYTHON" -m bench.ha_cluster "${1:?usage: scripts/ha-cluster.sh start|stop [DIR]}" "$DIR"
