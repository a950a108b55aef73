#!/bin/sh
# Verifier for json-field: /app/port.txt must hold server.port from the shipped config
# (8080; the decoys are 9000, 5432 and 9100). Writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
expected=8080
f=/app/port.txt
reward=0

echo "check: $f exists"
if [ ! -f "$f" ]; then
    echo "FAIL: $f is missing"
else
    got=$(tr -d ' \t\r\n' < "$f")
    echo "check: value is $expected (found '$got')"
    if [ "$got" = "$expected" ]; then
        echo "PASS"
        reward=1
    else
        echo "FAIL: wrong value"
    fi
fi

echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
exit 0
