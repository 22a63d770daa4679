package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/internal/netns"
	"golang.org/x/sys/unix"
)

// ucxCase is one ucx_perftest run: the test, its message size and count,
// and which side the data arrives at (the server for sends and puts, the
// client for gets).
type ucxCase struct {
	test     string
	size, n  int
	atClient bool
	args     []string // more of the client's flags (-R 99: the percentile a latency row shows)
}

var ucxCases = []ucxCase{
	{test: "tag_lat", size: 4096, n: 500},
	{test: "tag_bw", size: 65536, n: 200},
	{test: "ucp_put_bw", size: 65536, n: 200},
	{test: "ucp_get", size: 65536, n: 200, atClient: true},
}

// ucxTransports are the UCX_TLS lists of TestUCXPerftest, each with the
// BTH transport that must carry the data. rc_verbs connects endpoint to
// endpoint: UCP's wireup needs a transport that reaches an interface
// (as with rxe or mlx5), here ud_verbs as an auxiliary one only
// (":aux"), so the data itself goes over RC.
var ucxTransports = []struct {
	tls       string
	name      string
	transport bth.Transport
}{
	{"rc_verbs,ud_verbs:aux,self", "rc_verbs", bth.TransportRC},
	{"ud_verbs,self", "ud_verbs", bth.TransportUD},
}

// TestUCXPerftest runs Debian's ucx_perftest (UCX 1.13) across a veth
// pair, server and client each in its network namespace with the library
// preloaded: tag_lat, tag_bw, ucp_put_bw and ucp_get, over rc_verbs and
// over ud_verbs on goroce0:1 (UCX_NET_DEVICES), every run completing with
// its figures. A capture on the receiving side of each run proves RoCE
// carried the data: the payload bytes of the RoCEv2 packets (UDP 4791) of
// the expected transport that arrived there are at least the bytes the
// test moved, and TCP (ucx_perftest's own exchange of addresses and
// results) carried less than a tenth of them. Counted as received, not
// as sent: a capture of the sender's veth sees its GSO super-packets, not
// the frames on the link. Needs root for the namespaces and ucx-utils
// (.ci/run installs it).
func TestUCXPerftest(t *testing.T) {
	perftest := ucxTool(t, "ucx_perftest")
	p := netns.New(t, netns.Config{Subnet: 43})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, tr := range ucxTransports {
		for _, tc := range ucxCases {
			t.Run(tr.name+"/"+tc.test, func(t *testing.T) {
				out, counts, err := runUCXPerftest(ctx, t, p, perftest, tr.tls, tc)
				if err != nil {
					t.Fatal(err)
				}
				final := ucxFinal(out)
				if final == nil {
					t.Fatalf("no Final: line:\n%s", out)
				}
				c := counts.server
				if tc.atClient {
					c = counts.client
				}
				t.Logf("%s; received %v payload bytes by transport, %d by TCP",
					strings.Join(final, " "), c.payload, c.tcp)
				moved := int64(tc.size * tc.n)
				if got := c.payload[tr.transport]; got < moved {
					t.Errorf("RoCE %v payload received: %d bytes, want at least the %d the test moved (by transport: %v)",
						tr.transport, got, moved, c.payload)
				}
				if c.tcp*10 >= moved {
					t.Errorf("TCP carried %d bytes to the receiving side, not under a tenth of the %d moved", c.tcp, moved)
				}
			})
		}
	}
}

// ucxFinal returns the fields of ucx_perftest's "Final:" line: the
// iterations, the latency's percentile (-R, 50 by default), average and
// overall (usec), the bandwidth's average and overall (MB/s), the message
// rate's average and overall; nil without one.
func ucxFinal(out string) []string {
	var final []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 9 && f[0] == "Final:" {
			final = f
		}
	}
	return final
}

// sideCounts are the bytes one veth received during a run.
type sideCounts struct {
	payload map[bth.Transport]int64 // RoCEv2 payload bytes (BTH and its extensions, pad and ICRC left out), by transport
	tcp     int64                   // TCP payload bytes
}

// runUCXPerftest runs one server and one client of ucx_perftest, capturing
// what each side's veth receives, and returns the client's output.
func runUCXPerftest(ctx context.Context, t testing.TB, p *netns.Pair, perftest, tls string, tc ucxCase) (string, struct{ server, client sideCounts }, error) {
	port := freePort(t)
	args := append([]string{p.A.IPv4.String(), "-p", strconv.Itoa(port),
		"-t", tc.test, "-s", strconv.Itoa(tc.size), "-n", strconv.Itoa(tc.n), "-w", "10"}, tc.args...)
	out, srvOut, counts, err := runCaptured(ctx, p, []string{"UCX_TLS=" + tls, "UCX_NET_DEVICES=goroce0:1"}, port,
		[]string{perftest, "-p", strconv.Itoa(port)}, append([]string{perftest}, args...))
	if err != nil {
		return out, counts, fmt.Errorf("ucx_perftest -t %s over %s: %v\nclient:\n%s\nserver:\n%s", tc.test, tls, err, out, srvOut)
	}
	return out, counts, nil
}

// runCaptured runs a server (srv, argv) in p.A and its client (cli) in
// p.B, both preloaded with the library on their veth and env added, the
// client once the server listens on TCP port (the tools' own exchange of
// addresses), capturing what each side's veth receives. It returns the
// client's and the server's output; an error if either fails.
func runCaptured(ctx context.Context, p *netns.Pair, env []string, port int, srv, cli []string) (string, string, struct{ server, client sideCounts }, error) {
	var counts struct{ server, client sideCounts }
	capA, err := startCapture(p.A)
	if err != nil {
		return "", "", counts, err
	}
	capB, err := startCapture(p.B)
	if err != nil {
		capA.stop()
		return "", "", counts, err
	}
	withEnv := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.Env = append(cmd.Env, env...)
		return cmd
	}
	var srvOut bytes.Buffer
	sc := withEnv(preloaded(ctx, p.A.Link, srv[0], srv[1:]...))
	sc.Stdout, sc.Stderr = &srvOut, &srvOut
	if err := p.A.Do(sc.Start); err != nil {
		capA.stop()
		capB.stop()
		return "", "", counts, err
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- sc.Wait() }()
	var out []byte
	err = waitListening(ctx, sc.Process.Pid, port, srvDone)
	if err == nil {
		err = p.B.Do(func() error {
			var err error
			out, err = withEnv(preloaded(ctx, p.B.Link, cli[0], cli[1:]...)).CombinedOutput()
			return err
		})
		if err != nil {
			sc.Process.Kill()
		}
		if serr := <-srvDone; err == nil && serr != nil {
			err = fmt.Errorf("server: %v", serr)
		}
	} else {
		sc.Process.Kill()
		<-srvDone
	}
	var errA, errB error
	counts.server, errA = capA.stop()
	counts.client, errB = capB.stop()
	if err == nil && errA != nil {
		err = fmt.Errorf("capture on the server's side: %w", errA)
	}
	if err == nil && errB != nil {
		err = fmt.Errorf("capture on the client's side: %w", errB)
	}
	return string(out), srvOut.String(), counts, err
}

// capture counts the IP packets (v4 and v6) an interface receives (AF_PACKET,
// PACKET_HOST: addressed to this host, not the ones it sends).
type capture struct {
	fd     int
	wake   [2]int // a pipe: stop writes to it to end the reader's poll
	done   chan struct{}
	mu     sync.Mutex
	counts sideCounts
	err    error
}

func startCapture(e *netns.End) (*capture, error) {
	c := &capture{fd: -1, done: make(chan struct{}), counts: sideCounts{payload: map[bth.Transport]int64{}}}
	err := e.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("capture: AF_PACKET socket: %w", err)
		}
		c.fd = fd
		// Room for a whole run's frames should the reader fall behind on
		// a loaded machine; drops are counted and fail the run.
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: e.Index})
	})
	if err == nil {
		err = unix.Pipe2(c.wake[:], unix.O_CLOEXEC)
	}
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return nil, err
	}
	go c.read()
	return c, nil
}

// read counts packets until stop writes to the pipe, then takes what the
// socket still holds without waiting: every frame the receiving process
// consumed was queued here before the stack delivered it (the packet tap
// runs first), so nothing the run received is missed.
func (c *capture) read() {
	defer close(c.done)
	buf := make([]byte, 1<<16)
	fds := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}, {Fd: int32(c.wake[0]), Events: unix.POLLIN}}
	stopping := false
	for {
		if !stopping {
			if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
				c.fail(err)
				return
			}
			stopping = fds[1].Revents != 0
		}
		n, from, err := unix.Recvfrom(c.fd, buf, unix.MSG_DONTWAIT)
		if err == unix.EAGAIN {
			if stopping {
				return
			}
			continue
		}
		if err != nil {
			c.fail(err)
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_HOST {
			c.count(buf[:n])
		}
	}
}

func (c *capture) fail(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// count adds an IPv4 or IPv6 packet's TCP or RoCEv2 payload.
func (c *capture) count(pkt []byte) {
	var proto uint8
	var l4 []byte
	switch {
	case len(pkt) >= inet.IPv4HeaderLen && inet.IPv4(pkt).Version() == 4:
		ip := inet.IPv4(pkt)
		total := int(ip.TotalLength())
		if total > len(ip) || ip.HeaderLen() > total {
			return
		}
		proto, l4 = ip.Protocol(), ip[ip.HeaderLen():total]
	case len(pkt) >= inet.IPv6HeaderLen && inet.IPv6(pkt).Version() == 6:
		// No extension headers: neither RoCEv2 nor TCP here sends any.
		ip := inet.IPv6(pkt)
		end := inet.IPv6HeaderLen + int(ip.PayloadLength())
		if end > len(ip) {
			return
		}
		proto, l4 = ip.NextHeader(), ip[inet.IPv6HeaderLen:end]
	default:
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch proto {
	case unix.IPPROTO_TCP:
		if len(l4) >= 20 {
			c.counts.tcp += int64(len(l4) - int(l4[12]>>4)*4)
		}
	case unix.IPPROTO_UDP:
		if len(l4) >= 8 && inet.UDP(l4).DstPort() == 4791 {
			if pkt, err := bth.Parse(l4[8:]); err == nil {
				c.counts.payload[pkt.OpCode().Transport()] += int64(pkt.PayloadLen())
			}
		}
	}
}

// stop ends the capture and returns its counts, or why they prove
// nothing: the reader failed, or the kernel dropped frames.
func (c *capture) stop() (sideCounts, error) {
	unix.Write(c.wake[1], []byte{0})
	<-c.done
	st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	unix.Close(c.fd)
	unix.Close(c.wake[0])
	unix.Close(c.wake[1])
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil:
		return c.counts, c.err
	case err != nil:
		return c.counts, fmt.Errorf("PACKET_STATISTICS: %w", err)
	case st.Drops != 0:
		return c.counts, fmt.Errorf("%d frames dropped", st.Drops)
	}
	return c.counts, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
