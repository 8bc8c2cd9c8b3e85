#!/usr/bin/env bash
# expect_cli.sh CODE REGEX -- COMMAND [ARGS...]
# Runs COMMAND, prints its output, and passes when it exits with CODE and its output (stdout and
# stderr together) matches the extended regular expression REGEX.
set -u
want_code=$1; regex=$2; shift 3
out=$("$@" 2>&1); code=$?
printf '%s\n' "$out"
if [ "$code" -ne "$want_code" ]; then
  echo "expect_cli: exit code $code, expected $want_code" >&2; exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then
  echo "expect_cli: output does not match /$regex/" >&2; exit 1
fi
echo "expect_cli: exit code $code and output as expected"
