#!/bin/sh
# Verifier for sort-numbers: compares /app/sorted.txt with tests/expected.txt (shipped next
# to this script). Writes /logs/verifier/reward.json:
#   reward - 1 if the file matches exactly, else 0 (the score)
#   format - 1 if the file has the right shape (same number of lines, one integer per line)
mkdir -p /logs/verifier
here=$(cd "$(dirname "$0")" && pwd)
expected="$here/expected.txt"
f=/app/sorted.txt
reward=0
format=0

echo "check: $f exists"
if [ ! -f "$f" ]; then
    echo "FAIL: $f is missing"
else
    want=$(awk 'END { print NR }' "$expected")
    have=$(awk 'END { print NR }' "$f")
    bad=$(grep -cvE '^-?[0-9]+$' "$f")
    echo "check: $want lines (found $have), one integer per line (non-integer lines: $bad)"
    if [ "$have" -eq "$want" ] && [ "$bad" -eq 0 ]; then
        format=1
    fi
    echo "check: content equals the numerically sorted input"
    if cmp -s "$expected" "$f"; then
        echo "PASS"
        reward=1
    else
        echo "FAIL: content differs; first differences:"
        diff "$expected" "$f" | head -n 10
    fi
fi

printf '{"reward": %d, "format": %d}\n' "$reward" "$format" > /logs/verifier/reward.json
cat /logs/verifier/reward.json
exit 0
