#!/usr/bin/env bash
# checkpoint_dir.sh MFSDP: a checkpoint directory is owned by one run.
#  1. a second run on a directory in use is refused, naming the holder (pid and command line);
#  2. a run without --resume on a directory holding another run's checkpoints is refused and
#     nothing there changes; --overwrite-checkpoints removes them, saying so;
#  3. a dangling `latest` is an error listing the committed steps, not a fresh start;
#  4. resuming from an earlier step is a rollback, said, and `latest` then moves back;
#  5. a resume with another model shape (heads) or a result-changing hyperparameter is refused;
#     another learning rate is allowed with a warning;
#  6. after a killed holder the lock is free at once (stale-lock recovery).
set -euo pipefail
mfsdp=$1
work=$(mktemp -d /tmp/mfsdp_ckdir_XXXXXX); trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
fail() { echo "checkpoint_dir: FAIL: $*" >&2; exit 1; }
run() { "$mfsdp" train -w 2 --checkpoint-every 2 "$@" >"$work/out" 2>&1; }
ck=$work/ck

run --steps 4 --checkpoint-dir "$ck" || { cat "$work/out"; fail "first run"; }
snapshot() { ls -lR --time-style=full-iso "$ck" | grep -v " lock$" | md5sum; }
before=$(snapshot)

# 2. Another run's checkpoints, no --resume: refused, nothing changed.
if run --steps 2 --checkpoint-dir "$ck"; then fail "a new run overwrote another run's checkpoints"; fi
grep -q "already holds checkpoints of another run (latest: step 4; steps 2, 4); pass --resume" "$work/out" || { cat "$work/out"; fail "message"; }
[ "$(snapshot)" = "$before" ] || fail "the refused run changed the directory"
echo "ok: another run's checkpoints refused"

# 1. In use: a long run holds the lock; a second run is refused, naming it.
"$mfsdp" train -w 2 --steps 100000 --checkpoint-dir "$work/busy" --checkpoint-every 1000 >"$work/long" 2>&1 &
holder=$!
for _ in $(seq 100); do [ -s "$work/busy/lock" ] && break; sleep 0.1; done
if run --steps 2 --checkpoint-dir "$work/busy" --resume; then fail "two runs shared a checkpoint directory"; fi
grep -Eq "is in use by another run \(pid $holder on .*mfsdp train -w 2 --steps 100000" "$work/out" || { cat "$work/out"; fail "holder not named"; }
echo "ok: a directory in use refused, naming pid $holder"
# 6. Killed: the lock is free at once.
kill -9 "$holder"; wait "$holder" 2>/dev/null || true
run --steps 2 --checkpoint-dir "$work/busy" --overwrite-checkpoints || { cat "$work/out"; fail "the lock of a killed run was not recovered"; }
grep -q "pid $holder" "$work/busy/lock" && fail "the lock file still names the killed holder"
echo "ok: a killed holder's lock recovered"

# 2b. --overwrite-checkpoints: removed, said.
run --steps 2 --checkpoint-dir "$ck" --overwrite-checkpoints || { cat "$work/out"; fail "overwrite"; }
grep -q "removed 2 checkpoint(s) (steps 2, 4) and latest" "$work/out" || { cat "$work/out"; fail "overwrite not said"; }
[ ! -e "$ck/step_00000004" ] && [ "$(head -1 "$ck/latest")" = "step_00000002" ] || fail "overwrite left step 4 or latest"
echo "ok: --overwrite-checkpoints removed and said so"

# 4. Rollback: continue to step 6, then resume from step 2: said, and latest moves back to 4.
run --steps 6 --checkpoint-dir "$ck" --resume || { cat "$work/out"; fail "resume to 6"; }
[ "$(head -1 "$ck/latest")" = "step_00000006" ] || fail "latest is not step 6"
run --steps 4 --checkpoint-dir "$ck" --resume-from "$ck/step_00000002" || { cat "$work/out"; fail "rollback"; }
grep -q "rolling back: .*latest names step 6; this run continues from step 2" "$work/out" || { cat "$work/out"; fail "rollback not said"; }
[ "$(head -1 "$ck/latest")" = "step_00000004" ] || fail "latest did not move back to step 4 on the rollback"
echo "ok: rollback said, latest moved back to step 4"

# 5. Settings that change results are refused; a learning rate is allowed, said.
if run --steps 6 --checkpoint-dir "$ck" --resume --heads 2; then fail "a resume with 2 heads on a 4-head checkpoint was accepted"; fi
grep -q "model heads was 4, is 2 (the weights would be reinterpreted)" "$work/out" || { cat "$work/out"; fail "heads"; }
if run --steps 6 --checkpoint-dir "$ck" --resume --weight-decay 0.5; then fail "another weight decay was accepted"; fi
grep -q "optimizer muon.weight_decay was 0.1, is 0.5" "$work/out" || { cat "$work/out"; fail "weight decay"; }
run --steps 6 --checkpoint-dir "$ck" --resume --lr 0.01 || { cat "$work/out"; fail "lr"; }
grep -q "warning: optimizer muon.lr was 0.02, is 0.01 (allowed" "$work/out" || { cat "$work/out"; fail "lr warning"; }
if run --steps 6 --checkpoint-dir "$ck" --resume --ns-variant polar-express-5; then fail "another Newton-Schulz variant was accepted"; fi
grep -q 'optimizer muon.ns_variant was (absent), is "polar-express-5"' "$work/out" || { cat "$work/out"; fail "ns variant"; }
echo "ok: heads, weight decay and the Newton-Schulz variant refused on resume, lr allowed with a warning"

# 3. A dangling latest: an error listing the committed steps.
printf 'step_00000099\n' >"$ck/latest"
if run --steps 8 --checkpoint-dir "$ck" --resume; then fail "a dangling latest started a run"; fi
grep -q "latest' names 'step_00000099', which does not exist; committed checkpoints there: step_00000002, step_00000004, step_00000006" "$work/out" \
  || { cat "$work/out"; fail "dangling latest"; }
echo "ok: a dangling latest refused, listing the committed steps"
echo "checkpoint_dir: all passed"
