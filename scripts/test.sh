#!/usr/bin/env bash
# Runs the whole Lanes test suite. The store tests start their own redis-server on free loopback
# ports, so redis-server must be installed: this script installs it when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "test.sh: redis-server is missing; installing it" >&2
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
    # The package starts a service on the standard port; the tests never use it.
    (service redis-server stop || true) >/dev/null 2>&1
  else
    echo "test.sh: redis-server is missing. Install it with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y redis-server" >&2
    exit 1
  fi
fi

# The Python driver helper's own tests (standard library only).
python3 -m unittest discover -s tests/python -v

# Benches (harness = false) are run with `cargo bench`, not here.
cargo test --workspace "$@"
