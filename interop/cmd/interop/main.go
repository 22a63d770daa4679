// Command interop runs goroce's interop matrix: every roced tool command
// against the real rdma-core and perftest programs, in both directions,
// and prints one line per case (case, direction, result, figure).
//
// Peers:
//
//	-peer self       roced against a second roced over loopback (no privilege)
//	-peer lab        roced against Linux rxe in the rxe-peer VM (root)
//	-peer lab-pair   the real tools on rxeA against rxeB inside the VM:
//	                 checks the harness and the lab, no roced involved
//	-peer lab-guestbench
//	                 roced against itself beside rxe against itself on the
//	                 same veth inside the VM: ib_write_bw and ib_send_lat
//	                 between rxeA and rxeB, then a static roced's write_bw
//	                 and send_lat between their addresses, in one table
//	-peer lab-apps   real software over libgoroce.so on the host against
//	                 the same on the guest's rxe0: qperf both ways (the RC
//	                 tests over the RDMA CM, the refused UC/UD tests as rxe
//	                 refuses them) and rdma-core's own test suite
//	-peer remote     roced against a host with a real HCA, over ssh
//	                 (--peer-host, --peer-dev, --peer-gid) or, with --print,
//	                 printing the peer's commands for a person to run
//
// Examples:
//
//	interop -peer self
//	interop -peer lab -json lab.json -artifacts /tmp/interop
//	interop -peer remote --peer-host lab1 --peer-dev mlx5_0 --peer-gid 3
//	interop -peer remote --peer-host 10.0.0.7 --peer-dev mlx5_0 --peer-gid 3 --print -run rc_pingpong
//	interop -peer lab-guestbench -json bench.json
//
// The exit status is 0 when every case passed, 1 when one failed or did
// not run, 2 on a usage or setup error.
package main

import (
	"os"

	"github.com/goroce/goroce/interop"
)

func main() { os.Exit(interop.Command(os.Args[1:], os.Stdout, os.Stderr)) }
