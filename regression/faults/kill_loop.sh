#!/usr/bin/env bash
# kill_loop.sh MFSDP [N] [SEED]: N times (default 50) start `mfsdp train` on 3 rank processes with a
# checkpoint every step and --resume, SIGKILL one victim at a random moment — a rank, or the
# launcher itself; one kill in four lands during start-up (0.3 to 2.5 s after the launch), the
# others 0 to 1.5 s after the run's first step (in training, in a checkpoint being written) — and
# require:
#  - the job is gone within 10 s of the kill (no hang): the launcher exited, or, when the launcher
#    was the victim, every rank died with it;
#  - a non-zero exit code when the launcher survives (it names the lost rank), 137 when it was killed;
#  - no orphan: no process of the job's session is left;
#  - the checkpoint directory verifies (`mfsdp checkpoint inspect`) whenever it has a `latest`.
# Then one run resumes from the directory's latest checkpoint for 3 more steps and must exit 0.
# Prints the worst exit time.
set -uo pipefail
mfsdp=$1 n=${2:-50} seed=${3:-$RANDOM}
RANDOM=$seed
work=$(mktemp -d /tmp/mfsdp_kill_XXXXXX); trap 'rm -rf "$work"' EXIT
ck=$work/ck steps=300 worst=0 fail=0
final=$(printf 'step_%08d' "$steps")  # the last checkpoint's directory name
echo "kill_loop: $n kills, seed $seed"
session_procs() { ps -eo sid=,pid=,comm= | awk -v s="$1" '$1 == s && $3 != "ps" {print $2}'; }
for i in $(seq 1 "$n"); do
  setsid "$mfsdp" train -w 3 --launcher processes --steps $steps --checkpoint-dir "$ck" --checkpoint-every 1 --resume \
    --timeout-s 60 >"$work/run.log" 2>&1 &
  launcher=$!
  if [ $((RANDOM % 4)) -eq 0 ]; then
    moment="during start-up"
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.3 + 2.2 * r / 32767 }')"
  else
    moment="in training"
    for _ in $(seq 1 300); do grep -Eq '\] step +[0-9]+/' "$work/run.log" 2>/dev/null && break; kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 1.5 * r / 32767 }')"
  fi
  ranks=$(pgrep -P "$launcher" | tr '\n' ' ')
  set -- $ranks
  if [ $# -eq 0 ] || ! kill -0 "$launcher" 2>/dev/null; then
    wait "$launcher" 2>/dev/null; echo "  $i: the run ended before the kill (training done); restarting it from scratch"
    rm -rf "$ck"; continue
  fi
  pick=$((RANDOM % 4))  # 0..2: that rank's process (by launch order), 3: the launcher
  victim=$launcher; what=launcher
  if [ $pick -lt 3 ] && [ $# -ge $((pick + 1)) ]; then eval victim=\${$((pick + 1))}; what="rank process $((pick + 1))"; fi
  t0=$(date +%s.%N)
  kill -9 "$victim"
  code=0
  if [ "$victim" = "$launcher" ]; then
    wait "$launcher" 2>/dev/null; code=$?
  else
    # The launcher must notice and exit by itself.
    for _ in $(seq 1 150); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$launcher" 2>/dev/null; then code=hang; else wait "$launcher" 2>/dev/null; code=$?; fi
  fi
  # Every process of the job's session gone (the ranks die with a killed launcher).
  left=""
  for _ in $(seq 1 150); do left=$(session_procs "$launcher"); [ -z "$left" ] && break; sleep 0.1; done
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  worst=$(awk -v a="$worst" -v b="$dt" 'BEGIN { print (b > a ? b : a) }')
  verdict=ok
  [ "$code" = hang ] && verdict="HANG: the launcher still runs 15 s after its $what was killed"
  [ -n "$left" ] && verdict="ORPHANS: $(echo $left)"
  [ "$verdict" = ok ] && awk -v d="$dt" 'BEGIN { exit !(d > 10) }' && verdict="SLOW: ${dt}s"
  # Exit code 0 is right only when the run had already finished its last step as the kill landed.
  if [ "$verdict" = ok ] && [ "$code" = 0 ] && [ "$(head -1 "$ck/latest" 2>/dev/null)" != "$final" ]; then
    verdict="exit code 0 after a kill"
  fi
  if [ "$verdict" = ok ] && [ -e "$ck/latest" ] && ! "$mfsdp" checkpoint inspect "$ck" >"$work/inspect.log" 2>&1; then
    verdict="CHECKPOINT: $(tail -1 "$work/inspect.log")"
  fi
  printf '  %2d: killed the %s %s; gone in %ss, exit code %s, latest %s: %s\n' "$i" "$what" "$moment" "$dt" "$code" \
    "$(head -1 "$ck/latest" 2>/dev/null || echo none)" "$verdict"
  if [ "$verdict" != ok ]; then fail=$((fail + 1)); tail -5 "$work/run.log"; kill -9 $left 2>/dev/null; fi
  [ -e "$ck/latest" ] && [ "$(head -1 "$ck/latest")" = "$final" ] && rm -rf "$ck"  # finished: start over
done
# Resume from the latest checkpoint (or from scratch when none was committed) for 3 more steps.
last=$(head -1 "$ck/latest" 2>/dev/null | sed -E 's/^step_0*([0-9]+)$/\1/'); last=${last:-0}
"$mfsdp" train -w 3 --launcher processes --steps $((last + 3)) --checkpoint-dir "$ck" --checkpoint-every 1 --resume >"$work/final.log" 2>&1 \
  || { tail -5 "$work/final.log"; echo "kill_loop: the final resume failed"; fail=$((fail + 1)); }
echo "kill_loop: $n kills, worst exit ${worst}s, $fail failure(s); final resume $(grep -Eo 'resumed after step [0-9]+' "$work/final.log" | head -1 || echo 'from scratch')"
echo "$((n - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
