package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netns"
)

// TestLibfabric runs Debian's fi_pingpong (libfabric 1.17, libfabric-bin)
// across a veth pair, server and client each in its network namespace with
// the library preloaded, through libfabric's verbs provider: its msg
// endpoint (an RC QP the RDMA CM connects: the server binds "localhost",
// which the kernel's rdma_cm leaves without a device, and listens on the
// devices' own addresses), ofi_rxm's rdm endpoint over it, and the dgram
// endpoint (UD). fi_pingpong checks every byte it receives (-c); both
// sides must print their result line with every iteration acknowledged,
// and a capture of each side's veth proves RoCE of the endpoint's
// transport carried the data each way, TCP (fi_pingpong's exchange of
// addresses) less than a tenth of it.
func TestLibfabric(t *testing.T) {
	bin, err := exec.LookPath("fi_pingpong")
	if err != nil {
		t.Skipf("fi_pingpong is not installed (Debian's libfabric-bin; make deps installs it): %v", err)
	}
	p := netns.New(t, netns.Config{Subnet: 45})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 500
	for _, tc := range []struct {
		ep, provider string
		transport    bth.Transport
		size         int // a dgram message fits one packet: the IB MTU, 1024
	}{
		{"msg", "verbs", bth.TransportRC, 4096},
		{"rdm", "verbs;ofi_rxm", bth.TransportRC, 4096},
		{"dgram", "verbs", bth.TransportUD, 1024},
	} {
		size := int64(tc.size)
		t.Run(tc.ep, func(t *testing.T) {
			port := freePort(t)
			args := []string{bin, "-p", tc.provider, "-e", tc.ep, "-S", strconv.Itoa(tc.size), "-I", strconv.Itoa(n), "-c"}
			// ofi_rxm sizes its CQs from the universe (256 peers by
			// default), past goroce's max_cqe as past rxe's.
			env := []string{"FI_UNIVERSE_SIZE=16"}
			srv := append(append([]string{}, args...), "-B", strconv.Itoa(port))
			cli := append(append([]string{}, args...), "-P", strconv.Itoa(port), p.A.IPv4.String())
			out, srvOut, counts, err := runCaptured(ctx, p, env, port, srv, cli)
			if err != nil {
				t.Fatalf("fi_pingpong -e %s: %v\nclient:\n%s\nserver:\n%s", tc.ep, err, out, srvOut)
			}
			for side, o := range map[string]string{"client": out, "server": srvOut} {
				if !hasPingpongLine(o, n) {
					t.Errorf("%s: no result line with %d sent and acknowledged:\n%s", side, n, o)
				}
			}
			for side, c := range map[string]sideCounts{"server": counts.server, "client": counts.client} {
				t.Logf("%s received %v payload bytes by transport, %d by TCP", side, c.payload, c.tcp)
				if got := c.payload[tc.transport]; got < size*n {
					t.Errorf("%s received %d bytes of RoCE %v payload, want at least the %d it was sent (by transport: %v)",
						side, got, tc.transport, size*n, c.payload)
				}
				if c.tcp*10 >= size*n {
					t.Errorf("TCP carried %d bytes to the %s, not under a tenth of the %d moved", c.tcp, side, size*n)
				}
			}
		})
	}
}

// hasPingpongLine reports whether out has fi_pingpong's result line with n
// messages sent and n acknowledged: "4k 500 =500 3.9m 0.29s ...".
func hasPingpongLine(out string, n int) bool {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 8 && f[1] == strconv.Itoa(n) && f[2] == "="+strconv.Itoa(n) {
			return true
		}
	}
	return false
}
