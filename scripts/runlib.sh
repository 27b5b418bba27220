# runlib.sh: what run.tprof and run.itrace share, sourced by them (bash).
# Sets nothing up by itself: the script calls runlib_init first, at its top,
# before any trap, so the signal state it records is the one the script
# was started with.
#
#   runlib_init NAME         record the starting signal dispositions and
#                            environment; install the INT/TERM/HUP traps
#   runlib_usage             print the script's header comment (--help)
#   runlib_usage_error MSG   MSG as one line pointing to --help; exit 2
#   runlib_unknown_option OPT OPTION...
#                            the same for an unknown OPT, naming the
#                            nearest of the script's OPTIONs
#   runlib_version TOOL      --version: the build's version, as TOOL (a
#                            perfinsp tool of the same build) gives it
#   runlib_start CMD ARGS    start the command as the script's caller would
#                            have (sets $child)
#   runlib_wait              wait for $child, forwarding the signals the
#                            script receives (sets $rc)
#   runlib_keep_old DIR F..  move the existing DIR/F to DIR/F.old, and say so
#   runlib_exit_code         the script's exit code: the command's, or
#                            128+signal when interrupted and the command
#                            said nothing else
#   runlib_claim / runlib_release / runlib_reclaim SW DIR
#                            who turned the facility on (an owner file): a
#                            run finding it left on by one that died
#                            reclaims it, keeping the orphaned trace

runlib_init() {
	runlib_name=$1
	# Signals ignored when the script started (trap -p shows them, and
	# only them, before any trap is set): the command inherits those, and
	# only those. bash starts background commands with SIGINT and SIGQUIT
	# ignored (no job control), so the command is started through
	# env --default-signal for the others.
	local names=() sig
	for sig in INT QUIT; do
		[ -n "$(trap -p "$sig")" ] || names+=("$sig")
	done
	runlib_default=(env)
	if [ ${#names[@]} -gt 0 ]; then
		local IFS=,
		runlib_default+=("--default-signal=${names[*]}")
	fi
	# The caller's stdin, for the background command (bash gives an
	# asynchronous command /dev/null otherwise).
	if { true <&0; } 2>/dev/null; then
		exec {runlib_stdin}<&0
	else
		exec {runlib_stdin}</dev/null
	fi
	RUNLIB_PREFIX=()
	child=
	caught=
	forwarded=
	woke=
	runlib_phase=setup
	trap 'runlib_signal INT' INT
	trap 'runlib_signal TERM' TERM
	trap 'runlib_signal HUP' HUP
}

# runlib_usage: the script's header comment (after #!), without the #.
runlib_usage() {
	awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"
	exit 0
}

# runlib_usage_error MSG: one line, as every perfinsp tool says it.
runlib_usage_error() {
	echo "$runlib_name: $1 ($runlib_name --help for more)" >&2
	exit 2
}

# runlib_unknown_option OPT OPTION...: OPT is none of the OPTIONs; the
# nearest is named when it is a slip (the rule of the Go tools: an edit
# distance within a third of the name, some of it kept, no tie).
runlib_unknown_option() {
	local given=$1 near
	shift
	near=$(printf '%s\n' "$@" | awk -v given="${given%%=*}" '
		function dist(a, b,   i, j, la, lb, d, v, c) {
			la = length(a); lb = length(b)
			for (i = 0; i <= la; i++) d[i, 0] = i
			for (j = 0; j <= lb; j++) d[0, j] = j
			for (i = 1; i <= la; i++)
				for (j = 1; j <= lb; j++) {
					c = substr(a, i, 1) != substr(b, j, 1)
					v = d[i-1, j] + 1
					if (d[i, j-1] + 1 < v) v = d[i, j-1] + 1
					if (d[i-1, j-1] + c < v) v = d[i-1, j-1] + c
					if (i > 1 && j > 1 && substr(a, i, 1) == substr(b, j-1, 1) && substr(a, i-1, 1) == substr(b, j, 1) && d[i-2, j-2] + 1 < v)
						v = d[i-2, j-2] + 1
					d[i, j] = v
				}
			return d[la, lb]
		}
		BEGIN { bare = given; sub(/^-+/, "", bare); best = ""; bestd = -1 }
		{
			name = $0; sub(/^-+/, "", name)
			d = dist(bare, name)
			if (bestd < 0 || d < bestd) { best = $0; bestd = d; tie = 0 }
			else if (d == bestd && $0 != best) tie = 1
		}
		END {
			lim = int(length(bare) / 3); if (lim < 1) lim = 1
			if (lim > length(bare) - 1) lim = length(bare) - 1
			if (best != "" && bestd <= lim && !tie) print best
		}')
	runlib_usage_error "unknown option $given${near:+: did you mean $near?}"
}

# runlib_version TOOL: "NAME (perfinsp) VERSION", VERSION as TOOL (built
# beside the script) says it: the scripts are of the build their tools are.
runlib_version() {
	local v
	if ! v=$("$1" --version 2>/dev/null) || [ -z "$v" ]; then
		echo "$runlib_name: cannot read the version from $1 (run make first)" >&2
		exit 2
	fi
	printf '%s (perfinsp) %s\n' "$runlib_name" "${v#*"(perfinsp) "}"
	exit 0
}

# runlib_signal SIG: a signal reached the script. Before the command
# runs, the script undoes its set-up (runlib_abort, defined by the
# script) and exits; while it runs, the signal is passed on to it
# (runlib_wait); after, it is remembered for the exit code.
runlib_signal() {
	[ -n "$caught" ] || caught=$1
	woke=1
	if [ "$runlib_phase" = setup ]; then
		runlib_phase=aborting
		echo "$runlib_name: interrupted by SIG$1 before the command ran: nothing was traced" >&2
		runlib_abort
		exit $((128 + $(kill -l "$1")))
	fi
}

# runlib_start CMD ARGS: start the command in the background with the
# caller's stdin, signal dispositions and environment; its pid in $child.
# With RUNLIB_PREFIX set (an array), that runs first and execs the command.
# With RUNLIB_FD9 set (a path), it is opened for reading as the command's fd
# 9, and the fd numbered RUNLIB_CLOSE is closed in it.
runlib_start() {
	# $_ as a shell sets it for the command: its path (not env's).
	local env=("${runlib_default[@]}" "_=$(type -P "$1" || printf '%s' "$1")")
	if [ -n "${RUNLIB_FD9:-}" ]; then
		"${env[@]}" "${RUNLIB_PREFIX[@]}" "$@" <&"$runlib_stdin" {runlib_stdin}<&- 9<"$RUNLIB_FD9" {RUNLIB_CLOSE}>&- &
	else
		"${env[@]}" "${RUNLIB_PREFIX[@]}" "$@" <&"$runlib_stdin" {runlib_stdin}<&- &
	fi
	child=$!
	runlib_phase=run
}

# runlib_running PID: PID exists and is not a zombie.
runlib_running() {
	local line st
	read -r line 2>/dev/null </proc/"$1"/stat || return 1
	st=${line##*) }
	[ "${st%% *}" != Z ]
}

# runlib_wait: wait for $child; its exit status in $rc (128+N: killed by
# signal N). A signal that reaches the script while it waits is passed on
# to the command, unless the command got it too (a terminal's Ctrl-C or
# timeout signal the whole process group) and ends of it; a second signal
# is passed on at once. runlib_on_signal (the script's, optional) runs
# first: run.itrace detaches there.
runlib_wait() {
	local r r2 i
	while :; do
		woke=
		{ wait "$child"; } 2>/dev/null # no "Killed" line from bash
		r=$?
		if [ -z "$woke" ]; then
			break
		fi
		if [ ! -d /proc/"$child" ]; then
			# Reaped as the signal came: a second wait gives the status
			# bash kept (else r is already it).
			{ wait "$child"; } 2>/dev/null
			r2=$?
			if [ "$r2" -ge 0 ] && [ "$r2" -le 255 ] && [ "$r2" != 127 ]; then
				r=$r2
			fi
			break
		fi
		if declare -F runlib_on_signal >/dev/null; then
			runlib_on_signal
		fi
		if [ -z "$forwarded" ]; then
			forwarded=1
			for i in 1 2 3 4 5 6 7 8 9 10; do
				runlib_running "$child" || break
				sleep 0.05
			done
		fi
		if runlib_running "$child"; then
			kill -s "$caught" "$child" 2>/dev/null
		fi
	done
	rc=$r
	runlib_phase=after
	exec {runlib_stdin}<&-
}

# runlib_keep_old DIR FILE...: a previous run's files become FILE.old.
runlib_keep_old() {
	local dir=$1 f kept=()
	shift
	for f in "$@"; do
		if [ -e "$dir/$f" ] || [ -L "$dir/$f" ]; then
			mv -f "$dir/$f" "$dir/$f.old" && kept+=("$f")
		fi
	done
	if [ ${#kept[@]} -gt 0 ]; then
		echo "$runlib_name: kept the previous ${kept[*]} as .old" >&2
	fi
}

runlib_exit_code() {
	if [ -n "$caught" ] && [ "${rc:-0}" = 0 ]; then
		echo $((128 + $(kill -l "$caught")))
	else
		echo "${rc:-0}"
	fi
}

# The owner file says which run turned the facility on: "PID STARTTIME
# NAME" (the start time tells a reused pid apart). It lives in the
# user's runtime directory.
runlib_owner_file() {
	local d=${XDG_RUNTIME_DIR:-/run}/perfinsp
	mkdir -p -m 700 "$d" 2>/dev/null
	printf '%s/tracer.owner' "$d"
}

# runlib_starttime PID: the process's start time (clock ticks after boot).
runlib_starttime() {
	local line
	read -r line 2>/dev/null </proc/"$1"/stat || return 1
	line=${line##*) }
	set -- $line
	printf '%s' "${20}"
}

runlib_claim() {
	printf '%s %s %s\n' "$$" "$(runlib_starttime $$)" "$runlib_name" >"$(runlib_owner_file)" 2>/dev/null
	runlib_claimed=1
}

runlib_release() {
	local f pid _
	[ -n "${runlib_claimed:-}" ] || return 0
	f=$(runlib_owner_file)
	[ -r "$f" ] && read -r pid _ <"$f" && [ "$pid" = "$$" ] && rm -f "$f"
	runlib_claimed=
}

# runlib_owner: the owner file's "PID NAME" if that process still runs
# (status 0), else its "PID NAME" with status 1 (it died: an orphan), or
# nothing with status 2 (no owner file).
runlib_owner() {
	local f pid st name
	f=$(runlib_owner_file)
	[ -r "$f" ] && read -r pid st name <"$f" || return 2
	printf '%s %s' "$pid" "$name"
	[ -n "$pid" ] && [ "$(runlib_starttime "$pid")" = "$st" ]
}

# runlib_reclaim SW DIR: when the facility holds a trace (on, or not yet
# written) of a run that died without stopping it (kill -9), stop it and
# keep its trace as DIR/swtrace.orphan.nrm2. Status 0 when it did (or had
# nothing to do), 1 when the facility is someone else's and on.
runlib_reclaim() {
	local sw=$1 dir=$2 info state owner rc
	info=$("$sw" info 2>/dev/null)
	state=$(sed -n 's/.*state: \([a-z]*\).*/\1/p' <<<"$info")
	owner=$(runlib_owner)
	rc=$?
	if [ -z "$state" ] || [ "$state" = free ]; then
		[ "$rc" = 1 ] && rm -f "$(runlib_owner_file)" # nothing left of a dead run
		return 0
	fi
	if [ "$rc" = 1 ]; then
		echo "$runlib_name: the trace facility was left ${state} by ${owner#* } (pid ${owner%% *}), which died without stopping it: reclaiming it; its trace is kept as $dir/swtrace.orphan.nrm2" >&2
		"$sw" off >/dev/null 2>&1
		if ! "$sw" get "$dir/swtrace.orphan.nrm2" >/dev/null 2>&1; then
			echo "$runlib_name: the orphaned trace could not be written (it is dropped)" >&2
		fi
		rm -f "$(runlib_owner_file)"
		return 0
	fi
	if [ "$state" = on ]; then
		if [ "$rc" = 0 ]; then
			echo "$runlib_name: the trace facility is busy: ${owner#* } (pid ${owner%% *}) is tracing; wait for it, or stop it" >&2
		else
			echo "$runlib_name: the trace facility is busy (tracing is on): wait for the other user, or run swtrace off" >&2
		fi
		return 1
	fi
	return 0
}
