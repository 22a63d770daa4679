#!/bin/bash
# perftest_interop.sh - roced's perftest commands against the real perftest
# tools on the lab's Linux rxe guest (lab/), in both directions.
#
# Usage: perftest_interop.sh [CASES_FILE]
#
# The guest must be up (rxe-peer.sh up) with the RXE_PEER_* variables of
# the instance to use exported: this script reads RXE_PEER_NETNS,
# RXE_PEER_HOST_ADDR and RXE_PEER_GUEST_ADDR to know where roced runs and
# whom it talks to, and calls rxe-peer.sh, which reads the rest. Example
# (one engineer's own instance of the bookworm guest):
#
#   export RXE_PEER_STATE=/tmp/rxe-pt RXE_PEER_NETNS=rxept RXE_PEER_TAP=rxetap3 \
#          RXE_PEER_HOST_ADDR=198.18.13.1/24 RXE_PEER_GUEST_ADDR=198.18.13.2/24 \
#          RXE_PEER_GUEST_MAC=52:54:00:52:78:13 RXE_PEER_SMP=1
#   rxe-peer.sh up
#   go build -o /tmp/roced ./cmd/roced
#   ROCED=/tmp/roced interop/lab/perftest_interop.sh
#
# Each case of the case file (perftest_interop.cases) runs once per
# direction:
#   roced-client  the real tool serves in the guest (ib_TEST -d rxe0 -x 1),
#                 roced connects from the tap's namespace (roced TEST -x 1)
#   roced-server  roced serves in the namespace, the real tool connects
# Both sides get the same flags: -x 1 -F -n $ITERS -p PORT -c CONN -s SIZE.
#
# Environment:
#   ROCED         roced binary (required)
#   RXE_PEER_DIR  the lab directory (default: lab/ in the repository)
#   DIRS          directions to run (default "roced-client roced-server")
#   FILTER        extended regex; only cases whose "TEST CONN SIZE EXTRA"
#                 line matches run
#   ITERS         -n (default 20: TCG is slow)
#   TIMEOUT       seconds each side may take (default 180)
#   PORT          first TCP port; case N uses PORT+N (default 18600)
#   CLAIM         roced's --perftest_version (default: roced's own, 6.29)
#   PCAP          1: roced writes each case's frames to a pcapng in OUT
#   TAP_QLEN      transmit queue length set on the lab's tap before the run
#                 (default 10000; empty: leave it). UC has no retransmission,
#                 and a burst of 64-packet messages (1280 packets for 20 of
#                 64 KiB) overflows the tap's default 1000-packet queue,
#                 which the TCG guest drains slowly: 633 of 1280 packets
#                 dropped on the host side of the tap in one run, and the
#                 real ib_send_bw server then waits forever for the
#                 messages it lost. A HCA's ring would absorb the burst.
#   OUT           directory for the logs and matrix.md (default ./perftest-interop.SUITE.TIME)
#
# Output: one line per case on stdout (PASS/FAIL, the measuring side's
# result row), the logs of both sides per case in OUT, and OUT/matrix.md,
# a table of every case. Exit status 0 when every case passed.
set -u
set -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB=${RXE_PEER_DIR:-$(cd "$HERE/../.." && pwd)/lab}
RXE="$LAB/rxe-peer.sh"
CASES=${1:-$HERE/perftest_interop.cases}
DIRS=${DIRS:-"roced-client roced-server"}
FILTER=${FILTER:-}
ITERS=${ITERS:-20}
TIMEOUT=${TIMEOUT:-180}
PORT=${PORT:-18600}
CLAIM=${CLAIM:-}
PCAP=${PCAP:-}
TAP_QLEN=${TAP_QLEN-10000}

die() { echo "perftest_interop: $*" >&2; exit 2; }
[ -n "${ROCED:-}" ] && [ -x "$ROCED" ] || die "set ROCED to a roced binary (go build -o /tmp/roced ./cmd/roced)"
[ -x "$RXE" ] || die "no lab at $LAB (set RXE_PEER_DIR)"
[ -f "$CASES" ] || die "no case file $CASES"
HOST=${RXE_PEER_HOST_ADDR:-192.0.2.1/24}; HOST=${HOST%/*}
GUEST=${RXE_PEER_GUEST_ADDR:-192.0.2.2/24}; GUEST=${GUEST%/*}
status=$("$RXE" status 2>/dev/null) || die "the lab guest is not up (rxe-peer.sh up)"
SUITE=$(sed -n 's/^guest_os=//p' <<<"$status" | head -n 1)
OUT=${OUT:-./perftest-interop.${SUITE:-guest}.$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" || die "cannot create $OUT"
if [ -n "$TAP_QLEN" ]; then
    "$RXE" host-exec ip link set "${RXE_PEER_TAP:-rxetap0}" txqueuelen "$TAP_QLEN" || die "cannot set the tap's queue length"
fi
VERSION=$("$RXE" exec 'ib_write_bw -V' 2>/dev/null | sed -n 's/^Version: //p')
echo "perftest_interop: guest $SUITE (perftest $VERSION), roced $ROCED, logs in $OUT" >&2

# guest_run CMD: run a shell command in the guest, stdout/stderr as is.
guest_run() { "$RXE" exec "$1"; }
# in_ns CMD...: run a host command in the tap's namespace.
in_ns() { "$RXE" host-exec "$@"; }

# row FILE: the result row(s) of a perftest output (the lines after a
# "#bytes" header that start with a number).
row() { awk '/#bytes/ {h=1; next} h && /^ [0-9]+ / {print} /^-+$/ {h=0}' "$1" | head -n 1 | tr -s ' \t' ' '; }

# check_row FILE SIZE ITERS: the row names SIZE bytes and ITERS
# iterations (ITERS "any": some).
check_row() {
    local r; r=$(row "$1")
    [ -n "$r" ] || return 1
    # shellcheck disable=SC2086
    set -- $r "$2" "$3"
    local want_iters=${@: -1} want_size=${@: -2:1}
    [ "$1" = "$want_size" ] && { [ "$want_iters" = any ] && [ "$2" -gt 0 ] || [ "$2" = "$want_iters" ]; }
}

# rows FILE: how many result rows an output has.
nrows() { awk '/#bytes/ {h=1; next} h && /^ [0-9]+ / {n++} /^-+$/ {h=0} END {print n+0}' "$1"; }

n=0; failed=0; passed=0
printf '| test | conn | size | flags | direction | result | roced row | %s row |\n|---|---|---|---|---|---|---|---|\n' \
    "ib_* $VERSION" > "$OUT/matrix.md"

while read -r test conn size expect extra; do
    case "$test" in ''|'#'*) continue;; esac
    line="$test $conn $size ${extra:-}"
    if [ -n "$FILTER" ] && ! grep -Eq -- "$FILTER" <<<"$line"; then continue; fi
    # EXPECT[*QPS][@VERSION]: rows count ITERS*QPS messages; the case
    # needs perftest VERSION or later.
    since=${expect#*@}; [ "$since" = "$expect" ] && since=0; expect=${expect%@*}
    mult=${expect#*\*}; [ "$mult" = "$expect" ] && mult=1; expect=${expect%%\**}
    if awk -v v="$VERSION" -v s="$since" 'BEGIN { exit !(v + 0 < s + 0) }'; then
        echo "SKIP $line (needs perftest $since)"; continue
    fi
    flags="-x 1 -F -n $ITERS -c $conn"
    [ "$size" != - ] && flags="$flags -s $size"
    [ -n "${extra:-}" ] && flags="$flags $extra"
    shown=$size; [ "$size" = - ] && { case "$test" in atomic_*) shown=8;; *) shown=default;; esac; }
    for dir in $DIRS; do
        n=$((n + 1)); port=$((PORT + n))
        name=$(printf '%03d-%s-%s-%s-%s' "$n" "$test" "$conn" "$shown" "$dir")
        [ -n "${extra:-}" ] && name="$name-$(tr -c 'A-Za-z0-9_\n' _ <<<"$extra" | tr -d '\n')"
        log="$OUT/$name"
        rflags="$flags -p $port"
        [ -n "$CLAIM" ] && rflags="$rflags --perftest_version $CLAIM"
        [ "$PCAP" = 1 ] && rflags="$rflags --pcap $log.pcapng"
        gflags="-d rxe0 $flags -p $port"
        guest_run "rm -f /tmp/pti.out /tmp/pti.rc" >/dev/null 2>&1
        if [ "$dir" = roced-client ]; then
            # The real server in the guest, under timeout (so it always
            # ends); its exit status lands in a file.
            guest_run "nohup sh -c 'timeout $TIMEOUT ib_$test $gflags > /tmp/pti.out 2>&1; echo \$? > /tmp/pti.rc' >/dev/null 2>&1 &
                       for i in \$(seq 150); do ss -ltn | grep -q ':$port ' && exit 0; sleep 0.2; done; exit 1" \
                || echo "ib_$test did not listen" > "$log.setup"
            # shellcheck disable=SC2086
            in_ns timeout "$TIMEOUT" "$ROCED" "$test" $rflags "$GUEST" > "$log.roced.out" 2> "$log.roced.err"
            rrc=$?
            prc=$(guest_run "for i in \$(seq $((TIMEOUT * 5 + 50))); do [ -s /tmp/pti.rc ] && break; sleep 0.2; done; cat /tmp/pti.rc" 2>/dev/null)
            guest_run "cat /tmp/pti.out" > "$log.peer.out" 2>/dev/null
        else
            # roced serves in the namespace; the real client connects.
            # shellcheck disable=SC2086
            in_ns timeout "$TIMEOUT" "$ROCED" "$test" $rflags > "$log.roced.out" 2> "$log.roced.err" &
            rpid=$!
            for _ in $(seq 150); do in_ns ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.1; done
            guest_run "timeout $TIMEOUT ib_$test $gflags $HOST > /tmp/pti.out 2>&1; echo \$? > /tmp/pti.rc" >/dev/null 2>&1
            guest_run "cat /tmp/pti.out" > "$log.peer.out" 2>/dev/null
            prc=$(guest_run "cat /tmp/pti.rc" 2>/dev/null)
            wait "$rpid"; rrc=$?
        fi
        # Judge.
        result=PASS; why=""
        case "$expect" in
        pass|duration|all)
            [ "$rrc" = 0 ] || { result=FAIL; why="roced exit $rrc"; }
            [ "$prc" = 0 ] || { result=FAIL; why="${why:+$why, }ib_$test exit $prc"; }
            # Every side prints a row but the read/atomic latency servers.
            for side in roced peer; do
                role=client
                case "$side/$dir" in roced/roced-server|peer/roced-client) role=server;; esac
                if [ "$role" = server ] && { [ "$test" = read_lat ] || [ "$test" = atomic_lat ]; }; then continue; fi
                case "$expect" in
                pass) check_row "$log.$side.out" "$shown" $((ITERS * mult)) ;;
                duration) check_row "$log.$side.out" "$shown" any ;;
                all) check_row "$log.$side.out" 2 "$ITERS" && [ "$(nrows "$log.$side.out")" -ge 10 ] ;;
                esac || { result=FAIL; why="${why:+$why, }$side row missing or wrong"; }
            done;;
        udsize)
            [ "$rrc" != 0 ] && [ "$prc" != 0 ] || { result=FAIL; why="exit statuses $rrc/$prc, want both non-zero"; }
            grep -q "Max message size in UD cannot be greater than MTU" "$log.roced.err" \
                || { result=FAIL; why="${why:+$why, }roced did not refuse the size"; }
            grep -q "Max message size in UD cannot be greater than MTU" "$log.peer.out" \
                || { result=FAIL; why="${why:+$why, }ib_$test did not refuse the size"; };;
        *) result=FAIL; why="unknown expectation $expect";;
        esac
        if [ "$result" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
        rrow=$(row "$log.roced.out"); prow=$(row "$log.peer.out")
        printf '%-4s %-10s %-2s %-5s %-12s %s %s%s\n' "$result" "$test" "$conn" "$shown" "$dir" "${extra:-}" \
            "${why:+($why) }" "roced:[${rrow:-none}] peer:[${prow:-none}]"
        printf '| %s | %s | %s | %s | %s | %s%s | %s | %s |\n' "$test" "$conn" "$shown" "${extra:-}" "$dir" "$result" \
            "${why:+ ($why)}" "${rrow:-}" "${prow:-}" >> "$OUT/matrix.md"
    done
done < "$CASES"

echo "perftest_interop: $passed passed, $failed failed ($SUITE, perftest $VERSION); matrix in $OUT/matrix.md" >&2
[ "$failed" = 0 ]
