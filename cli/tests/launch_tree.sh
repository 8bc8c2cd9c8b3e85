#!/usr/bin/env bash
# launch_tree.sh MFSDP: the launcher owns its process tree (docs/files.md, "The launcher").
#  1. A rank fails while another rank's child (a grandchild of the launcher) sleeps: after the
#     launcher returns, no process of the tree is left.
#  2. The launcher gets SIGTERM while its ranks ignore TERM: it passes the signal on, SIGKILLs them
#     after --grace-s, exits 143 (128 + SIGTERM) within grace + a few seconds, and leaves nothing.
set -u
mfsdp=$1
tag=mfsdp_tree_$$_$RANDOM  # in every process's command line, to find leftovers
fail() { echo "launch_tree: FAIL: $*"; pkill -KILL -f "$tag" 2>/dev/null; exit 1; }
left() { pgrep -f "$tag" | grep -v "^$$\$" || true; }

# 1. rank 1 exits 3; rank 0 started a background sleeper and waits.
out=$("$mfsdp" launch -n 2 --grace-s 2 -- /bin/sh -c \
  "if [ \$RANK = 1 ]; then sleep 1; exit 3; fi; sleep 300 # $tag
   " 2>&1 & wait $!)
code=$?
sleep 0.5
[ "$code" -eq 3 ] || fail "a failed rank: exit $code, expected 3: $out"
[ -z "$(left)" ] || fail "processes left after a failed rank: $(left)"
echo "launch_tree: a failed rank: exit 3, nothing left"

# 1b. the same with a grandchild: rank 0's own child sleeps in the background.
"$mfsdp" launch -n 2 --grace-s 2 -- /bin/sh -c \
  "if [ \$RANK = 1 ]; then sleep 1; exit 3; fi; bash -c \"exec -a $tag sleep 300\" & wait" >/dev/null 2>&1
code=$?
sleep 0.5
[ "$code" -eq 3 ] || fail "a failed rank with a grandchild: exit $code, expected 3"
[ -z "$(left)" ] || fail "a rank's child outlived the launcher: $(left)"
echo "launch_tree: a rank's own child: killed with the rank's group"

# 2. SIGTERM to the launcher; ranks ignore TERM.
start=$(date +%s)
"$mfsdp" launch -n 3 --grace-s 2 -- /bin/sh -c "trap '' TERM; bash -c \"exec -a $tag sleep 300\" & while :; do sleep 0.2; done" \
  >/dev/null 2>&1 &
launcher=$!
sleep 2
kill -TERM "$launcher"
wait "$launcher"
code=$?
took=$(( $(date +%s) - start - 2 ))
sleep 0.5
[ "$code" -eq 143 ] || fail "SIGTERM: exit $code, expected 143 (128 + SIGTERM)"
[ "$took" -le 8 ] || fail "SIGTERM: the launcher took $took s to stop (grace 2 s)"
[ -z "$(left)" ] || fail "processes left after SIGTERM: $(left)"
echo "launch_tree: SIGTERM: exit 143 after $took s, ranks that ignore TERM killed, nothing left"

# 3. exec failure names the path and the cause.
out=$("$mfsdp" launch -n 1 -- /nonexistent/prog 2>&1)
echo "$out" | grep -q "cannot run '/nonexistent/prog': No such file or directory" || fail "exec failure: $out"
echo "launch_tree: all passed"
