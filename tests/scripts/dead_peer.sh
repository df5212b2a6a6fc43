#!/usr/bin/env bash
# A rank that dies (kill) or stops answering (hang) at step 3 makes the other
# ranks exit 1 with an error naming the group, the op and the ranks, instead of
# hanging, and naming rank 2 as stopped (kill) or as alive but stuck outside
# its collectives (hang). Ranks are started directly with RANK/WORLD_SIZE/MASTER_* (no
# launcher that would kill the survivors for us).
# Usage: dead_peer.sh kill|hang
source "$(dirname "$0")/common.sh"
kind="$1"
port="$(free_port)"
pids=()
# The hung rank never ends on its own: ended here however the script ends.
trap 'kill -9 "${pids[@]}" 2> /dev/null || true; rm -rf "$WORK"' EXIT
for rank in 0 1 2; do
  RANK=$rank WORLD_SIZE=3 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$LOOM" train "$TINY" --run-dir "$WORK/run" --set train.global_batch_size=6 --set train.micro_batch_size=2 \
    --set parallel.timeout_s=5 --inject-fault "2:3:$kind" > "$WORK/rank$rank.log" 2>&1 &
  pids+=($!)
done

# The survivors must end on their own; 120 s is only a guard against a hang.
for rank in 0 1; do
  code=0
  timeout 120 tail --pid="${pids[$rank]}" -f /dev/null || fail "rank $rank still running after 120 s ($kind)"
  wait "${pids[$rank]}" || code=$?
  cat "$WORK/rank$rank.log"
  [ "$code" = 1 ] || fail "rank $rank exited $code, expected 1"
  grep -q "on group dp (global ranks \[0, 1, 2\]) failed on global rank $rank" "$WORK/rank$rank.log" ||
    fail "rank $rank's error does not name the group, ranks and rank"
  grep -q "parallel.timeout_s" "$WORK/rank$rank.log" || fail "rank $rank's error does not mention the timeout"
  # The heartbeats tell a dead rank from a live one that is stuck.
  if [ "$kind" = kill ]; then
    grep -q "; rank 2 stopped answering: no heartbeat in" "$WORK/rank$rank.log" || fail "rank $rank's error does not name rank 2"
  else
    # Rank 2 sleeps in its own work (outside any collective) while its heartbeat goes on.
    grep -q "; rank 2 is alive but in no collective through the 3 s check: stuck in its own work" "$WORK/rank$rank.log" ||
      fail "rank $rank's error does not name rank 2 as stuck in its own work"
  fi
done
if [ "$kind" = hang ]; then
  # The hung rank still lives: it ignores SIGPIPE (bit 13 of SigIgn), so a write to a peer that died
  # fails its collective with an error instead of ending it without a word.
  ignored="$(awk '/^SigIgn:/ { print $2 }' "/proc/${pids[2]}/status")"
  (((0x$ignored >> 12) & 1)) || fail "rank 2 does not ignore SIGPIPE (SigIgn $ignored)"
fi
kill -9 "${pids[2]}" 2> /dev/null || true
wait "${pids[2]}" 2> /dev/null || true
echo "dead peer ($kind): survivors exited 1 with a clear error"
