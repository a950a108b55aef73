#!/bin/sh
# Oracle for count-lines: the level is field 2; compare it exactly.
set -eu
awk '$2 == "ERROR" { n++ } END { print n + 0 }' app.log > error_count.txt
cat error_count.txt
