#!/bin/sh
# Oracle for word-freq: split on non-letters, lowercase, count, take the top three.
set -eu
tr -cs 'A-Za-z' '\n' < text.txt \
    | tr 'A-Z' 'a-z' \
    | grep -v '^$' \
    | sort \
    | uniq -c \
    | sort -rn \
    | head -n 3 \
    | awk '{ print $2, $1 }' > top3.txt
cat top3.txt
