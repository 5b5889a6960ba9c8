# common.sh — shell functions shared by the launch rehearsals (examples/launch/netns.sh,
# tests/multihost/slurm.sh): bounded waits and stopping what they started by PID. Source it; it runs nothing.

# xdc_wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.1 s until it succeeds; after SECONDS,
# say what was waited for and return 75 (EX_TEMPFAIL).
xdc_wait_for() {
    local secs=$1 what=$2
    shift 2
    local i
    for ((i = 0; i < secs * 10; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "gave up after ${secs} s waiting for $what" >&2
    return 75
}

# xdc_log_has FILE PATTERN: the file exists and has a line matching the extended regex.
xdc_log_has() { [ -f "$1" ] && grep -Eq -- "$2" "$1"; }

# xdc_wait_started SECONDS PID LOG PATTERN WHAT: wait until LOG (the output of our child PID) has a line
# matching PATTERN. When PID ends first, say so and return its status (70 when it was 0); 75 after SECONDS.
xdc_wait_started() {
    local secs=$1 pid=$2 log=$3 pat=$4 what=$5 i st
    for ((i = 0; i < secs * 10; i++)); do
        xdc_log_has "$log" "$pat" && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            st=0
            wait "$pid" || st=$?
            echo "$what exited with status $st before it was ready (its output: $log)" >&2
            return $((st ? st : 70))
        fi
        sleep 0.1
    done
    echo "gave up after ${secs} s waiting for $what" >&2
    return 75
}

# xdc_stop_pids PID...: SIGTERM each live process, wait up to 10 s for all of them to go, then SIGKILL the
# rest. Only the given PIDs (the caller's own children) are touched.
xdc_stop_pids() {
    local p live i
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    for ((i = 0; i < 100; i++)); do
        live=
        for p in "$@"; do kill -0 "$p" 2>/dev/null && live=1; done
        [ -z "$live" ] && break
        sleep 0.1
    done
    for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# xdc_final_hash FILE: the params_xxh64 of the run summary's `final ...` line in FILE ("" when none).
xdc_final_hash() { sed -n 's/^final .*params_xxh64=\([0-9a-f]*\).*/\1/p' "$1" | tail -n 1; }
