package endpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/transport"
)

// Every process that opens devices through Open serves their counters on
// a unix socket, one per process, so "roced stats" can list what every
// running goroce instance has counted, as "rdma statistic show" does for
// kernel devices. The socket lives in StatsDir as roced-PID.sock; it is
// created by the first Open and removed when the last endpoint closes. A
// process killed before that leaves a socket nobody answers on: readers
// skip it and remove it once its process is gone.
//
// The protocol is one JSON document (StatsReply) written to whoever
// connects, then the connection is closed.

// StatsReply is what a process's stats socket answers.
type StatsReply struct {
	PID     int           `json:"pid"`     // the answering process
	Command string        `json:"command"` // its roced command (write_bw, rc_pingpong)
	Devices []DeviceStats `json:"devices"` // its open devices
	// CMIDs are the process's listening connection manager IDs (those of
	// a program on libgoroce.so, and of roced's tools: ServeCM), as "rdma
	// resource show cm_id" lists the kernel's: a CM listener inside a
	// process is seen from outside here.
	CMIDs []CMID `json:"cm_ids,omitempty"`
}

// CMID is one listening RDMA CM ID of a process.
type CMID struct {
	Dev    string `json:"ifname"`   // the device it listens on (goroceN)
	Netdev string `json:"netdev"`   // that device's interface
	PS     string `json:"ps"`       // its port space: "TCP" or "UDP"
	State  string `json:"state"`    // "LISTEN"
	Src    string `json:"src-addr"` // the bound address and port (address:port)
}

// cmIDs, if set (SetCMIDs), lists the process's CM IDs for the report.
var cmIDs struct {
	sync.Mutex
	list func() []CMID
}

// SetCMIDs makes the process's stats socket report the CM IDs list
// returns (called with no lock of this package held).
func SetCMIDs(list func() []CMID) {
	cmIDs.Lock()
	cmIDs.list = list
	cmIDs.Unlock()
}

// ServeCM makes the stats socket list the listeners of m, the connection
// manager of e's device, as cm_ids of e's device (what SetCMIDs does for
// a program on libgoroce.so): a roced tool's server is then seen to listen
// from outside, as rdma(8) sees the kernel's.
func (e *Endpoint) ServeCM(m *cm.Manager) {
	statsServer.mu.Lock()
	e.cm = m
	statsServer.mu.Unlock()
}

// DeviceStats are one open device's counters.
type DeviceStats struct {
	Name     string         `json:"ifname"`   // goroceN, numbered within the process
	Port     int            `json:"port"`     // always 1
	Netdev   string         `json:"netdev"`   // the interface
	Link     string         `json:"link"`     // the link's name (nic.Info.Name)
	GID      string         `json:"gid"`      // the GID in use
	Counters []StatsCounter `json:"counters"` // the protocol and link counters
	// Deaths are the device's last QPs to enter ERR and why (at most 16,
	// oldest first: transport.Device.Deaths).
	Deaths []QPDeath `json:"qp_deaths,omitempty"`
	// DeathsTotal counts every QP of the device that entered ERR.
	DeathsTotal uint64 `json:"qp_deaths_total"`
}

// QPDeath is why one QP entered ERR (transport.Death), for roced explain.
type QPDeath struct {
	QPN     uint32         `json:"qpn"`           // the QP's number
	Type    string         `json:"type"`          // RC, UC, ...
	Cause   string         `json:"cause"`         // transport.Cause in words
	Rule    string         `json:"rule"`          // the rule that makes it fatal
	Summary string         `json:"summary"`       // transport.Death.Error: the one line
	Err     string         `json:"err,omitempty"` // the error behind the cause
	Trace   []TracedPacket `json:"trace"`         // the QP's last packets, oldest first
}

// TracedPacket is one packet of a QPDeath's trace (transport.TracedPacket): the
// datagram's first bytes from its IP header, and its whole length.
type TracedPacket struct {
	Out  bool   `json:"out"`  // sent, not received
	Len  int    `json:"len"`  // the datagram's length
	Head []byte `json:"head"` // its first bytes (transport.TraceSnap at most)
}

// deathsOf converts a device's deaths for the stats socket.
func deathsOf(ds []*transport.Death) []QPDeath {
	out := make([]QPDeath, 0, len(ds))
	for _, d := range ds {
		j := QPDeath{QPN: d.QPN, Type: d.Type.String(), Cause: d.Cause.String(), Rule: d.Rule, Summary: d.Error()}
		if d.Err != nil {
			j.Err = d.Err.Error()
		}
		for _, t := range d.Trace {
			j.Trace = append(j.Trace, TracedPacket{Out: t.Out, Len: t.Len, Head: t.Head})
		}
		out = append(out, j)
	}
	return out
}

// StatsCounter is one named counter.
type StatsCounter struct {
	Name  string `json:"name"`  // as rxe's hw_counters name it
	Value uint64 `json:"value"` // its value
}

// StatsDir returns the directory of the stats sockets:
// $XDG_RUNTIME_DIR/goroce, else /tmp/goroce-UID.
func StatsDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "goroce")
	}
	return filepath.Join(os.TempDir(), "goroce-"+strconv.Itoa(os.Getuid()))
}

// ownDir makes sure dir is a directory only the caller can use, as
// ssh-agent and tmux check theirs: /tmp/goroce-UID is a predictable name
// another local user could create first, or point elsewhere with a
// symbolic link, to read or replace the sockets. Absent, it is created
// with mode 0700; present, it must be a real directory (Lstat: a link is
// not followed) owned by the caller with mode 0700, or it is refused.
func ownDir(dir string) error { return ownDirOf(dir, os.Getuid()) }

func ownDirOf(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.Mkdir(dir, 0o700); err == nil {
			// The umask may have taken bits away; none are added back.
			err = os.Chmod(dir, 0o700)
		}
		if err != nil {
			return fmt.Errorf("stats socket directory %s: %w", dir, err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("stats socket directory %s: %w", dir, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	var why string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		why = "is a symbolic link"
	case !fi.IsDir():
		why = "is not a directory"
	case st == nil:
		why = "has no owner to check"
	case int(st.Uid) != uid:
		why = fmt.Sprintf("is owned by uid %d, not by this user (uid %d)", st.Uid, uid)
	case fi.Mode().Perm() != 0o700:
		why = fmt.Sprintf("has mode %#o, not 0700", fi.Mode().Perm())
	default:
		return nil
	}
	return fmt.Errorf("stats socket directory %s %s: refusing to use it", dir, why)
}

// WarnStats writes one line to w if the counters of e are not served
// (the tool goes on without them).
func (e *Endpoint) WarnStats(w io.Writer, argv0 string) {
	if e.StatsErr != nil {
		fmt.Fprintf(w, "%s: warning: %v; no counters for roced stats\n", argv0, e.StatsErr)
	}
}

// statsServer is the process's stats socket and the endpoints it reports.
var statsServer struct {
	mu        sync.Mutex
	endpoints map[*Endpoint]int // endpoint: device number
	next      int
	ln        *net.UnixListener
	path      string
	done      chan struct{}
}

// serveStats registers e with the process's stats socket, opening the
// socket if e is the first. A failure leaves e working, unreported: the
// counters are a diagnostic and must not stop a pingpong.
func (e *Endpoint) serveStats() error {
	s := &statsServer
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endpoints == nil {
		s.endpoints = map[*Endpoint]int{}
	}
	if s.ln == nil {
		dir := StatsDir()
		if err := ownDir(dir); err != nil {
			return err
		}
		path := filepath.Join(dir, "roced-"+strconv.Itoa(os.Getpid())+".sock")
		os.Remove(path) // left by an earlier process with our PID
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return fmt.Errorf("stats socket: %w", err)
		}
		s.ln, s.path, s.done = ln, path, make(chan struct{})
		s.next = 0
		go acceptStats(ln, s.done)
	}
	s.endpoints[e] = s.next
	s.next++
	e.StatsSocket = s.path
	return nil
}

// unserveStats removes e from the report, and the socket with the last
// endpoint.
func (e *Endpoint) unserveStats() {
	s := &statsServer
	s.mu.Lock()
	if _, ok := s.endpoints[e]; !ok {
		s.mu.Unlock()
		return
	}
	delete(s.endpoints, e)
	var ln *net.UnixListener
	var done chan struct{}
	if len(s.endpoints) == 0 && s.ln != nil {
		ln, done, s.ln = s.ln, s.done, nil
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close() // unlinks the socket file
		<-done
	}
}

func acceptStats(ln *net.UnixListener, done chan struct{}) {
	defer close(done)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		json.NewEncoder(c).Encode(statsSnapshot())
		c.Close()
	}
}

// statsSnapshot reads every registered endpoint's counters.
func statsSnapshot() StatsReply {
	r := StatsReply{PID: os.Getpid(), Command: strings.Join(os.Args, " ")}
	cmIDs.Lock()
	list := cmIDs.list
	cmIDs.Unlock()
	if list != nil {
		r.CMIDs = list()
	}
	s := &statsServer
	s.mu.Lock()
	defer s.mu.Unlock()
	es := make([]*Endpoint, 0, len(s.endpoints))
	for e := range s.endpoints {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return s.endpoints[es[i]] < s.endpoints[es[j]] })
	for _, e := range es {
		d := DeviceStats{Name: "goroce" + strconv.Itoa(s.endpoints[e]), Port: 1, Netdev: e.Netdev,
			Link: e.Link.Info().Name, GID: e.GID.String()}
		if e.cm != nil {
			for _, l := range e.cm.Listening() {
				r.CMIDs = append(r.CMIDs, CMID{Dev: d.Name, Netdev: e.Netdev, PS: l.PortSpace.String(),
					State: "LISTEN", Src: l.Addr.String()})
			}
		}
		cs := e.Device.Stats()
		if e.Faults != nil {
			cs = append(cs, e.Faults.Faults().List()...)
		}
		for _, c := range cs {
			d.Counters = append(d.Counters, StatsCounter{c.Name, c.Value})
		}
		ds, total := e.Device.Deaths()
		d.Deaths, d.DeathsTotal = deathsOf(ds), total
		r.Devices = append(r.Devices, d)
	}
	return r
}

// ReadStats asks the stats socket at path for its process's counters.
func ReadStats(path string) (StatsReply, error) {
	var r StatsReply
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return r, err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ErrNoInstance is returned by AllStats for a PID with no stats socket.
var ErrNoInstance = errors.New("no running goroce instance with that PID")

// AllStats reads every running instance's counters (or only pid's, if
// pid > 0), in PID order. Sockets whose process has exited are removed.
func AllStats(pid int) ([]StatsReply, error) {
	dir := StatsDir()
	if _, err := os.Lstat(dir); err == nil {
		// Sockets in a directory someone else controls could be anyone's.
		if err := ownDir(dir); err != nil {
			return nil, err
		}
	}
	paths, err := filepath.Glob(filepath.Join(dir, "roced-*.sock"))
	if err != nil {
		return nil, err
	}
	type sock struct {
		pid  int
		path string
	}
	var socks []sock
	for _, p := range paths {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "roced-"), ".sock"))
		if err != nil || pid > 0 && n != pid {
			continue
		}
		socks = append(socks, sock{n, p})
	}
	sort.Slice(socks, func(i, j int) bool { return socks[i].pid < socks[j].pid })
	var out []StatsReply
	for _, s := range socks {
		r, err := ReadStats(s.path)
		if err != nil {
			if !alive(s.pid) {
				os.Remove(s.path) // its process is gone: a stale socket
			}
			continue
		}
		out = append(out, r)
	}
	if pid > 0 && len(out) == 0 {
		return nil, fmt.Errorf("%w (%d) in %s", ErrNoInstance, pid, dir)
	}
	return out, nil
}

// alive reports whether a process exists (signal 0 probes without
// sending; EPERM means it exists under another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
