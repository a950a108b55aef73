#!/bin/sh
# Verifier for count-lines: /app/error_count.txt must hold the number of ERROR-level lines
# in the shipped log (6). Writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
expected=6
f=/app/error_count.txt
reward=0

echo "check: $f exists"
if [ ! -f "$f" ]; then
    echo "FAIL: $f is missing"
else
    # Ignore surrounding whitespace, nothing else.
    got=$(tr -d ' \t\r\n' < "$f")
    echo "check: count is $expected (found '$got')"
    if [ "$got" = "$expected" ]; then
        echo "PASS"
        reward=1
    else
        echo "FAIL: wrong count"
    fi
fi

echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
exit 0
