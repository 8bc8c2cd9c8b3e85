#!/usr/bin/env bash
# bad_input_row.sh MFSDP DATA_DIR TABLE NAME: runs row NAME of the bad-input table (bad_input.tsv)
# and passes when the command exits with the row's code, its output matches the row's regex, and
# it left nothing behind in its temporary directory but what was there before.
set -u
mfsdp=$1 data=$2 table=$3 name=$4
row=$(awk -F'\t' -v n="$name" '$1 == n' "$table")
[ -n "$row" ] || { echo "bad_input_row: no row '$name' in $table" >&2; exit 1; }
code=$(printf '%s' "$row" | cut -f2); regex=$(printf '%s' "$row" | cut -f3); args=$(printf '%s' "$row" | cut -f4)
tmp=$(mktemp -d /tmp/mfsdp_bad_XXXXXX); trap 'rm -rf "$tmp"' EXIT
args=${args//@DATA@/$data}; args=${args//@TMP@/$tmp}
set -f  # globs in arguments (e.g. --group *:lr=nan) stay as written
# shellcheck disable=SC2086
out=$(timeout 60 "$mfsdp" $args 2>&1); got=$?
set +f
printf '$ mfsdp %s\n%s\n' "$args" "$out"
[ "$got" -eq "$code" ] || { echo "bad_input_row: exit code $got, expected $code" >&2; exit 1; }
printf '%s\n' "$out" | grep -Eq -- "$regex" || { echo "bad_input_row: output does not match /$regex/" >&2; exit 1; }
left=$(find "$tmp" -name '*.tmp*' | head -3)
[ -z "$left" ] || { echo "bad_input_row: left behind: $left" >&2; exit 1; }
echo "bad_input_row: refused with exit code $got, as expected"
