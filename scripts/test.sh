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

# A venv under the target dir with the OpenMetrics reference parser (Python
# prometheus_client: the metrics suite checks each scrape with it, crates/cli/tests/metrics.rs)
# and the OpenTelemetry SDK (the driver helper's tracing is tested with it). Debian
# ships `venv` apart from python3 (package python3-venv); it is installed when missing.
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
venv="$target_dir/test-venv"
if ! "$venv/bin/python" -c "import prometheus_client, opentelemetry.sdk.trace" >/dev/null 2>&1; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
      echo "test.sh: python3-venv is missing; installing it" >&2
      apt-get update
      DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv
      rm -rf "$venv"
      python3 -m venv "$venv"
    else
      echo "test.sh: python3 cannot make a venv. Install it with:" >&2
      echo "  sudo apt-get update && sudo apt-get install -y python3-venv" >&2
      exit 1
    fi
  fi
  "$venv/bin/pip" install --quiet prometheus-client==0.21.1 opentelemetry-sdk==1.45.2
fi
export LANES_TEST_PYTHON="$venv/bin/python"

# The Python driver helper's own tests: on the system python3 (standard library only, as
# drivers run it), then in the venv, where its OpenTelemetry spans are checked too.
python3 -m unittest discover -s tests/python -v
"$venv/bin/python" -m unittest discover -s tests/python -v

# Benches (harness = false) are run with `cargo bench`, not here.
cargo test --workspace "$@"
