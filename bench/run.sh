#!/usr/bin/env bash
# Every benchmark, one after the other (they must not share the two cores), each printing its
# figures.  Full size by default (about 25 minutes on the 2-core machine); `bench/run.sh tiny`
# runs each at its tiny size in about a minute and a half, as CI does so that none can rot.
# Needs the PostgreSQL and MariaDB test servers, and the bench tools: pip install -e '.[bench]'.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-full}"
for name in simulator budget_utilisation ingest write_path freshness memory peer_dlt; do
  .venv/bin/python "bench/${name}.py" --size "$size"
done
