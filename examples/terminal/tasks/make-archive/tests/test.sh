#!/bin/sh
# Verifier for make-archive: /app/release.tar.gz must be a gzip tar whose paths start with
# project/, with every source file (byte for byte) and nothing from project/build/.
# Writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
archive=/app/release.tar.gz
required="project/README.md project/src/main.c project/src/util.c project/src/util.h"
reward=0
fail() { echo "FAIL: $*"; }

check_archive() {
    echo "check: $archive exists"
    [ -f "$archive" ] || { fail "$archive is missing"; return 1; }

    echo "check: it is a readable gzip-compressed tar"
    list=$(tar -tzf "$archive" 2>/dev/null) || { fail "tar -tzf failed"; return 1; }
    # Accept "./project/..." as well as "project/...".
    list=$(printf '%s\n' "$list" | sed 's|^\./||')

    echo "check: every path starts with project/"
    if printf '%s\n' "$list" | grep -v '^$' | grep -Eqv '^project(/|$)'; then
        fail "paths outside project/:"; printf '%s\n' "$list" | grep -v '^project' | head -n 5
        return 1
    fi

    echo "check: nothing from project/build/"
    if printf '%s\n' "$list" | grep -Eq '^project/build(/|$)'; then
        fail "project/build is in the archive"; return 1
    fi

    tmp=$(mktemp -d)
    tar -xzf "$archive" -C "$tmp" || { fail "extraction failed"; rm -rf "$tmp"; return 1; }
    for p in $required; do
        echo "check: $p is present and unchanged"
        if [ ! -f "$tmp/$p" ] || ! cmp -s "$tmp/$p" "/app/$p"; then
            fail "$p is missing or differs"; rm -rf "$tmp"; return 1
        fi
    done
    rm -rf "$tmp"
    return 0
}

echo "check: source tree still intact"
if ! [ -f /app/project/src/main.c ] || ! [ -d /app/project/build ]; then
    fail "/app/project was modified"
elif check_archive; then
    echo "PASS"
    reward=1
fi

echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
exit 0
