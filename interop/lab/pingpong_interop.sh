#!/usr/bin/env bash
# pingpong_interop.sh: roced's rc/uc/ud/srq_pingpong against rdma-core's
# ibv_*_pingpong on Linux rxe, both directions, in the rxe lab (lab/,
# or LAB / RXE_PEER_DIR for another).
#
# Usage (root):
#   interop/lab/pingpong_interop.sh [bookworm|trixie] [CASE...]
#
# CASE is TOOL/DIR/SIZE, e.g. rc/srv/1024 (roced server, real client) or
# ud/cli/1 (real server, roced client); the default is the whole matrix:
# rc, uc, srq at 1, 1024, 1025 and 65536 bytes and ud at 1 and 1024 (its
# limit: rxe's active MTU on the lab's 1500-byte link is 1024), each with
# -c, in both directions. One line per case goes to stdout (and to
# $OUT/results.txt):
#   SUITE TOOL DIRECTION SIZE PASS|FAIL FIGURE
# where FIGURE is the client's "usec/iter"; each case's outputs are kept in
# $OUT/SUITE-TOOL-DIR-SIZE.{srv,cli}. The exit status is the number of
# failed cases (0: all passed).
#
# Environment:
#   ROCED   roced binary (default: built from this tree into $OUT/roced)
#   ITERS   -n for every case (default 20; the guest runs under TCG)
#   OUT     where logs go (default /tmp/pingpong-interop)
#   KEEP=1  leave the VM running afterwards
#   EXTRA   more flags for both sides, e.g. EXTRA=-e
#
# Each case is exactly these commands (rc, 1024 bytes shown):
#   roced server, real client:
#     ip netns exec $NETNS roced rc_pingpong -g 1 -d $HOST_IP -n 20 -s 1024 -c -p PORT
#     rxe-peer.sh exec 'ibv_rc_pingpong -d rxe0 -g 1 -n 20 -s 1024 -c -p PORT $HOST_IP'
#   real server, roced client:
#     rxe-peer.sh exec 'ibv_rc_pingpong -d rxe0 -g 1 -n 20 -s 1024 -c -p PORT' (in the background)
#     ip netns exec $NETNS roced rc_pingpong -g 1 -n 20 -s 1024 -c -p PORT $GUEST_IP
# A case passes when both sides exit 0 and print SIZE*ITERS*2 bytes, and
# the server's -c check reports no page.
set -u

SUITE=${1:-bookworm}
[ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
LAB=${LAB:-${RXE_PEER_DIR:-$repo/lab}}
ITERS=${ITERS:-20}
OUT=${OUT:-/tmp/pingpong-interop}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"

# One lab instance of our own, as the lab's README asks of parallel users.
case $SUITE in
bookworm)
	export RXE_PEER_STATE=/tmp/rxe-pp RXE_PEER_NETNS=rxepp RXE_PEER_TAP=rxetap1 \
		RXE_PEER_HOST_ADDR=198.18.11.1/24 RXE_PEER_GUEST_ADDR=198.18.11.2/24 \
		RXE_PEER_GUEST_MAC=52:54:00:52:78:11 RXE_PEER_SMP=1
	;;
trixie)
	export RXE_PEER_SUITE=trixie RXE_PEER_STATE=/tmp/rxe-pp-trixie RXE_PEER_NETNS=rxepp2 RXE_PEER_TAP=rxetap2 \
		RXE_PEER_HOST_ADDR=198.18.12.1/24 RXE_PEER_GUEST_ADDR=198.18.12.2/24 \
		RXE_PEER_GUEST_MAC=52:54:00:52:78:12 RXE_PEER_SMP=1
	;;
*)
	echo "usage: $0 [bookworm|trixie] [TOOL/srv|cli/SIZE...]" >&2
	exit 2
	;;
esac
NETNS=$RXE_PEER_NETNS
HOST_IP=${RXE_PEER_HOST_ADDR%/*}
GUEST_IP=${RXE_PEER_GUEST_ADDR%/*}
peer() { "$LAB/rxe-peer.sh" "$@"; }

if [ -z "${ROCED:-}" ]; then
	ROCED=$OUT/roced
	(cd "$repo" && go build -o "$ROCED" ./cmd/roced) || exit 2
fi
# One run at a time per lab instance: two runs would share the guest's
# rxe0 and mix their QPs.
exec 9>"$RXE_PEER_STATE.pingpong-interop.lock"
flock -w 1200 9 || { echo "another run holds $RXE_PEER_STATE.pingpong-interop.lock" >&2; exit 2; }
peer up >/dev/null || exit 2
[ "${KEEP:-}" = 1 ] || trap 'peer down >/dev/null' EXIT

cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
	for tool in rc uc ud srq; do
		sizes="1 1024 1025 65536"
		[ $tool = ud ] && sizes="1 1024"
		for size in $sizes; do
			for dir in srv cli; do cases+=("$tool/$dir/$size"); done
		done
	done
fi

port=18600
# host_listening PORT: roced's server has its TCP port open.
host_listening() { ip netns exec "$NETNS" ss -Hltn "sport = :$1" | grep -q .; }
# wait_for WHAT CMD...: poll CMD for up to 60 s.
wait_for() {
	local what=$1 i
	shift
	for i in $(seq 600); do "$@" && return 0; sleep 0.1; done
	echo "timed out waiting for $what" >&2
	return 1
}
# check FILE: exit status 0 (last line "exit=0"), the byte count, no -c finding.
check() {
	grep -q '^exit=0$' "$1" && grep -q "^$((size * ITERS * 2)) bytes in " "$1" && ! grep -q '^invalid data' "$1"
}

fails=0
: >"$OUT/results.txt"
for c in "${cases[@]}"; do
	IFS=/ read -r tool dir size <<<"$c"
	port=$((port + 1))
	flags="-g 1 -n $ITERS -s $size -c -p $port $EXTRA"
	log=$OUT/$SUITE-$tool-$dir-$size
	rm -f "$log.srv" "$log.cli"
	if [ "$dir" = srv ]; then
		# roced serves on the tap's address; the real client connects to it.
		( ip netns exec "$NETNS" timeout 300 "$ROCED" ${tool}_pingpong -d "$HOST_IP" $flags >"$log.srv" 2>&1
		  echo "exit=$?" >>"$log.srv" ) &
		wait_for "roced's server" host_listening $port
		peer exec "timeout 300 ibv_${tool}_pingpong -d rxe0 $flags $HOST_IP; echo exit=\$?" >"$log.cli" 2>&1
		wait
	else
		g=/tmp/pp-$port # the real server's output in the guest, complete once renamed to $g.srv
		peer exec "rm -f $g.srv; nohup sh -c 'timeout 300 ibv_${tool}_pingpong -d rxe0 $flags >$g.log 2>&1; echo exit=\$? >>$g.log; mv $g.log $g.srv' >/dev/null 2>&1 &"
		wait_for "ibv_${tool}_pingpong's server" peer exec "ss -Hltn 'sport = :$port' | grep -q ." 2>/dev/null
		ip netns exec "$NETNS" timeout 300 "$ROCED" ${tool}_pingpong $flags "$GUEST_IP" >"$log.cli" 2>&1
		echo "exit=$?" >>"$log.cli"
		wait_for "the real server's exit" peer exec "test -f $g.srv"
		peer exec "cat $g.srv" >"$log.srv" 2>&1
	fi
	result=PASS
	check "$log.srv" && check "$log.cli" || { result=FAIL; fails=$((fails + 1)); }
	figure=$(grep -o '[0-9.]* usec/iter' "$log.cli" | head -1)
	printf '%-8s %-4s %-18s %6s %s %s\n' "$SUITE" "$tool" \
		"$([ "$dir" = srv ] && echo roced-srv/real-cli || echo real-srv/roced-cli)" "$size" "$result" "${figure:--}" |
		tee -a "$OUT/results.txt"
done
exit $fails
