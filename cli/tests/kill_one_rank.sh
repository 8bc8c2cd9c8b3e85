#!/usr/bin/env bash
# kill_one_rank.sh VICTIM COMMAND [ARGS...]
# Run under a launcher: the rank whose RANK equals VICTIM kills itself with SIGKILL before doing
# anything; every other rank execs COMMAND. Used to test that peers and the launcher name it.
victim=$1; shift
if [ "${RANK:?}" = "$victim" ]; then kill -9 $$; fi
exec "$@"
