#!/bin/sh
# Verifier for hello-file: /app/hello.txt must hold the single line "hello, world!"
# (GREETING is "hello" in task.toml). Writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
expected='hello, world!'
f=/app/hello.txt
reward=0

echo "check: $f exists"
if [ ! -f "$f" ]; then
    echo "FAIL: $f is missing"
else
    lines=$(awk 'END { print NR }' "$f")
    got=$(cat "$f")
    echo "check: exactly one line (found $lines)"
    echo "check: content is '$expected' (found '$got')"
    if [ "$lines" -eq 1 ] && [ "$got" = "$expected" ]; then
        echo "PASS"
        reward=1
    else
        echo "FAIL: wrong content"
    fi
fi

echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
exit 0
