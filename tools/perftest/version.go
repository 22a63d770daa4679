package perftest

import (
	"bytes"
	"fmt"
	"strconv"
)

// VersionSize is the size of the version step: char version[MAX_VERSION].
const VersionSize = 16

// Version is a perftest version string as sent in the first step ("6.06").
// Peers compare versions with atof(), so Version orders by that value.
type Version string

// The versions whose exchange this package implements byte for byte.
const (
	V606 Version = "6.06" // Debian bookworm (perftest 4.5-0.17): trailing "done"
	V624 Version = "6.24" // Debian trixie (25.01.0+0.80): no "done"
	V628 Version = "6.28" // negotiate_params, sent to any peer
	V629 Version = "6.29" // negotiate_params only with peers >= 6.28
)

// Oldest peer the tools accept (check_version_compatibility).
const minPeer = 5.70

// Float is the value the C code's atof() sees; 0 for garbage.
func (v Version) Float() float64 {
	s := string(v)
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' || (end == 0 && (s[end] == '-' || s[end] == '+'))) {
		end++
	}
	for end > 0 {
		if f, err := strconv.ParseFloat(s[:end], 64); err == nil {
			return f
		}
		end--
	}
	return 0
}

// atLeast compares the way the tools do: atof(rem_version) >= x, where the C
// side holds x as a float or double; a small epsilon absorbs that.
func (v Version) atLeast(x float64) bool { return v.Float() >= x-1e-6 }

func (v Version) is(w Version) bool {
	d := v.Float() - w.Float()
	return d > -1e-6 && d < 1e-6
}

// Marshal is the 16-byte version step: the string, NUL padded.
func (v Version) Marshal() ([]byte, error) {
	if len(v) == 0 || len(v) >= VersionSize {
		return nil, fmt.Errorf("perftest: version %q does not fit the %d-byte field", string(v), VersionSize)
	}
	b := make([]byte, VersionSize)
	copy(b, v)
	return b, nil
}

// ParseVersion reads a peer's version step.
func ParseVersion(b []byte) (Version, error) {
	if len(b) != VersionSize {
		return "", fmt.Errorf("perftest: version field is %d bytes, want %d", len(b), VersionSize)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	v := Version(b)
	if !v.atLeast(minPeer) {
		// The tools exit here with this message.
		return v, fmt.Errorf("perftest: peer version %q: Current implementation is not compatible with versions older than 5.70", string(b))
	}
	return v, nil
}

// dialect is the implemented version whose behaviour a version has.
func (v Version) dialect() Version {
	switch {
	case v.atLeast(6.29):
		return V629
	case v.atLeast(6.28):
		return V628
	case v.atLeast(6.24):
		return V624
	}
	return V606
}

// sendsDone reports whether a tool of version v writes "done\0" after the
// final handshake. perftest dropped it in 2023 (linux-rdma/perftest#220,
// a race with the peer's close); 6.06 has it, 6.24 does not. Where in
// between it went is not settled, so versions below 6.24 are taken to
// send it: no perftest reads it, so this only matters for byte fidelity.
func (v Version) sendsDone() bool { return v.dialect() == V606 }

// Negotiates reports whether a side of version local, talking to a peer of
// version peer, runs the negotiate_params step. 6.28 sends its struct to
// anyone; 6.29 and later only when both sides are >= 6.28.
func Negotiates(local, peer Version) bool {
	if local.dialect() == V628 || peer.dialect() == V628 {
		return true
	}
	return local.atLeast(6.28) && peer.atLeast(6.28)
}

// DefaultClientVersion is what roced claims as a client. The client writes
// its version first, before it knows the server's, so it claims the newest
// dialect implemented: a 6.29 (or later) server then negotiates the test
// parameters and both sides catch a mismatched command line before any
// traffic, older servers ignore the claim (every version gate they have is
// below 6.06), and a server newer than 6.29 falls back to the frozen 6.29
// struct for it.
const DefaultClientVersion = V629

// ServerClaim is what roced claims as a server once it has read the
// client's version: the newest implemented dialect not newer than the
// client's. The server writes second, so it can mirror the client: a real
// client then sees a peer of its own kind (the same negotiation decision,
// the same report layout), and roced's bytes are exactly what a real
// server of that version would send. A client newer than 6.29 is answered
// with 6.29, which makes it use the legacy negotiation struct.
func ServerClaim(client Version) Version { return client.dialect() }
