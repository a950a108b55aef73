#!/bin/sh
# Oracle for make-archive: name the files to ship (everything but build/) and archive
# them from /app so that paths start with project/. busybox tar has no --exclude here,
# so the list is built with find (the file names contain no spaces).
set -eu
files=$(find project -path project/build -prune -o -type f -print | sort)
# shellcheck disable=SC2086 # word splitting is wanted
tar -czf release.tar.gz $files
tar -tzf release.tar.gz
