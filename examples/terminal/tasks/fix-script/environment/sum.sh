#!/bin/sh
# Usage: sh sum.sh FILE
# Prints the sum of the integers in FILE (one integer per line; blank lines are skipped).
total=0
cat "$1" | while read -r n; do
    [ -z "$n" ] && continue
    total=$((total + n))
done
echo "$total"
