#!/usr/bin/env bash
# conform_cli.sh MFSDP: `mfsdp train --dump-trajectory` and `mfsdp conform` end to end, by exit code.
#  1. the oracle (ddp) and the owner runtime at W = 3 dump bit-identical trajectories with
#     gradients: exit 0, BITWISE EQUAL;
#  2. fast mode (native reduce, any summation order) differs in the last bits: exit 1 under exact,
#     naming the first diverging step and tensor; within a tolerance file: exit 0 naming its entry;
#  3. a run with another Muon learning rate: exit 2, the headers disagree, naming the field;
#  4. format 2: the oracle's optimizer state (--dump-state) is compared where both dumps have it,
#     noted where one has it; an HSDP dump against a flat one is refused naming the mesh field;
#  5. a run's dump refuses a directory that holds anything, and changes nothing there, also when
#     the ranks were started by a launcher; rank processes dump what threads dump.
set -euo pipefail
mfsdp=$1
work=$(mktemp -d /tmp/mfsdp_conform_XXXXXX); trap 'rm -rf "$work"' EXIT
fail() { echo "conform_cli: FAIL: $*" >&2; cat "$work/out" >&2; exit 1; }
train() { "$mfsdp" train -w 3 --steps 3 "$@" >"$work/out" 2>&1 || fail "train $*"; }

train --placement ddp --dump-trajectory "$work/oracle" --dump-grads
train --placement owner --dump-trajectory "$work/owner" --dump-grads
grep -q "^trajectory: $work/owner" "$work/out" || fail "train does not say where the dump is"
"$mfsdp" conform "$work/oracle" "$work/owner" >"$work/out" 2>&1 || fail "oracle vs owner: exit $?"
grep -q "conform: BITWISE EQUAL: 150 values over 4 steps" "$work/out" || fail "oracle vs owner: no BITWISE EQUAL over 150 values"

train --placement ddp --dump-trajectory "$work/oracle_state" --dump-grads --dump-state
train --placement ddp --dump-trajectory "$work/oracle_state2" --dump-state  # 21 params x 4, 3 losses, 35 state tensors x 3
"$mfsdp" conform "$work/oracle_state" "$work/oracle_state2" >"$work/out" 2>&1 || fail "oracle with state twice: exit $?"
grep -q "conform: BITWISE EQUAL: 192 values over 4 steps" "$work/out" || fail "oracle with state: the state is not compared"
"$mfsdp" conform "$work/oracle_state" "$work/owner" >"$work/out" 2>&1 || fail "state on one side: exit $?"
grep -q "(optimizer state not compared: only the reference has it)" "$work/out" || fail "state on one side: no note"
"$mfsdp" train -w 4 --steps 1 --placement ddp --dump-trajectory "$work/flat4" >"$work/out" 2>&1 || fail "train flat4"
"$mfsdp" train -w 4 --steps 1 --replicas 2 --placement owner --dump-trajectory "$work/hsdp4" >"$work/out" 2>&1 || fail "train hsdp4"
set +e
"$mfsdp" conform "$work/flat4" "$work/hsdp4" >"$work/out" 2>&1; code=$?
set -e
[ "$code" -eq 2 ] && grep -q "the headers disagree, so the runs are not comparable: mesh.replicas: reference 1, candidate 2" "$work/out" ||
  fail "flat vs HSDP: exit $code, the mesh field is not named"

train --placement owner --fast --dump-trajectory "$work/fast" --dump-grads
set +e
"$mfsdp" conform "$work/oracle" "$work/fast" --json "$work/report.json" >"$work/out" 2>&1; code=$?
set -e
[ "$code" -eq 1 ] || fail "fast under exact: exit $code, expected 1"
grep -Eq "^first difference: step 1 grads [a-z0-9_.]+: [0-9]+ of [0-9]+ element\(s\) differ" "$work/out" || fail "fast: no first difference"
grep -q '"verdict": "differs"' "$work/report.json" || fail "fast: the JSON report has no verdict 'differs'"
cat >"$work/tol.json" <<'JSON'
{"entries": [{"name": "fast-reduce", "reason": "fast mode sums gradients in the backend's order", "rtol": 0.5, "atol": 1e-3}]}
JSON
# Within a tolerance: AdamW runs, whose fast-mode differences stay at the gradients' last bits
# (2.8e-7 at most over 3 steps). Muon's bf16 Newton-Schulz amplifies them: on an AVX2-only EPYC
# the Muon pair above is 2.4e-3 apart at step 3, past this entry's bound on values near zero.
train --placement ddp --optimizer adamw --dump-trajectory "$work/oracle_adamw" --dump-grads
train --placement owner --optimizer adamw --fast --dump-trajectory "$work/fast_adamw" --dump-grads
"$mfsdp" conform "$work/oracle_adamw" "$work/fast_adamw" --tolerance "$work/tol.json" >"$work/out" 2>&1 || fail "fast within a tolerance: exit $?"
grep -q "conform: WITHIN TOLERANCE" "$work/out" && grep -q "fast-reduce: [0-9]* value(s); fast mode sums" "$work/out" ||
  fail "fast: the verdict does not name the entry"

train --placement owner --lr 0.01 --dump-trajectory "$work/lr"
set +e
"$mfsdp" conform "$work/oracle" "$work/lr" >"$work/out" 2>&1; code=$?
set -e
[ "$code" -eq 2 ] || fail "another learning rate: exit $code, expected 2"
grep -q "the headers disagree, so the runs are not comparable: optimizer.muon.lr: reference 0.02, candidate 0.01" "$work/out" ||
  fail "another learning rate: the field is not named"

before=$(ls -l "$work/owner" | md5sum)
set +e
"$mfsdp" train -w 2 --steps 1 --dump-trajectory "$work/owner" >"$work/out" 2>&1; code=$?
set -e
[ "$code" -eq 2 ] && grep -q "is not empty" "$work/out" || fail "a dump into a used directory: exit $code"
[ "$(ls -l "$work/owner" | md5sum)" = "$before" ] || fail "a refused dump changed the directory"
# Rank processes: ours (the parent checks the directory once) and an external launcher's (rank 0's
# writer checks it; every rank fails together, naming rank 0).
"$mfsdp" train -w 3 --steps 3 --launcher processes --dump-trajectory "$work/processes" --dump-grads >"$work/out" 2>&1 ||
  fail "a dump from rank processes: exit $?"
"$mfsdp" conform "$work/owner" "$work/processes" >"$work/out" 2>&1 || fail "threads vs processes: exit $?"
set +e
"$mfsdp" launch -n 2 -- "$mfsdp" train --steps 1 --dump-trajectory "$work/owner" >"$work/out" 2>&1; code=$?
set -e
[ "$code" -ne 0 ] && grep -q "train: --dump-trajectory failed on rank 0: .*is not empty" "$work/out" ||
  fail "a used dump directory under an external launcher: exit $code"
[ "$(ls -l "$work/owner" | md5sum)" = "$before" ] || fail "a refused dump changed the directory (launched)"
# The report never lands inside a dump.
set +e
"$mfsdp" conform "$work/oracle" "$work/owner" --json "$work/owner/../owner/trajectory.json" >"$work/out" 2>&1; code=$?
set -e
[ "$code" -eq 2 ] && grep -q "is inside the dump" "$work/out" || fail "--json inside a dump: exit $code"
[ "$(ls -l "$work/owner" | md5sum)" = "$before" ] || fail "--json inside a dump changed it"
echo "conform_cli: all passed"
