#!/bin/sh
# Build the offline base image for the example tasks: localhost/lanes-busybox:1.
#
# No registry and no buildah: the root filesystem is assembled from the host's static
# busybox (Debian package busybox-static), packed as a tar and imported as a one-layer image.
#
#   sh examples/terminal/base-image.sh              # podman (default)
#   RUNTIME=docker sh examples/terminal/base-image.sh
#
# Re-running replaces the tag. CONTAINERS_CONF / CONTAINERS_STORAGE_CONF are taken from the
# environment as they are, so a private podman storage can be used.
set -eu

RUNTIME="${RUNTIME:-podman}"
IMAGE="${IMAGE:-localhost/lanes-busybox:1}"
BUSYBOX="${BUSYBOX:-/bin/busybox}"

if [ ! -x "$BUSYBOX" ]; then
    echo "error: $BUSYBOX not found (a statically linked busybox is required)." >&2
    echo "       On Debian/Ubuntu: apt-get install -y busybox-static" >&2
    exit 1
fi
if ! command -v "$RUNTIME" >/dev/null 2>&1; then
    echo "error: container runtime '$RUNTIME' not found (set RUNTIME=podman or RUNTIME=docker)." >&2
    exit 1
fi
# A dynamically linked busybox would not run in an image that has no libc.
if command -v file >/dev/null 2>&1; then
    case "$(file -L "$BUSYBOX")" in
        *dynamically*) echo "error: $BUSYBOX is dynamically linked; install busybox-static." >&2; exit 1 ;;
    esac
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/lanes-busybox.XXXXXX")"
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM HUP

root="$work/rootfs"
mkdir -p "$root/bin" "$root/etc" "$root/root" "$root/tmp"
chmod 1777 "$root/tmp"
chmod 0700 "$root/root"
cp "$BUSYBOX" "$root/bin/busybox"
chmod 0755 "$root/bin/busybox"

# One symlink per applet. `--list` prints bare names; the image keeps everything in /bin.
n=0
for applet in $("$BUSYBOX" --list); do
    case "$applet" in
        busybox|*/*|'') continue ;;
    esac
    ln -sf busybox "$root/bin/$applet"
    n=$((n + 1))
done

printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"

# Own everything by root inside the image, even when run by an unprivileged user (GNU tar);
# other tars fall back to plain -c, which is fine when run as root.
if ! tar -C "$root" --numeric-owner --owner=0 --group=0 -cf "$work/base.tar" . 2>/dev/null; then
    tar -C "$root" -cf "$work/base.tar" .
fi

# Remember the image the tag points at now, so a re-run does not leave it dangling.
previous="$("$RUNTIME" image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)"

"$RUNTIME" import \
    --change 'ENV PATH=/bin' \
    --change 'CMD ["/bin/sh"]' \
    "$work/base.tar" "$IMAGE" >/dev/null

current="$("$RUNTIME" image inspect --format '{{.Id}}' "$IMAGE")"
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
    # Fails (harmlessly) while images built on top of the old one still exist.
    "$RUNTIME" rmi "$previous" >/dev/null 2>&1 || true
fi

echo "built $IMAGE with $RUNTIME ($n busybox applets)"
