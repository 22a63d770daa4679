#!/usr/bin/env bash
# lab/rxe-peer.sh: goroce's rxe lab. A small Debian guest (bookworm, kernel
# 6.1, or trixie, kernel 6.12: RXE_PEER_SUITE) runs under qemu with Linux
# Soft-RoCE (rdma_rxe) on its eth0 and the real RDMA tools; a tap device,
# in a network namespace of its own, links it to this host, where roced
# talks to the guest's rxe0. The interop harness (interop/lab.go,
# interop/interop-lab.sh) drives it through the commands below; every
# setting is an RXE_PEER_* variable (see `help`).
#
# The host kernel needs no RDMA support: rxe runs in the guest. Needs
# root, and the host packages `make deps` installs.
set -u
set -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "rxe-lab: $*" >&2; exit 1; }
usage_err() { echo "rxe-lab: $* (see '$0 help')" >&2; exit 2; }
say() { echo "rxe-lab: $*" >&2; }
secs_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

SUITE=${RXE_PEER_SUITE:-bookworm}
case "$SUITE" in
    bookworm | trixie) ;;
    *) usage_err "RXE_PEER_SUITE=$SUITE: the lab knows bookworm and trixie" ;;
esac
# Not /var/cache/rxe-peer*: that is ../shared/rxe-peer's cache, whose image
# carries that lab's own guest programs; each lab keeps its own.
CACHE=${RXE_PEER_CACHE:-/var/cache/goroce-lab-$SUITE}
STATE=${RXE_PEER_STATE:-/tmp/rxe-peer}
NETNS=${RXE_PEER_NETNS-rxepeer} # set and empty: the tap stays in this namespace
TAP=${RXE_PEER_TAP:-rxetap0}
HOST_ADDR=${RXE_PEER_HOST_ADDR:-192.0.2.1/24}
GUEST_ADDR=${RXE_PEER_GUEST_ADDR:-192.0.2.2/24}
GUEST_MAC=${RXE_PEER_GUEST_MAC:-52:54:00:52:78:65}
MTU=${RXE_PEER_MTU:-1500}
ACCEL=${RXE_PEER_ACCEL:-tcg}
SMP=${RXE_PEER_SMP:-2}
MEM=${RXE_PEER_MEM:-1024}
BOOT_TIMEOUT=${RXE_PEER_BOOT_TIMEOUT:-300}
EXEC_TIMEOUT=${RXE_PEER_EXEC_TIMEOUT:-600}
for v in MTU SMP MEM BOOT_TIMEOUT EXEC_TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || usage_err "RXE_PEER_$v=${!v} is not a positive number"
done

SHARE=$STATE/share # the guest's /mnt/host (9p); the harness reads share/pcap
PIDFILE=$STATE/qemu.pid
VM_NAME=goroce-rxe-lab # how vm_pid tells our qemu from any other process

# What the guest holds: rdma-core and its providers (rxe), the example
# programs, perftest, the librdmacm tools, qperf, UCX and libfabric's
# tools, pyverbs (the harness's verbs stage and guest agent run python3),
# tcpdump for the guest-side captures, and the few tools scripts use.
GUEST_PKGS=linux-image-amd64,kmod,iproute2,procps,iputils-ping,netcat-openbsd,python3
GUEST_PKGS+=,rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,infiniband-diags,perftest
GUEST_PKGS+=,python3-pyverbs,qperf,ucx-utils,libfabric-bin,tcpdump
# The initrd needs only what mounts the root disk; a full one is ~35 MB,
# which the emulated CPU takes seconds to unpack at every boot.
INITRD_MODULES="virtio_pci virtio_blk ext4 crc32c_generic"
# Documentation directories the image keeps (the rest is removed).
KEEP_DOCS="rdma-core"

# mirror: the Debian archive this host's apt uses (deb822 or one-line
# sources), skipping the security archive, which has no base suite.
mirror() {
    if [ -n "${RXE_PEER_MIRROR:-}" ]; then echo "$RXE_PEER_MIRROR"; return; fi
    local m
    m=$({
        sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
        awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { print $i; break } }' /etc/apt/sources.list 2>/dev/null
    } | tr ' ' '\n' | grep -i debian | grep -v -i security | head -n 1)
    echo "${m:-http://deb.debian.org/debian}"
}

need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root (tap, network namespace, debootstrap)"; }

need_tools() {
    local t missing=()
    for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
    [ ${#missing[@]} = 0 ] || die "missing host tools: ${missing[*]} (run: sudo make deps)"
}

ns() { if [ -n "$NETNS" ]; then ip netns exec "$NETNS" "$@"; else "$@"; fi; }

# ------------------------------------------------------------------ build

# The rootfs is rebuilt when the package list changes; the image (rootfs
# plus the guest programs) when those change, which takes seconds.
rootfs_stamp() { echo "$SUITE $GUEST_PKGS $INITRD_MODULES keep:$KEEP_DOCS"; }
image_stamp() { cat "$here/guest/init" "$here/guest/execd" | sha256sum | cut -c1-16; }

build_rootfs() {
    local root=$CACHE/rootfs tmp=$CACHE/rootfs.tmp t rc
    if [ -f "$root/.goroce-lab" ] && [ "$(cat "$root/.goroce-lab")" = "$(rootfs_stamp)" ]; then
        return 0
    fi
    t=$(date +%s.%N)
    # A build killed midway leaves /proc (its own or debootstrap's)
    # mounted in $tmp: unmount it, and let rm cross no mount point.
    awk -v t="$tmp/" 'index($2, t) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r -n 1 umount -l
    rm -rf --one-file-system "$tmp" "$root" "$CACHE/rootfs.img" "$CACHE/image.stamp"
    say "debootstrap $SUITE from $(mirror) (log: $CACHE/debootstrap.log)"
    debootstrap --variant=minbase --include="$GUEST_PKGS" "$SUITE" "$tmp" "$(mirror)" \
        >"$CACHE/debootstrap.log" 2>&1 || die "debootstrap failed, see $CACHE/debootstrap.log"
    printf 'MODULES=list\nCOMPRESS=gzip\n' >"$tmp/etc/initramfs-tools/conf.d/goroce-lab.conf"
    printf '%s\n' $INITRD_MODULES >>"$tmp/etc/initramfs-tools/modules"
    mount -t proc proc "$tmp/proc" || die "cannot mount /proc in $tmp"
    chroot "$tmp" update-initramfs -u -k all >"$CACHE/initramfs.log" 2>&1
    rc=$?
    umount "$tmp/proc"
    [ $rc = 0 ] || die "update-initramfs failed, see $CACHE/initramfs.log"
    # What the guest never reads: documentation and apt's downloads, but
    # for $KEEP_DOCS: python3-pyverbs ships rdma-core's own test suite
    # there (usr/share/doc/rdma-core/tests), the reference run on rxe0.
    find "$tmp"/usr/share/doc -mindepth 1 -maxdepth 1 $(printf ' ! -name %s' $KEEP_DOCS) -exec rm -rf {} +
    rm -rf "$tmp"/usr/share/man/* "$tmp"/usr/share/info/* \
        "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
    rootfs_stamp >"$tmp/.goroce-lab"
    mv "$tmp" "$root"
    say "rootfs built in $(secs_since "$t")s"
}

build_image() {
    local root=$CACHE/rootfs stamp k i t
    stamp=$(image_stamp)
    [ -f "$CACHE/rootfs.img" ] && [ "$(cat "$CACHE/image.stamp" 2>/dev/null)" = "$stamp" ] && return 0
    t=$(date +%s.%N)
    install -m 0755 "$here/guest/init" "$root/sbin/goroce-lab-init"
    install -m 0755 "$here/guest/execd" "$root/usr/local/sbin/goroce-lab-execd"
    k=$(ls "$root"/boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
    i=$(ls "$root"/boot/initrd.img-* 2>/dev/null | sort -V | tail -n 1)
    [ -n "$k" ] && [ -n "$i" ] || die "no kernel or initrd in $root/boot"
    cp "$k" "$CACHE/vmlinuz" && cp "$i" "$CACHE/initrd.img" || die "cannot copy the kernel and initrd"
    rm -f "$CACHE/rootfs.img" "$CACHE/image.stamp"
    # mke2fs -d fills the file system from the directory: no loop mount
    # (the file made first, else mke2fs says it creates it, -q or not).
    truncate -s 2G "$CACHE/rootfs.img" && mke2fs -q -F -t ext4 -L goroce-lab -d "$root" "$CACHE/rootfs.img" || die "mke2fs -d failed"
    echo "$stamp" >"$CACHE/image.stamp"
    say "image built in $(secs_since "$t")s: $CACHE/rootfs.img"
}

cmd_build() {
    local force=
    case $# in
        0) ;;
        1) [ "$1" = --force ] && force=1 || usage_err "build: unknown argument '$1'" ;;
        *) usage_err "build takes at most --force" ;;
    esac
    need_root build
    need_tools debootstrap mke2fs chroot flock
    mkdir -p "$CACHE" || die "cannot create $CACHE"
    exec 9>"$CACHE/.build.lock"
    flock -w 1200 9 || die "another build holds $CACHE/.build.lock"
    [ -n "$force" ] && rm -rf "$CACHE/rootfs" "$CACHE/rootfs.img"
    build_rootfs
    build_image
}

# ------------------------------------------------------------------ VM

vm_pid() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) && [ -n "$pid" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "-name $VM_NAME " || return 1
    echo "$pid"
}

vm_ready() { vm_pid >/dev/null && [ -f "$SHARE/ready" ]; }

# What up created is recorded, so down removes exactly that and never a
# namespace or tap someone else made.
net_up() {
    if [ -n "$NETNS" ] && [ ! -e "/run/netns/$NETNS" ]; then
        ip netns add "$NETNS" || die "cannot create network namespace $NETNS"
        echo "$NETNS" >"$STATE/made.netns"
    fi
    [ -n "$NETNS" ] && ns ip link set lo up
    if ! ns ip link show "$TAP" >/dev/null 2>&1; then
        ns ip tuntap add dev "$TAP" mode tap || die "cannot create tap $TAP"
        echo "$TAP" >"$STATE/made.tap"
    fi
    # IPv6 off until the harness asks for it: no router solicitations or
    # DAD probes in the captures.
    ns sysctl -qw "net.ipv6.conf.$TAP.disable_ipv6=1"
    ns ip link set "$TAP" mtu "$MTU" || die "cannot set MTU $MTU on $TAP"
    ns ip addr replace "$HOST_ADDR" dev "$TAP" || die "cannot put $HOST_ADDR on $TAP"
    ns ip link set "$TAP" up
}

net_down() {
    if [ -f "$STATE/made.tap" ]; then ns ip link del "$(cat "$STATE/made.tap")" 2>/dev/null; rm -f "$STATE/made.tap"; fi
    if [ -f "$STATE/made.netns" ]; then ip netns del "$(cat "$STATE/made.netns")" 2>/dev/null; rm -f "$STATE/made.netns"; fi
}

lock_state() {
    mkdir -p "$STATE" || die "cannot create $STATE"
    exec 8>"$STATE/.lock"
    flock -w 120 8 || die "another rxe-peer.sh up or down holds $STATE/.lock"
}

cmd_up() {
    [ $# = 0 ] || usage_err "up takes no arguments"
    need_root up
    need_tools qemu-system-x86_64 ip flock
    lock_state
    if vm_ready; then
        grep -qx "os=$SUITE" "$SHARE/ready" || say "warning: the guest up in $STATE is $(sed -n 's/^os=//p' "$SHARE/ready"), not $SUITE"
        cmd_status
        return
    fi
    if ! vm_pid >/dev/null; then
        (cmd_build) || exit 1
        net_up
        rm -rf "$SHARE"
        mkdir -p "$SHARE/spool" "$SHARE/pcap"
        local accel=(-accel "$ACCEL") append
        [ "$ACCEL" = tcg ] && accel=(-accel tcg,thread=multi)
        append="console=ttyS0 root=/dev/vda rw init=/sbin/goroce-lab-init loglevel=4 panic=-1"
        append+=" goroce_lab.addr=$GUEST_ADDR goroce_lab.mtu=$MTU"
        # 6.1 finds the emulated CPUs' TSCs unsynchronized and falls back
        # to the HPET: every clock read is then an emulated MMIO access.
        [ "$SUITE" = bookworm ] && append+=" tsc=reliable"
        rm -f "$PIDFILE" "$STATE/console.log"
        date +%s.%N >"$STATE/boot.start"
        # snapshot=on: the guest's writes never reach the cached image.
        ns qemu-system-x86_64 -name "$VM_NAME" -M pc "${accel[@]}" -smp "$SMP" -m "$MEM" \
            -nodefaults -no-user-config -display none -no-reboot \
            -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" -append "$append" \
            -drive "file=$CACHE/rootfs.img,format=raw,if=virtio,snapshot=on" \
            -netdev "tap,id=net0,ifname=$TAP,script=no,downscript=no" \
            -device "virtio-net-pci,netdev=net0,mac=$GUEST_MAC" \
            -virtfs "local,path=$SHARE,mount_tag=labshare,security_model=none,id=share0" \
            -serial "file:$STATE/console.log" \
            -daemonize -pidfile "$PIDFILE" 2>"$STATE/qemu.err" 8>&- 9>&- \
            || die "qemu did not start: $(tr '\n' ' ' <"$STATE/qemu.err")"
    fi
    local deadline=$(($(date +%s) + BOOT_TIMEOUT))
    until [ -f "$SHARE/ready" ]; do
        if ! vm_pid >/dev/null; then
            tail -n 20 "$STATE/console.log" >&2 2>/dev/null
            die "the guest exited while booting (console: $STATE/console.log)"
        fi
        [ "$(date +%s)" -lt "$deadline" ] || die "the guest was not ready after ${BOOT_TIMEOUT}s (console: $STATE/console.log; then: $0 down)"
        sleep 0.2
    done
    say "up: ready $(secs_since "$(cat "$STATE/boot.start")")s after qemu started (accel $ACCEL)"
    cmd_status
}

cmd_status() {
    [ $# = 0 ] || usage_err "status takes no arguments"
    local pid
    pid=$(vm_pid) || { echo "state=down"; return 3; }
    if [ -f "$SHARE/ready" ]; then echo "state=ready"; else echo "state=booting"; fi
    echo "pid=$pid"
    echo "netns=${NETNS:-<current>} tap=$TAP host_addr=$HOST_ADDR"
    echo "guest_addr=$GUEST_ADDR guest_mac=$GUEST_MAC"
    echo "state_dir=$STATE console=$STATE/console.log cache=$CACHE"
    [ -f "$SHARE/ready" ] && sed 's/^/guest_/' "$SHARE/ready"
    return 0
}

# ------------------------------------------------------------------ exec

# guest_run SCRIPT: bash runs SCRIPT in the guest; its stdout, stderr and
# exit status become ours. The request is a directory made complete under
# a temporary name and then renamed, so the guest never reads half of one.
guest_run() {
    vm_ready || die "the guest is not up (run: $0 up)"
    local id=$$-$(date +%s%N)-$RANDOM req deadline rc
    req=$SHARE/spool/$id
    mkdir "$req.tmp" || die "cannot write to $SHARE/spool"
    printf '%s\n' "$1" >"$req.tmp/script"
    mv "$req.tmp" "$req.req"
    deadline=$(($(date +%s) + EXEC_TIMEOUT))
    until [ -f "$req.done/rc" ]; do
        [ "$(date +%s)" -lt "$deadline" ] || die "the command still runs after ${EXEC_TIMEOUT}s (its output so far: $req.done)"
        vm_pid >/dev/null || die "the guest went down"
        sleep 0.05
    done
    cat "$req.done/out"
    cat "$req.done/err" >&2
    rc=$(cat "$req.done/rc")
    rm -rf "$req.done"
    return "$rc"
}

cmd_exec() {
    [ $# -ge 1 ] || usage_err "exec needs a command: $0 exec '<bash command>'"
    guest_run "$*"
}

cmd_host_exec() {
    [ $# -ge 1 ] || usage_err "host-exec needs a command: $0 host-exec CMD [ARG...]"
    need_root host-exec
    ns "$@"
}

# ------------------------------------------------------------------ pcap

cmd_pcap() {
    local op=${1:-} host= name
    case "$op" in start | stop) shift ;; *) usage_err "pcap: start or stop, not '$op'" ;; esac
    [ "${1:-}" = --host ] && { host=1; shift; }
    name=${1:-}
    [ -n "$name" ] || usage_err "pcap $op needs a NAME"
    [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || usage_err "pcap name '$name': use only A-Z a-z 0-9 . _ -"
    shift
    local filter=${*:-udp port 4791} snap=$((MTU + 64))
    if [ -z "$host" ]; then
        case "$op" in
            start)
                guest_run "p=/run/pcap-$name
[ -f \$p.pid ] && kill -0 \$(cat \$p.pid) 2>/dev/null && { echo 'capture $name is already running' >&2; exit 1; }
tcpdump -i eth0 -n -s $snap -B 16384 -U --immediate-mode -w /mnt/host/pcap/$name.pcap '$filter' >\$p.log 2>&1 &
echo \$! >\$p.pid
for i in \$(seq 200); do grep -q 'listening on' \$p.log && exit 0; kill -0 \$! 2>/dev/null || break; sleep 0.05; done
cat \$p.log >&2; exit 1"
                ;;
            stop)
                [ $# -le 1 ] || usage_err "pcap stop NAME [DEST]"
                guest_run "p=/run/pcap-$name
pid=\$(cat \$p.pid 2>/dev/null) || { echo 'no capture named $name' >&2; exit 1; }
kill -INT \$pid; for i in \$(seq 100); do kill -0 \$pid 2>/dev/null || break; sleep 0.05; done
rm -f \$p.pid" || return 1
                cp "$SHARE/pcap/$name.pcap" "${1:-./$name.pcap}" || die "cannot copy the capture to ${1:-./$name.pcap}"
                rm -f "$SHARE/pcap/$name.pcap"
                echo "${1:-./$name.pcap}"
                ;;
        esac
        return
    fi
    need_root "pcap --host"
    local d=$STATE/hostpcap pid
    case "$op" in
        start)
            mkdir -p "$d"
            pid=$(cat "$d/$name.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null && die "host capture $name is already running"
            # exec: the pid recorded is tcpdump's own, so stop signals it
            # and not a shell that would ignore SIGINT.
            local argv=(tcpdump -i "$TAP" -n -s "$snap" -B 16384 -U --immediate-mode -w "$d/$name.pcap" "$filter")
            [ -n "$NETNS" ] && argv=(ip netns exec "$NETNS" "${argv[@]}")
            (exec "${argv[@]}" >"$d/$name.log" 2>&1) &
            pid=$!
            echo "$pid" >"$d/$name.pid"
            for _ in $(seq 200); do
                grep -q 'listening on' "$d/$name.log" && return 0
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.05
            done
            cat "$d/$name.log" >&2
            die "host capture $name did not start"
            ;;
        stop)
            [ $# -le 1 ] || usage_err "pcap stop --host NAME [DEST]"
            pid=$(cat "$d/$name.pid" 2>/dev/null) || die "no host capture named $name"
            kill -INT "$pid" 2>/dev/null
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
            rm -f "$d/$name.pid"
            cp "$d/$name.pcap" "${1:-./$name.pcap}" || die "cannot copy the capture to ${1:-./$name.pcap}"
            echo "${1:-./$name.pcap}"
            ;;
    esac
}

# ------------------------------------------------------------------ down

cmd_down() {
    [ $# = 0 ] || usage_err "down takes no arguments"
    need_root down
    lock_state
    local f pid
    for f in "$STATE"/hostpcap/*.pid; do
        [ -f "$f" ] || continue
        kill -INT "$(cat "$f")" 2>/dev/null
        rm -f "$f"
    done
    if pid=$(vm_pid); then
        # The guest powers itself off when it sees this file (guest/execd);
        # qemu is ended by its pid only if it has not within 10 s.
        touch "$SHARE/spool/poweroff"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            say "the guest did not power off: ending qemu (pid $pid)"
            kill "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        fi
    fi
    rm -rf "$PIDFILE" "$SHARE"
    net_down
    return 0
}

cmd_help() {
    cat <<EOF
usage: $0 COMMAND [ARG...]

  build [--force]             build the $SUITE guest image if it is not cached ($CACHE)
  up                          build if needed, boot the guest, wait until rxe0 is ready
  status                      the guest's state and addresses (exit status 3 when down)
  exec '<bash command>'       run a command in the guest: its output and exit status
  host-exec CMD [ARG...]      run a host command in the tap's network namespace
  pcap start [--host] NAME [FILTER]
                              tcpdump on the guest's eth0 (--host: the tap), default
                              filter 'udp port 4791'
  pcap stop [--host] NAME [DEST]
                              stop it, copy the capture to DEST (default ./NAME.pcap)
  down                        power the guest off, remove the tap and namespace up made

environment (defaults):
  RXE_PEER_SUITE=$SUITE  RXE_PEER_CACHE=$CACHE  RXE_PEER_STATE=$STATE
  RXE_PEER_NETNS=$NETNS  RXE_PEER_TAP=$TAP  RXE_PEER_MTU=$MTU
  RXE_PEER_HOST_ADDR=$HOST_ADDR  RXE_PEER_GUEST_ADDR=$GUEST_ADDR  RXE_PEER_GUEST_MAC=$GUEST_MAC
  RXE_PEER_ACCEL=$ACCEL  RXE_PEER_SMP=$SMP  RXE_PEER_MEM=$MEM (MiB)
  RXE_PEER_BOOT_TIMEOUT=$BOOT_TIMEOUT  RXE_PEER_EXEC_TIMEOUT=$EXEC_TIMEOUT (s)  RXE_PEER_MIRROR (this host's apt mirror)
EOF
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    build) cmd_build "$@" ;;
    up) cmd_up "$@" ;;
    status) cmd_status "$@" ;;
    exec) cmd_exec "$@" ;;
    host-exec) cmd_host_exec "$@" ;;
    pcap) cmd_pcap "$@" ;;
    down) cmd_down "$@" ;;
    help | -h | --help) cmd_help ;;
    "") usage_err "no command" ;;
    *) usage_err "unknown command '$cmd'" ;;
esac
