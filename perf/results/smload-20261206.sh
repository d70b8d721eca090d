#!/bin/bash
# sm vs ring over shm, 8 ranks, 4 MiB and 64 MiB, quiet then with 4 CPU hogs
# Run from the repository root; B is the build directory (release).
B=${B:-build-dev}
run() { RING_TRANSPORT=shm "$@" timeout 300 "$B"/tools/ringrun -n 8 "$B"/perf/ring_perf -b 4M -e 64M -f 16 -n 5 -w 1 -c 1 --no-probe --alpha-us 1 --link-gbps 10 2>&1 | grep -E "^\[0\] +[0-9]" ; }
for phase in quiet hogs; do
  if [ $phase = hogs ]; then for i in 1 2 3 4; do (while :; do :; done) & hp[$i]=$!; done; fi
  for rep in 1 2; do
    echo "== $phase rep $rep sm (default)"; run env
    echo "== $phase rep $rep ring (RING_SM_MAX_BYTES=0)"; run env RING_SM_MAX_BYTES=0
  done
  if [ $phase = hogs ]; then kill ${hp[@]}; wait 2>/dev/null; fi
done
