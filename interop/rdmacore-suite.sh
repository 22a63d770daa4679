#!/bin/sh
# rdmacore-suite.sh SUITE: run rdma-core's own test suite (python3-pyverbs
# ships it) on the lab guest's rxe0 and save its per-test outcomes (the
# unittest -v lines, module-marked as interop.RdmaCoreSuiteScript
# writes them) to interop/testdata/rdma-core/rxe0-SUITE.txt: the
# reference TestRdmaCoreSuite holds libgoroce.so's run to. SUITE is
# bookworm or trixie. The lab's variables (RXE_PEER_NETNS, _STATE, _TAP,
# _HOST_ADDR, _GUEST_ADDR) pass through, so a run may use an instance of
# its own; the guest is brought up, and down again at the end.
set -eu
suite=${1:-}
case $suite in
bookworm | trixie) ;;
*)
	echo "usage: interop/rdmacore-suite.sh bookworm|trixie" >&2
	exit 2
	;;
esac
cd "$(dirname "$0")/.."
out=interop/testdata/rdma-core/rxe0-$suite.txt
script=$(go run ./interop/cmd/rdmacoresuite script rxe0)
export RXE_PEER_SUITE=$suite
# The suite takes minutes under the guest's emulated CPU: exec's default
# bound (600 s) is too short for it.
export RXE_PEER_EXEC_TIMEOUT=${RXE_PEER_EXEC_TIMEOUT:-3000}
trap 'lab/rxe-peer.sh down >/dev/null 2>&1 || true' EXIT
lab/rxe-peer.sh up
# The suite's own exit status is not this script's: its failures are
# rxe's, recorded in the file (a crashed interpreter shows as a module
# without "Ran"); only a run that printed nothing is an error here.
lab/rxe-peer.sh exec "$script" >"$out.tmp" 2>&1 || true
if ! grep -q '^### exit ' "$out.tmp"; then
	echo "rdmacore-suite.sh: the suite did not run on $suite's rxe0:" >&2
	tail -n 20 "$out.tmp" >&2
	exit 1
fi
mv "$out.tmp" "$out"
echo "rdmacore-suite.sh: $(grep -c ' \.\.\. \|^ok$\|^skipped \|^ERROR$\|^FAIL$' "$out") outcomes in $out"
