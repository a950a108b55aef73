#!/bin/sh
# Oracle for fix-script: `cat FILE | while ...` runs the loop in a subshell, so the
# updated total is lost when the pipeline ends. Read the file by redirection instead,
# which keeps the loop in the current shell.
set -eu
cat > sum.sh <<'SCRIPT'
#!/bin/sh
# Usage: sh sum.sh FILE
# Prints the sum of the integers in FILE (one integer per line; blank lines are skipped).
total=0
while read -r n; do
    [ -z "$n" ] && continue
    total=$((total + n))
done < "$1"
echo "$total"
SCRIPT
chmod 0755 sum.sh
sh sum.sh sample.txt
