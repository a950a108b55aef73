#!/bin/sh
# Oracle for hello-file: runs in /app; GREETING comes from [environment.env].
set -eu
printf '%s, world!\n' "${GREETING:?GREETING is not set}" > hello.txt
cat hello.txt
