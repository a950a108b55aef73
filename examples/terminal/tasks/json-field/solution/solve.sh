#!/bin/sh
# Oracle for json-field, busybox awk only: track brace depth, remember which top-level
# key opened the current object, and print "port" when that key is "server".
set -eu
awk '
{
    line = $0
    while (length(line) > 0) {
        c = substr(line, 1, 1)
        if (c == "\"") {
            # read a string token
            rest = substr(line, 2)
            end = index(rest, "\"")
            tok = substr(rest, 1, end - 1)
            line = substr(rest, end + 1)
            sub(/^[ \t]*/, "", line)
            if (substr(line, 1, 1) == ":") {
                key = tok
                line = substr(line, 2)
                sub(/^[ \t]*/, "", line)
                if (depth == 1) top = key
                if (depth == 2 && top == "server" && key == "port") {
                    match(line, /^-?[0-9]+/)
                    print substr(line, RSTART, RLENGTH)
                    exit
                }
            }
            continue
        }
        if (c == "{") depth++
        else if (c == "}") depth--
        line = substr(line, 2)
    }
}' config.json > port.txt
cat port.txt
