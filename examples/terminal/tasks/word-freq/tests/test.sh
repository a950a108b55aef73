#!/bin/sh
# Verifier for word-freq: compares /app/top3.txt with tests/expected.txt line by line
# (trailing spaces and a missing final newline are tolerated). Writes
# /logs/verifier/reward.json:
#   reward  - 1 if all three lines are right, else 0 (the score)
#   top1    - 1 if the first line is right
#   correct - how many of the three lines are right (0-3)
mkdir -p /logs/verifier
here=$(cd "$(dirname "$0")" && pwd)
expected="$here/expected.txt"
f=/app/top3.txt
correct=0
top1=0
lines=0

echo "check: $f exists"
if [ ! -f "$f" ]; then
    echo "FAIL: $f is missing"
else
    # Normalise: drop CRs and trailing blanks, and drop blank lines.
    got=$(sed -e 's/\r$//' -e 's/[ \t]*$//' "$f" | grep -v '^$')
    lines=$(printf '%s\n' "$got" | grep -c .)
    echo "check: exactly 3 lines (found $lines)"
    i=0
    while read -r want; do
        i=$((i + 1))
        have=$(printf '%s\n' "$got" | sed -n "${i}p")
        if [ "$have" = "$want" ]; then
            ok=1
            correct=$((correct + 1))
            [ "$i" -eq 1 ] && top1=1
        else
            ok=0
        fi
        echo "check: line $i is '$want' (found '$have') -> $ok"
    done < "$expected"
fi

reward=0
if [ "$correct" -eq 3 ] && [ "$lines" -eq 3 ]; then reward=1; fi
printf '{"reward": %d, "top1": %d, "correct": %d}\n' "$reward" "$top1" "$correct" > /logs/verifier/reward.json
cat /logs/verifier/reward.json
exit 0
