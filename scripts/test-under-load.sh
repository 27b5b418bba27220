#!/bin/bash
# make test on a busy machine: RUNS times in a row, each in a fresh clone of
# this repository at the commit HEAD named when the script started (commits
# made meanwhile are not taken), while another build and a benchmark run beside it
# the whole time:
#   build      `go build -a ./...` of a separate clone in a loop (-a: every
#              package compiled again, the standard library included), with
#              a Go build cache of its own
#   benchmark  bench/callflow.sh (hookit against uftrace) in a loop, in a
#              third clone
# Each run's log is kept in the work directory; the script prints one line a
# run (pass or fail, its time, the load average) and exits non-zero if any
# run failed. The clones and caches are removed at the end unless KEEP=1.
#
#   scripts/test-under-load.sh [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
src=$PWD
rev=$(git rev-parse HEAD)
work=$(mktemp -d /var/tmp/perfinsp-load.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill -- -"$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	if [ "${KEEP:-0}" != 1 ]; then
		find "$work" -maxdepth 1 -mindepth 1 ! -name '*.log' -exec rm -rf {} + 2>/dev/null || true
	fi
	echo "test-under-load: logs in $work" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

git clone -q "$src" "$work/build"
git clone -q "$src" "$work/bench"
(cd "$work/bench" && make -s build >/dev/null)

# Each loop runs in a session of its own so that cleanup can end it with
# everything it started.
setsid bash -c 'export GOCACHE=$1/gocache; cd "$1/build"; while :; do go build -a ./... >/dev/null 2>&1; done' _ "$work" </dev/null >/dev/null 2>&1 &
pids+=($!)
setsid bash -c 'cd "$1/bench"; while :; do bash bench/callflow.sh 1000000 1; done' _ "$work" </dev/null >"$work/bench.log" 2>&1 &
pids+=($!)

failed=0
for i in $(seq "$RUNS"); do
	rm -rf "$work/test"
	git clone -q "$src" "$work/test"
	git -C "$work/test" checkout -q "$rev"
	start=$(date +%s)
	if (cd "$work/test" && CI=true make test) >"$work/run$i.log" 2>&1; then
		verdict=pass
	else
		verdict=FAIL
		failed=1
	fi
	printf 'run %d of %s: %s in %d s, load average %s (log %s)\n' "$i" "${rev:0:7}" "$verdict" "$(($(date +%s) - start))" \
		"$(cut -d' ' -f1-3 /proc/loadavg)" "$work/run$i.log"
done
exit $failed
