#!/usr/bin/env bash
# checkpoint_crash.sh MFSDP
# Crash and resume, with the process launcher (3 rank processes, SOAP, a checkpoint every 3 steps):
#   1. an uninterrupted 8-step run;
#   2. the same run where rank 1 is SIGKILLed in step 5: the survivors must exit within the timeout
#      naming the lost rank, and `latest` must still name step 3;
#   3. a restart where rank 2 is SIGKILLed inside the step-6 checkpoint, after writing its file and
#      before the commit: `latest` must still name step 3, which must still verify;
#   4. a restart with --resume: it must resume from step 3 and reach a final state (the exported
#      model, compared byte for byte) and a loss trajectory identical to the uninterrupted run.
set -euo pipefail
mfsdp=$1
work=$(mktemp -d /tmp/mfsdp_crash_XXXXXX)
trap 'rm -rf "$work"' EXIT
common=(train -w 3 --launcher processes --steps 8 --checkpoint-every 3 --optimizer soap --timeout-s 20)
fail() { echo "FAIL: $*" >&2; exit 1; }

"$mfsdp" "${common[@]}" --checkpoint-dir "$work/a" --metrics "$work/a.jsonl" >"$work/a.log" 2>&1 \
  || { cat "$work/a.log"; fail "the uninterrupted run failed"; }

start=$(date +%s)
set +e
"$mfsdp" "${common[@]}" --checkpoint-dir "$work/b" --fault-kill 1 5 >"$work/b1.log" 2>&1
code=$?
set -e
elapsed=$(( $(date +%s) - start ))
[ "$code" -ne 0 ] || fail "the run whose rank 1 was killed exited 0"
grep -Eq "lost rank 1" "$work/b1.log" || { cat "$work/b1.log"; fail "no survivor named the lost rank 1"; }
[ "$elapsed" -lt 60 ] || fail "the survivors took ${elapsed}s to exit"
[ "$(head -1 "$work/b/latest")" = "step_00000003" ] || fail "latest is '$(head -1 "$work/b/latest")' after the crash, not step_00000003"
echo "crash in step 5: exit code $code after ${elapsed}s; $(grep -Eo 'rank [0-9] failed: lost rank 1[^;]*' "$work/b1.log" | head -1); latest = step_00000003"

set +e
"$mfsdp" "${common[@]}" --checkpoint-dir "$work/b" --resume --fault-kill-in-checkpoint 2 6 >"$work/b2.log" 2>&1
code=$?
set -e
[ "$code" -ne 0 ] || fail "the run whose rank 2 was killed in a checkpoint exited 0"
[ "$(head -1 "$work/b/latest")" = "step_00000003" ] || fail "latest moved to '$(head -1 "$work/b/latest")' although the step-6 checkpoint never committed"
[ ! -e "$work/b/step_00000006" ] || fail "a half-written step_00000006 became visible"
"$mfsdp" checkpoint inspect "$work/b" >"$work/inspect.log" || { cat "$work/inspect.log"; fail "the previous checkpoint no longer verifies"; }
echo "crash inside the step-6 checkpoint: exit code $code; latest = step_00000003, which still verifies"

"$mfsdp" "${common[@]}" --checkpoint-dir "$work/b" --resume --metrics "$work/b.jsonl" >"$work/b3.log" 2>&1 \
  || { cat "$work/b3.log"; fail "the resumed run failed"; }
grep -q "resume: .*step_00000003, step 3, written by 3 rank(s); same layout" "$work/b3.log" || { cat "$work/b3.log"; fail "did not resume from step 3"; }

"$mfsdp" export "$work/a" --out "$work/a.safetensors" >/dev/null
"$mfsdp" export "$work/b" --out "$work/b.safetensors" >/dev/null
cmp "$work/a.safetensors" "$work/b.safetensors" || fail "the resumed run's final model differs from the uninterrupted run's"
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' '$2 > 3'; }
[ "$(losses "$work/a.jsonl")" = "$(losses "$work/b.jsonl")" ] || {
  paste <(losses "$work/a.jsonl") <(losses "$work/b.jsonl"); fail "the loss trajectories of steps 4..8 differ"; }
[ "$(losses "$work/b.jsonl" | wc -l)" -eq 5 ] || fail "the resumed run did not report steps 4..8"
echo "resumed from step 3: final model byte-identical and losses of steps 4..8 identical to the uninterrupted run"
