#!/bin/sh
# Verifier for fix-script: runs /app/sum.sh on two hidden fixtures (shipped next to this
# script, so a hard-coded answer cannot pass). Writes /logs/verifier/reward.json:
#   reward    - 1 if both fixtures give the right sum, else 0 (the score)
#   fixture_a - 1 if fixture-a.txt (1..10) gives 55
#   fixture_b - 1 if fixture-b.txt (negatives, blank lines) gives -480
mkdir -p /logs/verifier
here=$(cd "$(dirname "$0")" && pwd)
script=/app/sum.sh

# check FILE EXPECTED: sets $ok to 1 or 0.
check() {
    out=$(timeout 10 sh "$script" "$1" 2>/dev/null)
    if [ "$out" = "$2" ]; then ok=1; else ok=0; fi
    echo "check: sh $script $(basename "$1") prints $2 (got '$out') -> $ok"
}

a=0
b=0
echo "check: $script exists"
if [ ! -f "$script" ]; then
    echo "FAIL: $script is missing"
else
    check "$here/fixture-a.txt" 55
    a=$ok
    check "$here/fixture-b.txt" -480
    b=$ok
fi

reward=0
if [ "$a" -eq 1 ] && [ "$b" -eq 1 ]; then reward=1; fi
printf '{"reward": %d, "fixture_a": %d, "fixture_b": %d}\n' "$reward" "$a" "$b" > /logs/verifier/reward.json
cat /logs/verifier/reward.json
exit 0
