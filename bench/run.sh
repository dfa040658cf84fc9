#!/usr/bin/env bash
# Every benchmark, one after the other (they must not share the two cores), each printing its
# figures.  Full size by default (about 30 minutes on the 2-core machine); `bench/run.sh tiny`
# runs each at its tiny size in about a minute and a half, as CI does so that none can rot.
# Needs the PostgreSQL and MariaDB test servers, and the bench tools: pip install -e '.[bench]'.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-full}"
run() { .venv/bin/python "bench/$1.py" --size "$size" "${@:2}"; }
run simulator
run parse
run budget_utilisation
# MariaDB once more with a buffer pool that holds the tables (put back afterwards).
run ingest --mariadb-buffer-pool-mib 1024
run write_path
run freshness
run freshness --events   # issue 12: poll every 20 s, woken by round-end notifications
run memory
run peer_dlt
run fleet
run fleet --part backfill --replicas 2   # issue 27: 10 merchants over 2 replicas
run isolation
run fairness  # issue 27: one merchant's burst of changes among others
run budget_share  # issue 27: a backfill's share of the budget, the tail fresh
run chaos     # issue 30: pauses and cuts of a replica, some inside a write
run scale     # issue 36: the warehouse at a year's rounds, PostgreSQL (20M) and MariaDB (5M)
run scale --backend mariadb
