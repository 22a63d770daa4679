#!/usr/bin/env bash
# lab/cc-bottleneck.sh: DCQCN through a real ECN-marking queue. Two goroce
# flows (roced write_bw, 64 KiB WRITEs) cross one bottleneck: a kernel RED
# qdisc with ECN (tc red ... ecn under an htb rate limit) on the lab
# guest's eth0, which this host's kernel lacks (docs/congestion.md). The
# senders and receivers live in two network namespaces of their own,
# joined to the lab's namespace by veths; there the senders' packets are
# routed to the guest, which forwards them back out of the qdisc to the
# receivers (the acknowledgements and CNPs come back directly). tcpdump
# captures the packets on their way into the guest and out of it, and
# `go run ./cmd/bottleneck -in -out` reads both captures into each flow's
# rate over time, Jain's index while both run, the queue (each packet's
# time in the bottleneck) and the marks, drops and CNPs, and draws the
# plot.
#
# Usage: lab/cc-bottleneck.sh [-o DIR] [-rate MBIT] [-seconds N]
#                             [-stagger N] [-cc SETTINGS] [-check]
#   -o DIR        outputs: in.pcap, out.pcap, flow-N.txt, summary.txt,
#                 plot.svg (default bin/cc-bottleneck)
#   -rate MBIT    the bottleneck (default 40; the emulated guest forwards
#                 about 280 Mb/s here)
#   -seconds N    how long both flows run together (default 8)
#   -stagger N    the second flow starts N seconds after the first (2)
#   -cc SETTINGS  GOROCE_CC for both sides (default: mlx5's parameters
#                 scaled to the lab, see below)
#   -check        exit 1 unless both flows finish, Jain's index while
#                 both run is 0.9 or more, the qdisc marked packets and
#                 dropped none, each sender got CNPs, and the median
#                 packet met a queue no longer than Kmax (without it, the
#                 exit status says only whether the flows and rxe's part
#                 finished)
#
# Then rxe beside it: the guest's ibv_rc_pingpong on rxe0 sends 100 x 64
# KiB to roced's and back; roced marks what it receives CE (a fault rule) and so sends
# rxe0 CNPs, which rxe does not act on: the exchange must complete, rxe0's
# failure counters stay still, and the capture hold the CNPs (rxe.txt).
#
# The lab must be up (lab/rxe-peer.sh up) and bin/roced built (make
# build). Needs root. The lab's guest keeps working as an rxe peer: the
# qdisc classifies only UDP 4791 to the receivers' addresses, and
# everything this sets up is removed at the end.
#
# Why not mlx5's defaults: they are made for 25-100 Gb/s ports and queues
# that drain in microseconds (rp_time_reset 300 us, rp_byte_reset 32 KB,
# rp_ai_rate 5 Mb/s); this bottleneck is 40 Mb/s, where Kmax (60 KB)
# takes 12 ms to drain, and a mark reaches the sender only once the
# marked packet has crossed the queue. The default settings scale the
# times by about a thousand (the increase timer 10 ms, alpha's period and
# the reduction and CNP intervals 1 ms), the byte counter to 300 KB and
# the steps to 1-2 Mb/s, and give each sender a 60 Mb/s port
# (rp_max_rate: a software sender's wire is the host's). With mlx5's
# increase timer and byte counter the rates climb back faster than the
# marks can say so, and the median packet meets a queue past Kmax.
set -u
set -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
die() { echo "cc-bottleneck: $*" >&2; exit 1; }
usage_err() { echo "cc-bottleneck: $* (see the head of $0)" >&2; exit 2; }

out=$repo/bin/cc-bottleneck rate=40 seconds=8 stagger=2 check=0
cc="rp_max_rate=60,rp_ai_rate=1,rp_hai_rate=2,rp_time_reset=10000,rp_byte_reset=300000,rp_dce_tcp_rtt=1000,rp_rate_reduce_monitor_period=1000,np_min_time_between_cnps=1000"
while [ $# -gt 0 ]; do
    case "$1" in
        -o) [ $# -ge 2 ] || usage_err "-o needs a directory"; out=$2; shift 2 ;;
        -rate) [ $# -ge 2 ] || usage_err "-rate needs Mb/s"; rate=$2; shift 2 ;;
        -seconds) [ $# -ge 2 ] || usage_err "-seconds needs a number"; seconds=$2; shift 2 ;;
        -stagger) [ $# -ge 2 ] || usage_err "-stagger needs a number"; stagger=$2; shift 2 ;;
        -cc) [ $# -ge 2 ] || usage_err "-cc needs settings"; cc=$2; shift 2 ;;
        -check) check=1; shift ;;
        -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) usage_err "unknown argument '$1'" ;;
    esac
done
for v in rate seconds stagger; do
    case "${!v}" in '' | *[!0-9]*) usage_err "-$v ${!v}: want a whole number" ;; esac
done
[ "$rate" -ge 1 ] && [ "$seconds" -ge 2 ] || usage_err "-rate 1 or more, -seconds 2 or more"
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, the lab)"
ROCED=${ROCED:-$repo/bin/roced}
[ -x "$ROCED" ] || die "$ROCED missing: run make build"
command -v tcpdump >/dev/null || die "tcpdump missing: make deps"
lab="${RXE_PEER_DIR:-$here}/rxe-peer.sh"
st=$("$lab" status 2>/dev/null) # not piped to grep -q: with pipefail its early exit fails the pipe
case "$st" in *state=ready*) ;; *) die "the lab is not up: lab/rxe-peer.sh up" ;; esac
NETNS=${RXE_PEER_NETNS-rxepeer}
TAP=${RXE_PEER_TAP:-rxetap0}
guest=${RXE_PEER_GUEST_ADDR:-192.0.2.2/24}
guest=${guest%/*}
host=${RXE_PEER_HOST_ADDR:-192.0.2.1/24}
host=${host%/*}
[ -n "$NETNS" ] || die "RXE_PEER_NETNS is empty: the lab's tap must be in a namespace of its own"
lns() { ip netns exec "$NETNS" "$@"; }

S=goroce-ccs R=goroce-ccr
snd=(10.77.1.2 10.77.1.3) rcv=(10.77.2.2 10.77.2.3)
kmin=10000 kmax=60000 limit=1000000
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    ip netns del $S 2>/dev/null
    ip netns del $R 2>/dev/null
    lns ip rule del iif ccs1 lookup 77 pref 100 2>/dev/null
    lns ip route flush table 77 2>/dev/null
    "$lab" exec "tc qdisc del dev eth0 root 2>/dev/null; ip route del 10.77.0.0/16 2>/dev/null; sysctl -qw net.ipv4.ip_forward=0" >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup
mkdir -p "$out" || die "cannot create $out"
rm -f "$out"/in.pcap "$out"/out.pcap "$out"/flow-*.txt "$out"/summary.txt "$out"/plot.svg

# The namespaces: senders behind ccs1, receivers behind ccr1, both in the
# lab's namespace, where what comes from the senders goes to the guest.
set -e
ip netns add $S
ip netns add $R
ip link add ccs0 netns $S type veth peer name ccs1 netns "$NETNS"
ip link add ccr0 netns $R type veth peer name ccr1 netns "$NETNS"
for i in 0 1; do
    ip -n $S addr add "${snd[$i]}/24" dev ccs0
    ip -n $R addr add "${rcv[$i]}/24" dev ccr0
done
for ns in $S $R; do ip -n $ns link set lo up; done
ip -n $S link set ccs0 up
# The senders' UDP GSO runs are cut into datagrams as they leave ccs0,
# not at the tap: a capture on ccs1 sees each packet (time and PSN), not
# one 64 KiB run.
ip netns exec $S ethtool -K ccs0 tx-udp-segmentation off >/dev/null
ip -n $R link set ccr0 up
ip -n $S route add default via 10.77.1.1
ip -n $R route add default via 10.77.2.1
lns ip addr add 10.77.1.1/24 dev ccs1
lns ip addr add 10.77.2.1/24 dev ccr1
lns ip link set ccs1 up
lns ip link set ccr1 up
lns sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
    "net.ipv4.conf.$TAP.rp_filter=0" net.ipv4.conf.all.send_redirects=0 "net.ipv4.conf.$TAP.send_redirects=0"
lns ip rule add iif ccs1 lookup 77 pref 100
lns ip route add 10.77.2.0/24 via "$guest" dev "$TAP" table 77
set +e
# The guest forwards them back out of eth0 through the bottleneck: htb
# holds UDP 4791 to the receivers to the rate, RED marks it (ECN) from
# kmin bytes queued, every packet from kmax, and drops past limit.
"$lab" exec "set -e
sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.eth0.send_redirects=0 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.eth0.rp_filter=0
ip route replace 10.77.0.0/16 via $host
tc qdisc replace dev eth0 root handle 1: htb default 20
tc class add dev eth0 parent 1: classid 1:10 htb rate ${rate}mbit ceil ${rate}mbit burst 3000 cburst 3000
tc class add dev eth0 parent 1: classid 1:20 htb rate 1000mbit
tc filter add dev eth0 parent 1: protocol ip u32 match ip dst 10.77.2.0/24 match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:10
tc qdisc add dev eth0 parent 1:10 handle 10: red limit $limit min $kmin max $kmax avpkt 1100 burst 12 probability 0.1 bandwidth ${rate}mbit ecn" \
    >"$out/guest-setup.txt" 2>&1 || { cat "$out/guest-setup.txt" >&2; die "the guest's bottleneck could not be set up"; }

# Capture the requests on their way in (ccs1) and out (ccr1), and the
# CNPs going back (ccs1 sees them leave for the senders). ip netns exec
# becomes tcpdump: $! is tcpdump's pid.
ip netns exec "$NETNS" tcpdump -i ccs1 -s 128 -U -w "$out/in.pcap" udp port 4791 2>"$out/tcpdump-in.txt" &
pids+=($!)
ip netns exec "$NETNS" tcpdump -i ccr1 -s 128 -U -w "$out/out.pcap" udp dst port 4791 2>"$out/tcpdump-out.txt" &
pids+=($!)
for f in in out; do
    for _ in $(seq 100); do grep -q listening "$out/tcpdump-$f.txt" 2>/dev/null && break; sleep 0.1; done
done

export GOROCE_CC="$cc" GOROCE_SERVER_WAIT=20s GOROCE_SHARE=0
runs=()
for i in 0 1; do
    ip netns exec $R "$ROCED" write_bw -p $((18502 + i)) -d "${rcv[$i]}" -s 65536 -D $((seconds + (1 - i) * stagger)) \
        >"$out/server-$i.txt" 2>&1 &
    runs+=($!)
done
ip netns exec $S "$ROCED" write_bw -p 18502 -d "${snd[0]}" -s 65536 -D $((seconds + stagger)) "${rcv[0]}" >"$out/flow-0.txt" 2>&1 &
runs+=($!)
sleep "$stagger"
ip netns exec $S "$ROCED" write_bw -p 18503 -d "${snd[1]}" -s 65536 -D "$seconds" "${rcv[1]}" >"$out/flow-1.txt" 2>&1 &
runs+=($!)
fail=0
for p in "${runs[@]}"; do wait "$p" || fail=1; done
sleep 0.2
for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null; done
wait "${pids[@]}" 2>/dev/null
pids=()
"$lab" exec "tc -s qdisc show dev eth0 parent 1:10" >"$out/qdisc.txt" 2>&1
[ $fail = 0 ] || { tail -n 3 "$out"/flow-*.txt "$out"/server-*.txt >&2; echo "cc-bottleneck: a flow failed" >&2; }

# rxe beside it: goroce's CNPs to a peer that ignores them. The guest's
# ibv_rc_pingpong on rxe0 (64 KiB SENDs: no CPU-clock estimate to fail in
# the emulated guest, as perftest's does now and then) plays against
# roced's, whose fault rule marks each SEND MIDDLE it receives CE, as a
# congested switch would; goroce answers with
# CNPs (mlx5's defaults: at most one per 4 us for the QP), which rxe has
# no use for. The exchange must complete, rxe's failure counters stay
# still, and the tap's capture hold the CNPs sent to rxe0.
# rxe0's failure counters, summed: sequence errors, RNR, retries run out,
# send errors. Not completer_retry_err: rxe's completer retries now and
# then against goroce with or without marks (7 and 8 in two plain runs of
# this exchange), so it is reported (rxe-stats-*.txt), not judged.
rxe_errs() {
    "$lab" exec "rdma statistic show link rxe0/1" 2>/dev/null | tee "$out/rxe-stats-$1.txt" | tr ' ' '\n' |
        awk '/^(rcvd_seq_err|rcvd_rnr_err|send_rnr_err|retry_exceeded_err|retry_rnr_exceeded_err|send_err)$/ { getline v; s += v } END { print s + 0 }'
}
rxe_ok=1
e0=$(rxe_errs before)
ip netns exec "$NETNS" tcpdump -i "$TAP" -s 128 -U -w "$out/rxe.pcap" udp port 4791 2>"$out/tcpdump-rxe.txt" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$out/tcpdump-rxe.txt" 2>/dev/null && break; sleep 0.1; done
ip netns exec "$NETNS" env -u GOROCE_CC "$ROCED" rc_pingpong -d "$host" -g 1 -s 65536 -n 100 \
    --fault-rule "rx opcode=SEND_MIDDLE ecn" >"$out/rxe-roced.txt" 2>&1 &
srv=$!
for _ in $(seq 100); do lns ss -ltn 2>/dev/null | grep -q ':18515 ' && break; sleep 0.1; done
"$lab" exec "ibv_rc_pingpong -d rxe0 -g 1 -s 65536 -n 100 $host" >"$out/rxe-client.txt" 2>&1 || rxe_ok=0
wait "$srv" || rxe_ok=0
sleep 0.2
for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null; done
wait "${pids[@]}" 2>/dev/null
pids=()
e1=$(rxe_errs after)
marked=$(sed -n 's/.*rx_marked_ce=\([0-9]*\).*/\1/p' "$out/rxe-roced.txt" | tail -n 1)
cnps=$(tshark -r "$out/rxe.pcap" -Y "infiniband.bth.opcode == 129 && ip.dst == $guest" 2>/dev/null | wc -l)
grep -q '^100 iters in ' "$out/rxe-client.txt" || rxe_ok=0
if [ $rxe_ok = 1 ] && [ "${marked:-0}" -gt 0 ] && [ "$cnps" -gt 0 ] && [ "$e0" = "$e1" ]; then
    echo "rxe: 100 64 KiB round trips with rxe0 completed; goroce saw ${marked} marked CE and sent rxe0 ${cnps} CNPs; rxe0's failure counters unchanged" >"$out/rxe.txt"
else
    echo "rxe: failed: transfer ok $rxe_ok, marked ${marked:-none}, CNPs to rxe0 $cnps, rxe0's failure counters $e0 -> $e1" >"$out/rxe.txt"
    tail -n 3 "$out/rxe-client.txt" "$out/rxe-roced.txt" >&2
    fail=1
fi

(cd "$repo" && "${GO:-go}" run ./cmd/bottleneck -in "$out/in.pcap" -out "$out/out.pcap" -rate "$rate" -kmin $kmin -kmax $kmax \
    -limit $limit -line 80 -svg "$out/plot.svg") >"$out/summary.txt" 2>&1 || { cat "$out/summary.txt" >&2; exit 1; }
cat "$out/summary.txt" "$out/qdisc.txt" "$out/rxe.txt"
[ $check = 1 ] || exit $fail
# -check: what the proof asks of the run.
# The qdisc's own counts come from its statistics (qdisc.txt): packets
# lost elsewhere between the captures (the emulated guest's receive ring)
# are not the bottleneck's doing, and RC resends them.
awk -v fail=$fail -v kmax=$kmax '
    FILENAME ~ /summary/ && /^Jain/ { jain = $3 }
    FILENAME ~ /summary/ && /^queue/ { for (i = 1; i <= NF; i++) if ($i == "p50") p50 = $(i + 1) }
    FILENAME ~ /summary/ && /CNPs back/ { flows++; for (i = 1; i <= NF; i++) if ($i == "CNPs" && $(i - 1) == 0) nocnp++ }
    FILENAME ~ /qdisc/ && /dropped/ { for (i = 1; i <= NF; i++) if ($i == "(dropped") { d = $(i + 1); sub(",", "", d); dropped = d } }
    FILENAME ~ /qdisc/ && / marked / { for (i = 1; i <= NF; i++) if ($i == "marked") marked = $(i + 1) }
    END {
        bad = ""
        if (fail) bad = bad " a flow, or rxe beside it, failed;"
        if (jain == "" || jain < 0.9) bad = bad " Jain " jain " < 0.9;"
        if (marked == "" || marked == 0) bad = bad " the qdisc marked nothing;"
        if (dropped == "" || dropped > 0) bad = bad " the qdisc dropped " dropped ";"
        if (flows != 2 || nocnp > 0) bad = bad " a sender without CNPs;"
        if (p50 == "" || p50 > kmax) bad = bad " the median packet met " p50 " bytes queued, past Kmax " kmax ";"
        if (bad != "") { print "cc-bottleneck: check failed:" bad > "/dev/stderr"; exit 1 }
        print "cc-bottleneck: check passed: Jain " jain ", queue p50 " p50 " bytes, the qdisc marked " marked " and dropped none"
    }' "$out/summary.txt" "$out/qdisc.txt"
