#!/bin/sh
# Oracle for sort-numbers: numeric sort keeps duplicates and orders negatives correctly.
set -eu
sort -n numbers.txt > sorted.txt
cat sorted.txt
