#!/usr/bin/env bash
# interop-lab.sh: the interop matrix against the rxe lab, one guest after the
# other (Debian bookworm, then trixie): build the guest image when it is not
# cached, boot it, run every case (roced on this host against the real tools
# on the guest's rxe0, both directions), power it off. `make interop` and so
# `make test` and .ci/run call this. Any case that fails or does not run
# fails the script: interop is the proof, nothing is skipped. A guest whose
# kernel dies during its boot is booted again (at most twice, shown in the
# log and the summary): no case has run on it yet.
#
# `interop-lab.sh images` only starts building the guest images that are
# not cached, one after the other, in the background (nice), and returns:
# `make test` calls it first, so that on a fresh machine the builds
# (lab/rxe-peer.sh build: debootstrap, mostly downloads and dpkg; 1.5-2.3
# min for bookworm and 1.1-1.9 for trixie on 2 loaded cores) overlap
# the stages before interop. The run then waits for that build, shows its
# log if it failed, and builds in the foreground what is still missing.
# Its logs: INTEROP_OUT/images-SUITE.log.
#
# Environment:
#   RXE_PEER_DIR     the lab (default lab/ in the repository; any directory
#                    holding an rxe-peer.sh with the same commands will do)
#   INTEROP_SUITES   guests to run, in order (default "bookworm trixie")
#   INTEROP_BUDGET   time budget of each guest's matrix (default 20m); cases
#                    left when it runs out are reported NOT-RUN and fail
#   INTEROP_OUT      reports and artifacts (default bin/interop): SUITE.txt,
#                    SUITE.json and SUITE/ with each case's outputs and the
#                    tap capture of every failed case
#   INTEROP_ARGS     extra arguments for the interop command (-run REGEXP ...)
#   INTEROP_IMPAIR   1 (the default): after each guest's matrix, run the
#                    RC subset again with nic/impair between roced and the
#                    tap (1% loss and 2% reordering each way, seeded per
#                    case): 20 cases in which rxe's requester sends no
#                    multi-packet WRITE or SEND (interop.ImpairedCases;
#                    those meet a bug of rxe's, interop/README.md,
#                    "Interop under impairment"); 0 skips it. Reports
#                    SUITE-impair.txt/.json/ beside the rest
#   INTEROP_IMPAIR_BUDGET  its time budget per guest (default 7m)
#   INTEROP_IMPAIR_ARGS    extra arguments for it (-impair-seed N ...)
#   INTEROP_LIBGOROCE  1 (the default): after each guest's matrix, run the
#                    host's own rdma-core pingpongs, perftest and librdmacm
#                    tools (rping, rdma_server, ucmatose, udaddy, cmtime,
#                    perftest -R; IPv6 too) over bin/libgoroce.so
#                    (LD_PRELOAD) against the guest's (interop -peer
#                    lab-libgoroce; the matrix's scenarios, both ways); 0
#                    skips it. Reports SUITE-libgoroce.txt/.json/
#   INTEROP_LIBGOROCE_ARGS extra arguments for it (-run REGEXP ...)
#   INTEROP_PYVERBS  1 (the default): after each guest's matrix, run the
#                    verbs stage (interop -peer lab-pyverbs): memory windows,
#                    invalidation and a file-mapped region between goroce
#                    and rxe's verbs driven through pyverbs in the guest,
#                    then pyverbs on the host over LIBGOROCE against it
#                    (Debian's python3-pyverbs, which .ci/run installs);
#                    0 skips it. Reports SUITE-pyverbs.txt/.json
#   INTEROP_APPS     1 (the default), all or 0: after each guest's verbs
#                    stage, run real software over LIBGOROCE against the
#                    guest's on rxe0 (interop -peer lab-apps): qperf both
#                    ways (RC over the RDMA CM measures; UC, UD and RC by
#                    LID are refused as rxe refuses them; about 25 s a
#                    guest), libfabric's fi_pingpong both ways (msg, rdm
#                    and dgram endpoints) and ucx_perftest both ways over
#                    rc_verbs and ud_verbs (rxe0's packet counters proving
#                    RoCE carried the data); "all" adds rdma-core's own
#                    test suite on rxe0 and on goroce0, goroce's held to
#                    rxe's, whose reference run in the trixie guest took
#                    15 min under load (not yet inside CI's budget; make
#                    test holds goroce's run to the recorded references);
#                    0 skips it. Reports SUITE-apps.txt/.json
#   INTEROP_UCX_SUITES the guests the UCX cases run on: bookworm, whose
#                    UCX (1.13) is this Debian host's; ucx_perftest pairs
#                    one UCX version, and trixie's is 1.18 (the stage
#                    reports such cases not run)
#   INTEROP_CONFORM  1 (the default): on each guest, first of all, run
#                    roced conform against it (--peer-exec through the
#                    harness's guest agent, interop -peer lab-exec; then
#                    one case through rxe-peer.sh exec, the README's lab
#                    line as written) and hold each
#                    case's verdict to rxe's published table
#                    (interop/README.md, "rxe's conformance table",
#                    checked by conformcheck): a case whose verdict differs
#                    from the table's for that kernel fails, an error
#                    included where the table has the case judged; 0 skips
#                    it. Reports SUITE-conform.txt/.json/.html and
#                    SUITE-conform-check.txt
#   INTEROP_CC_SUITES the guests on which, after the applications stage,
#                    two goroce flows cross a kernel RED qdisc with ECN in
#                    the guest and DCQCN must share it fairly with a short
#                    queue (lab/cc-bottleneck.sh -check, about 15 s;
#                    default bookworm: the qdisc is the guest kernel's
#                    tool, the proof goroce's, so one guest will do; empty
#                    skips it). Reports SUITE-cc/ (captures, summary, plot)
#   LIBGOROCE        the library (default bin/libgoroce.so, which make builds)
#   ROCED            the roced binary (default bin/roced, which make builds)
#   RXE_PEER_*       the lab's own settings; RXE_PEER_<VAR>_<SUITE> (e.g.
#                    RXE_PEER_STATE_TRIXIE, RXE_PEER_NETNS_TRIXIE) overrides
#                    one for that guest only, so that two instances never
#                    share a state directory, namespace, tap or address
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}
LAB=${RXE_PEER_DIR:-$ROOT/lab}
SUITES=${INTEROP_SUITES:-bookworm trixie}
BUDGET=${INTEROP_BUDGET:-20m}
IMPAIR=${INTEROP_IMPAIR:-1}
IMPAIR_BUDGET=${INTEROP_IMPAIR_BUDGET:-7m}
OUT=${INTEROP_OUT:-$ROOT/bin/interop}
ROCED=${ROCED:-$ROOT/bin/roced}
LIBGOROCE_STAGE=${INTEROP_LIBGOROCE:-1}
PYVERBS_STAGE=${INTEROP_PYVERBS:-1}
# The guest's qperf runs with a shim (interop/lab/qperf-shim.c) that makes
# Debian's qperf 0.4.11 listen before it sends the client its RDMA CM port,
# as upstream qperf does (without it a quick client, the host's, is
# rejected now and then, REJ reason 8), and keeps a second exit() from its
# SIGURG handler from hanging the process on glibc's exit lock.
APPS_STAGE=${INTEROP_APPS:-1}
UCX_SUITES=${INTEROP_UCX_SUITES:-bookworm}
CONFORM_STAGE=${INTEROP_CONFORM:-1}
CC_SUITES=${INTEROP_CC_SUITES-bookworm}
LIBGOROCE=${LIBGOROCE:-$ROOT/bin/libgoroce.so}

die() { echo "interop: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

case $APPS_STAGE in 0 | 1 | all) ;; *) die "INTEROP_APPS=$APPS_STAGE: want 1, all or 0" ;; esac
[ -f "$LAB/rxe-peer.sh" ] || die "the rxe lab is missing: no rxe-peer.sh in $LAB (RXE_PEER_DIR; the repository's own is lab/)"
LAB=$(cd "$LAB" && pwd)
[ "$(id -u)" = 0 ] || die "the lab needs root (qemu on a tap device in a network namespace)"
mkdir -p "$OUT" || die "cannot create $OUT"

# suite_env SUITE: the lab's environment for that guest (in a subshell).
suite_env() {
    export RXE_PEER_SUITE=$1
    local up=${1^^} v o
    for v in CACHE STATE NETNS TAP HOST_ADDR GUEST_ADDR GUEST_MAC; do
        o="RXE_PEER_${v}_${up}"
        if [ -n "${!o+x}" ]; then export "RXE_PEER_$v=${!o}"; fi
    done
}

if [ "${1:-}" = images ]; then
    # The lock is taken here and held by the background job (the same open
    # file), so a run that starts right after waits for it.
    exec 9>"$OUT/images.lock"
    flock -n 9 || die "an image build is already running ($OUT/images.lock)"
    for suite in $SUITES; do rm -f "$OUT/images-$suite.rc" "$OUT/images-$suite.log"; done
    (
        for suite in $SUITES; do
            (
                suite_env "$suite"
                t=$(now)
                nice -n 10 "$LAB/rxe-peer.sh" build
                echo "exit $? after $(since "$t")s"
            ) >"$OUT/images-$suite.log" 2>&1 </dev/null
            sed -n 's/^exit \([0-9]*\) after .*/\1/p' "$OUT/images-$suite.log" >"$OUT/images-$suite.rc"
        done
    ) </dev/null >/dev/null 2>&1 &
    echo "interop: building the guest images that are not cached ($SUITES) in the background, logs in $OUT/images-*.log"
    exit 0
fi

[ -x "$ROCED" ] || die "$ROCED is missing (make build)"
"$GO" build -o "$OUT/interop" ./interop/cmd/interop || die "cannot build the interop command"
"$GO" build -o "$OUT/conformcheck" ./interop/cmd/conformcheck || die "cannot build the conformcheck command"
if [ -e "$OUT/images.lock" ]; then
    t=$(now)
    flock "$OUT/images.lock" true
    echo "interop: waited $(since "$t")s for the background image build"
fi

t_all=$(now)
summary=()
rc=0
for suite in $SUITES; do
    (
        suite_env "$suite"
        R="$LAB/rxe-peer.sh"
        echo "== interop against the $suite guest"
        rm -f "$OUT/$suite-boots" "$OUT/$suite-apps.mode"
        if [ -f "$OUT/images-$suite.rc" ]; then
            # Consumed here, so a later run never reads a stale one.
            b=$(cat "$OUT/images-$suite.rc"); rm -f "$OUT/images-$suite.rc"
            echo "interop[$suite]: background image build: $(tail -n 1 "$OUT/images-$suite.log")"
            if [ "$b" != 0 ]; then
                echo "interop[$suite]: the background image build failed; its log:"
                sed 's/^/  | /' "$OUT/images-$suite.log"
            fi
        fi
        t=$(now)
        "$R" build || exit 1
        echo "interop[$suite]: image ready in $(since "$t")s"
        t=$(now)
        # A guest this lab instance left running (a run that was killed, or
        # a hand-run session) may be the other suite's: rxe-peer.sh up would
        # only print its status, and the matrix would run against the wrong
        # guest. The instance is ours (its state directory): power it off.
        if "$R" status >/dev/null 2>&1; then
            echo "interop[$suite]: a guest was already up in this lab instance ($("$R" status | sed -n 's/^guest_os=//p')): powering it off first"
            "$R" down >/dev/null || exit 1
        fi
        trap '"$R" down >/dev/null 2>&1' EXIT
        # A guest whose kernel dies while it boots is booted again, at most
        # twice, each time said here and in the summary: no case has run
        # on it, so nothing is retried. (Seen once in a loaded run: trixie
        # died of an int3 oops in sched_clock_cpu 3 s into its boot, the
        # kernel patching its own code under qemu's multi-threaded TCG.)
        # Any other boot failure, or a third death, ends the stage.
        boots=0
        until "$R" up >/dev/null; do
            console=${RXE_PEER_STATE:-/tmp/rxe-peer}/console.log
            boots=$((boots + 1))
            if [ "$boots" -gt 2 ] || ! grep -q 'Kernel panic\|Oops' "$console" 2>/dev/null; then
                exit 1
            fi
            cp "$console" "$OUT/$suite-boot-$boots.console.log"
            echo "interop[$suite]: the guest's kernel died during its boot, before any case ran (console kept as $OUT/$suite-boot-$boots.console.log):"
            grep -m 2 'Oops\|RIP\|Kernel panic' "$console" | sed 's/^/  | /'
            echo "interop[$suite]: booting it again ($boots of at most 2)"
            echo "$boots" >"$OUT/$suite-boots"
            "$R" down >/dev/null 2>&1
        done
        os=$("$R" status | sed -n 's/^guest_os=//p')
        [ "$os" = "$suite" ] || { echo "interop[$suite]: the guest that came up is $os, not $suite"; exit 1; }
        echo "interop[$suite]: guest up in $(since "$t")s ($("$R" status | sed -n 's/^guest_kernel=//p'))"
        m=0
        if [ "$CONFORM_STAGE" = 1 ]; then
            # On the fresh guest, as the table was measured. roced conform
            # exits 1 with any deviation: the published table decides.
            t=$(now)
            guest=${RXE_PEER_GUEST_ADDR:-192.0.2.2/24}
            rm -f "$OUT/$suite-conform.json" "$OUT/$suite-conform-check.txt"
            # goroce's requester script, for the requester cases no tool's
            # client plays, where the guest reads it: its /mnt/host (9p).
            "$ROCED" conform --requester-script >"${RXE_PEER_STATE:-/tmp/rxe-peer}/share/goroce-requester.py" || exit 1
            # The peer's tools start through the harness's agent in the
            # guest (interop -peer lab-exec): 134 starts, each about 0.3 s
            # quicker than through rxe-peer.sh exec's 9p spool.
            "$R" host-exec "$ROCED" conform --peer-exec "$OUT/interop -peer lab-exec -lab $LAB" --peer-dev rxe0 --peer-gid 1 \
                --peer-python /mnt/host/goroce-requester.py --json "$OUT/$suite-conform.json" --html "$OUT/$suite-conform.html" "${guest%/*}" >"$OUT/$suite-conform.txt" 2>&1
            echo "interop[$suite]: roced conform in $(since "$t")s: $(tail -n 1 "$OUT/$suite-conform.txt")"
            "$OUT/conformcheck" -readme "$ROOT/interop/README.md" -suite "$suite" "$OUT/$suite-conform.json" | tee "$OUT/$suite-conform-check.txt"
            [ "${PIPESTATUS[0]}" = 0 ] || m=1
            # The README's own lab line (--peer-exec through rxe-peer.sh
            # exec), for one case, so that the line stays proven as written.
            t=$(now)
            if "$R" host-exec "$ROCED" conform --peer-exec "$R exec" --peer-dev rxe0 --peer-gid 1 \
                --run '^resp-send-only$' "${guest%/*}" >"$OUT/$suite-conform-readme.txt" 2>&1; then
                echo "interop[$suite]: roced conform as the README runs it (rxe-peer.sh exec), one case, in $(since "$t")s: $(tail -n 1 "$OUT/$suite-conform-readme.txt")"
            else
                echo "interop[$suite]: roced conform as the README runs it (rxe-peer.sh exec) failed:"
                sed 's/^/  | /' "$OUT/$suite-conform-readme.txt"
                m=1
            fi
        fi
        t=$(now)
        # shellcheck disable=SC2086
        "$OUT/interop" -peer lab -lab "$LAB" -roced "$ROCED" -budget "$BUDGET" \
            -readme "$ROOT/docs/tools.md" -json "$OUT/$suite.json" -artifacts "$OUT/$suite" ${INTEROP_ARGS:-} | tee "$OUT/$suite.txt"
        x=${PIPESTATUS[0]}
        echo "interop[$suite]: matrix in $(since "$t")s, exit status $x"
        [ "$x" = 0 ] || m=1
        if [ "$LIBGOROCE_STAGE" = 1 ]; then
            t=$(now)
            # shellcheck disable=SC2086
            "$OUT/interop" -peer lab-libgoroce -lab "$LAB" -libgoroce "$LIBGOROCE" -budget "$BUDGET" \
                -json "$OUT/$suite-libgoroce.json" -artifacts "$OUT/$suite-libgoroce" ${INTEROP_LIBGOROCE_ARGS:-} | tee "$OUT/$suite-libgoroce.txt"
            g=${PIPESTATUS[0]}
            echo "interop[$suite]: the real tools over libgoroce in $(since "$t")s, exit status $g"
            [ "$g" = 0 ] || m=1
        fi
        if [ "$PYVERBS_STAGE" = 1 ]; then
            t=$(now)
            "$OUT/interop" -peer lab-pyverbs -lab "$LAB" -libgoroce "$LIBGOROCE" -json "$OUT/$suite-pyverbs.json" | tee "$OUT/$suite-pyverbs.txt"
            y=${PIPESTATUS[0]}
            echo "interop[$suite]: the verbs stage (pyverbs) in $(since "$t")s, exit status $y"
            [ "$y" = 0 ] || m=1
        fi
        apps=$APPS_STAGE
        ucx='ucx|'
        if [[ " $UCX_SUITES " != *" $suite "* ]]; then
            echo "interop[$suite]: the UCX cases not run: ucx_perftest pairs one UCX version, and this guest's is not the host's (INTEROP_UCX_SUITES=$UCX_SUITES)"
            ucx=
        fi
        echo "$apps" >"$OUT/$suite-apps.mode"
        if [ "$apps" != 0 ]; then
            t=$(now)
            apps_run=()
            case $apps in
            all) ;;
            *) apps_run=(-run "^(qperf|${ucx}libfabric)/") ;;
            esac
            "$OUT/interop" -peer lab-apps -lab "$LAB" -libgoroce "$LIBGOROCE" "${apps_run[@]}" -json "$OUT/$suite-apps.json" | tee "$OUT/$suite-apps.txt"
            y=${PIPESTATUS[0]}
            echo "interop[$suite]: the applications stage (${apps_run[*]:-all}) in $(since "$t")s, exit status $y"
            [ "$y" = 0 ] || m=1
        fi
        rm -f "$OUT/$suite-cc.ran"
        if [[ " $CC_SUITES " == *" $suite "* ]]; then
            t=$(now)
            touch "$OUT/$suite-cc.ran"
            RXE_PEER_DIR=$LAB GO=$GO "$ROOT/lab/cc-bottleneck.sh" -check -o "$OUT/$suite-cc" >"$OUT/$suite-cc.txt" 2>&1
            y=$?
            sed 's/^/  | /' "$OUT/$suite-cc.txt"
            echo "interop[$suite]: DCQCN through the guest's RED qdisc in $(since "$t")s, exit status $y"
            [ "$y" = 0 ] || m=1
        fi
        if [ "$IMPAIR" = 1 ]; then
            t=$(now)
            # shellcheck disable=SC2086
            "$OUT/interop" -peer lab -impair -lab "$LAB" -roced "$ROCED" -budget "$IMPAIR_BUDGET" \
                -json "$OUT/$suite-impair.json" -artifacts "$OUT/$suite-impair" ${INTEROP_IMPAIR_ARGS:-} | tee "$OUT/$suite-impair.txt"
            i=${PIPESTATUS[0]}
            echo "interop[$suite]: impaired subset in $(since "$t")s, exit status $i"
            [ "$i" = 0 ] || m=1
        fi
        t=$(now)
        "$R" down >/dev/null
        trap - EXIT
        echo "interop[$suite]: guest down in $(since "$t")s"
        exit "$m"
    )
    s=$?
    [ $s = 0 ] || rc=1
    summary+=("$suite: $(sed -n 's/^\([0-9]* passed, [0-9]* failed, [0-9]* not run\)$/\1/p' "$OUT/$suite.txt" 2>/dev/null || true) (exit $s)")
    if [ -s "$OUT/$suite-boots" ]; then
        summary+=("$suite guest: booted again $(cat "$OUT/$suite-boots") time(s) after its kernel died during boot (before any case)")
    fi
    if [ "$LIBGOROCE_STAGE" = 1 ]; then
        summary+=("$suite libgoroce: $(sed -n 's/^\([0-9]* passed, [0-9]* failed, [0-9]* not run\)$/\1/p' "$OUT/$suite-libgoroce.txt" 2>/dev/null || true)")
    fi
    if [ "$PYVERBS_STAGE" = 1 ]; then
        summary+=("$suite pyverbs: $(sed -n 's/^\([0-9]* passed, [0-9]* failed, [0-9]* not run\)$/\1/p' "$OUT/$suite-pyverbs.txt" 2>/dev/null || true)")
    fi
    if [ "$(cat "$OUT/$suite-apps.mode" 2>/dev/null)" != 0 ]; then
        summary+=("$suite apps: $(sed -n 's/^\([0-9]* passed, [0-9]* failed, [0-9]* not run\)$/\1/p' "$OUT/$suite-apps.txt" 2>/dev/null || true)")
    fi
    if [ "$CONFORM_STAGE" = 1 ]; then
        summary+=("$suite conform: $(sed -n 's/^conform\[[a-z]*\]: //p' "$OUT/$suite-conform-check.txt" 2>/dev/null || true)")
    fi
    if [ -e "$OUT/$suite-cc.ran" ]; then
        summary+=("$suite congestion: $(grep -h '^cc-bottleneck: check' "$OUT/$suite-cc.txt" 2>/dev/null || echo 'no verdict')")
    fi
    if [ "$IMPAIR" = 1 ]; then
        summary+=("$suite impaired: $(sed -n 's/^\([0-9]* passed, [0-9]* failed, [0-9]* not run\)$/\1/p' "$OUT/$suite-impair.txt" 2>/dev/null || true)")
    fi
done
echo "== interop summary ($(since "$t_all")s; reports in $OUT)"
printf '  %s\n' "${summary[@]}"
exit $rc
