package endpoint

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/transport"
)

// udSend sends one UD message from e to f and waits for it to arrive.
func udSend(t *testing.T, e, f *Endpoint) {
	t.Helper()
	type side struct {
		pd *transport.PD
		cq *transport.CQ
		qp *transport.QP
		mr *transport.MR
	}
	mk := func(x *Endpoint) side {
		pd := x.Device.AllocPD()
		c := x.Device.CreateCQ(4)
		q, err := x.Device.CreateQP(pd, transport.QPInitAttr{Type: transport.UD, SendCQ: c, RecvCQ: c, Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []transport.QPAttr{{State: transport.Init, PortNum: 1, QKey: 1}, {State: transport.RTR}, {State: transport.RTS}} {
			mask := transport.AttrState
			if a.State == transport.Init {
				mask |= transport.AttrPKeyIndex | transport.AttrPort | transport.AttrQKey
			}
			if a.State == transport.RTS {
				mask |= transport.AttrSQPSN
			}
			if err := q.Modify(&a, mask); err != nil {
				t.Fatal(err)
			}
		}
		m, err := pd.Register(make([]byte, 256), transport.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		return side{pd, c, q, m}
	}
	a, b := mk(e), mk(f)
	ah, err := e.Device.CreateAH(a.pd, transport.AHAttr{DGID: f.GID, SGIDIndex: e.GIDIndex, PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostRecv(&transport.RecvWR{SGL: []transport.SGE{b.mr.SGE(0, 256)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{a.mr.SGE(0, 100)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]transport.WC
	if n, err := b.cq.PollWait(ctx, wc[:]); n != 1 || err != nil || wc[0].Status != transport.Success {
		t.Fatalf("UD receive: %v %+v", err, wc[0])
	}
}

func counter(d DeviceStats, name string) (uint64, bool) {
	for _, c := range d.Counters {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// TestStatsSocket: the first endpoint opens the process's stats socket,
// it reports every open device's counters as they change, and the last
// Close removes it.
func TestStatsSocket(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	e, err := Open(Config{Dev: "127.0.0.1", GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(Config{Dev: "127.0.0.2", GID: -1})
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	want := filepath.Join(StatsDir(), "roced-"+strconv.Itoa(os.Getpid())+".sock")
	if e.StatsErr != nil || e.StatsSocket != want || f.StatsSocket != want {
		t.Fatalf("stats socket %q %q (%v), want %q", e.StatsSocket, f.StatsSocket, e.StatsErr, want)
	}
	udSend(t, e, f)
	all, err := AllStats(0)
	if err != nil || len(all) != 1 {
		t.Fatalf("AllStats: %v %+v", err, all)
	}
	r := all[0]
	if r.PID != os.Getpid() || len(r.Devices) != 2 || r.Devices[0].Name != "goroce0" || r.Devices[1].Name != "goroce1" {
		t.Fatalf("reply %+v", r)
	}
	for _, c := range []struct {
		dev        int
		name       string
		atLeast    uint64
		exactlyOne bool
	}{{0, "sent_pkts", 1, true}, {0, "link_tx_packets", 1, true}, {1, "rcvd_pkts", 1, true}, {1, "rdma_recvs", 1, true}, {1, "link_rx_bytes", 100, false}} {
		v, ok := counter(r.Devices[c.dev], c.name)
		if !ok || v < c.atLeast || c.exactlyOne && v != 1 {
			t.Errorf("%s %s = %d (present %v)", r.Devices[c.dev].Name, c.name, v, ok)
		}
	}
	if d := r.Devices[0]; d.Netdev != "lo" || d.Link != "udp 127.0.0.1" || d.GID != "::ffff:127.0.0.1" || d.Port != 1 {
		t.Errorf("device %+v", d)
	}
	if one, err := AllStats(os.Getpid()); err != nil || len(one) != 1 {
		t.Errorf("AllStats(own PID): %v", err)
	}
	if _, err := AllStats(os.Getpid() + 1e6); !errors.Is(err, ErrNoInstance) {
		t.Errorf("AllStats(no such PID): %v", err)
	}
	e.Close()
	if r, err := ReadStats(want); err != nil || len(r.Devices) != 1 || r.Devices[0].Name != "goroce1" {
		t.Fatalf("after closing one: %v %+v", err, r)
	}
	f.Close()
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Fatalf("socket left after the last Close: %v", err)
	}
}

// TestStatsStaleSocket: a socket whose process died unanswered is skipped
// and removed; one whose process lives is left alone.
func TestStatsStaleSocket(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(StatsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(StatsDir(), "roced-"+strconv.Itoa(cmd.Process.Pid)+".sock")
	busy := filepath.Join(StatsDir(), "roced-1.sock") // init: alive, not a goroce
	for _, p := range []string{dead, busy} {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close()
	}
	if all, err := AllStats(0); err != nil || len(all) != 0 {
		t.Fatalf("AllStats over stale sockets: %v %+v", err, all)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("socket of exited PID %d left: %v", cmd.Process.Pid, err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("socket of a live PID removed: %v", err)
	}
}

// TestStatsDirChecked: the stats directory is used only if it is a real
// directory of this user with mode 0700 (created so if missing); anything
// else is refused naming the path, and the endpoint works without stats.
func TestStatsDirChecked(t *testing.T) {
	base := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", base)
	dir := StatsDir()
	other := filepath.Join(base, "elsewhere")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		setup func() error
		uid   int // the owner ownDirOf expects; -1: this process's
		want  string
	}{
		{"missing", func() error { return nil }, -1, ""},
		{"symlink", func() error { return os.Symlink(other, dir) }, -1, "is a symbolic link"},
		{"regular file", func() error { return os.WriteFile(dir, nil, 0o600) }, -1, "is not a directory"},
		{"wrong mode", func() error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chmod(dir, 0o755)
		}, -1, "has mode 0755, not 0700"},
		{"wrong owner", func() error { return os.Mkdir(dir, 0o700) }, os.Getuid() + 1, "is owned by uid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.RemoveAll(dir)
			if err := c.setup(); err != nil {
				t.Fatal(err)
			}
			uid := c.uid
			if uid < 0 {
				uid = os.Getuid()
			}
			err := ownDirOf(dir, uid)
			if c.want == "" {
				fi, serr := os.Lstat(dir)
				if err != nil || serr != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Fatalf("missing directory: %v %v %v", err, serr, fi)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), dir+" "+c.want) {
				t.Fatalf("got %v, want %q naming %s", err, c.want, dir)
			}
			if c.uid >= 0 {
				return // the process's own uid owns it: Open would accept it
			}
			if _, err := AllStats(0); err == nil || !strings.Contains(err.Error(), dir+" "+c.want) {
				t.Fatalf("roced stats read a refused directory: %v", err)
			}
			// The tool goes on without stats and says so in one line.
			e, err := Open(Config{Dev: "127.0.0.1", GID: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var w strings.Builder
			e.WarnStats(&w, "roced x")
			if e.StatsSocket != "" || e.StatsErr == nil || strings.Count(w.String(), "\n") != 1 || !strings.Contains(w.String(), dir) {
				t.Fatalf("socket %q, warning %q", e.StatsSocket, w.String())
			}
			if ents, _ := os.ReadDir(other); len(ents) != 0 {
				t.Fatalf("a socket was put through the link: %v", ents)
			}
		})
	}
}

// TestStatsCMIDs: what SetCMIDs lists is in the process's report, and
// nothing once it is unset.
func TestStatsCMIDs(t *testing.T) {
	want := []CMID{{Dev: "goroce0", Netdev: "eth0", PS: "TCP", State: "LISTEN", Src: "192.0.2.1:7471"}}
	SetCMIDs(func() []CMID { return want })
	got := statsSnapshot().CMIDs
	SetCMIDs(nil)
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("report's cm_ids %+v, want %+v", got, want)
	}
	if got := statsSnapshot().CMIDs; got != nil {
		t.Errorf("cm_ids %+v after SetCMIDs(nil)", got)
	}
}
