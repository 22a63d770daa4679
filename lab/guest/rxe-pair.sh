#!/bin/bash
# Two rxe devices in the guest that talk over a real link: rxeA on vethA
# (198.51.100.1) and rxeB on vethB (198.51.100.2). The harness runs this
# in the guest (Lab.Pair: interop -peer lab-pair, the guest benchmarks),
# reading it from the lab's guest/ directory. Safe to run again.
#
# Both ends stay in the initial namespace: rdma_rxe (6.1 and 6.12) opens
# its UDP socket and routes in init_net only, so rxe on a veth moved to
# another namespace never sends. Two local addresses would talk over lo;
# policy routing sends each one's traffic to the other out of its veth:
#   - the local table moves behind rules for locally sent packets (iif lo)
#     to the other address, which use a table routing it out of the veth;
#   - packets arriving on a veth still meet the local table: delivered;
#   - rdma_cm checks an incoming request with a route lookup whose output
#     device is the receiving veth and that has no input device; the
#     "oif" rules make that lookup agree (without them the passive side
#     rejects the CM REQ, reason 28).
set -e
A=198.51.100.1 B=198.51.100.2
ip link show vethA >/dev/null 2>&1 || ip link add vethA type veth peer name vethB
for d in vethA vethB; do
    sysctl -qw net.ipv6.conf.$d.disable_ipv6=1
    ip link set $d up
done
ip addr replace $A/32 dev vethA
ip addr replace $B/32 dev vethB
ip route replace $B dev vethA src $A table 101
ip route replace $A dev vethB src $B table 102

rule() { # rule PREF SELECTOR...: add the rule unless one has that preference
    local pref=$1
    shift
    ip rule show pref "$pref" | grep -q . || ip rule add pref "$pref" "$@"
}
rule 100 iif lo to $B lookup 101
rule 101 iif lo to $A lookup 102
rule 102 oif vethB to $A lookup 102
rule 103 oif vethA to $B lookup 101
rule 1000 lookup local
ip rule show pref 0 | grep -q 'lookup local' && ip rule del pref 0 lookup local

# Each side receives packets from an address that is also its own.
for d in all vethA vethB; do
    sysctl -qw net.ipv4.conf.$d.accept_local=1 net.ipv4.conf.$d.rp_filter=0
done
ip neigh replace $B lladdr "$(cat /sys/class/net/vethB/address)" dev vethA nud permanent
ip neigh replace $A lladdr "$(cat /sys/class/net/vethA/address)" dev vethB nud permanent

[ -e /sys/class/infiniband/rxeA ] || rdma link add rxeA type rxe netdev vethA
[ -e /sys/class/infiniband/rxeB ] || rdma link add rxeB type rxe netdev vethB
for d in rxeA rxeB; do
    echo "$d $(cat /sys/class/infiniband/$d/ports/1/gids/1) $(cat /sys/class/infiniband/$d/ports/1/gid_attrs/types/1)"
done
