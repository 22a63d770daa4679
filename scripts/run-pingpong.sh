#!/usr/bin/env bash
# run-pingpong.sh: an RC ping-pong between two roced processes over UDP on
# loopback, printing what ibv_rc_pingpong prints: the server on 127.0.0.1,
# the client on 127.0.0.2 connecting to it, the tool's defaults (4096
# bytes, 1000 iterations) and -g 1 (the IPv4 GID, as on rxe).
#
# Usage: scripts/run-pingpong.sh [more rc_pingpong flags for both sides]
#   ROCED  the roced binary (default bin/roced, built if missing)
#   PORT   the TCP port of the exchange (default 18515)
# Exit status: 0 when both sides succeed, else the first failure's status.
set -u
cd "$(dirname "$0")/.."
ROCED=${ROCED:-bin/roced}
PORT=${PORT:-18515}
if [ ! -x "$ROCED" ]; then
	go build -o "$ROCED" ./cmd/roced || exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

srv_cmd=("$ROCED" rc_pingpong -g 1 -d 127.0.0.1 -p "$PORT" "$@")
cli_cmd=("$ROCED" rc_pingpong -g 1 -d 127.0.0.2 -p "$PORT" "$@" 127.0.0.1)

# The server waits for its client; bound it in case the client never comes.
timeout 120 "${srv_cmd[@]}" >"$tmp/srv.out" 2>"$tmp/srv.err" &
srv=$!
# Like ibv_rc_pingpong, the client does not wait for the server to listen:
# try again while the server is still starting.
for _ in $(seq 100); do
	"${cli_cmd[@]}" >"$tmp/cli.out" 2>"$tmp/cli.err"
	cli_rc=$?
	grep -q "^Couldn't connect to " "$tmp/cli.err" || break
	kill -0 "$srv" 2>/dev/null || break
	sleep 0.1
done
if [ "$cli_rc" -ne 0 ]; then
	# A client that failed leaves the server waiting: stop it.
	sleep 2
	kill "$srv" 2>/dev/null
fi
wait "$srv"
srv_rc=$?

echo "== server: ${srv_cmd[*]} (exit $srv_rc)"
cat "$tmp/srv.out" "$tmp/srv.err"
echo "== client: ${cli_cmd[*]} (exit $cli_rc)"
cat "$tmp/cli.out" "$tmp/cli.err"
[ "$srv_rc" -ne 0 ] && exit "$srv_rc"
exit "$cli_rc"
