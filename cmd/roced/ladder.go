package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/goroce/goroce/ladder"
)

// ladderOptions are roced decode's --ladder flags.
type ladderOptions struct {
	on       bool
	qp       string // --qp: a QPN, decimal or 0x hex
	packets  string // --packets N-M
	count    int    // --count N
	qpn      uint32
	from, to int // frame numbers, to 0: no end
}

func (o *ladderOptions) parse() error {
	if o.qp != "" {
		n, err := strconv.ParseUint(o.qp, 0, 24)
		if err != nil {
			return fmt.Errorf("--qp %q: want a QP number (0x11 or 17)", o.qp)
		}
		o.qpn = uint32(n)
	}
	if o.packets != "" {
		a, b, dash := strings.Cut(o.packets, "-")
		var err error
		if o.from, err = strconv.Atoi(a); err != nil || o.from < 1 {
			return fmt.Errorf("--packets %q: want N-M, N- or N, frame numbers from 1", o.packets)
		}
		o.to = o.from
		if dash {
			o.to = 0
			if b != "" {
				if o.to, err = strconv.Atoi(b); err != nil || o.to < o.from {
					return fmt.Errorf("--packets %q: want N-M with M at least N", o.packets)
				}
			}
		}
	}
	if o.count < 0 {
		return fmt.Errorf("--count %d: want a positive count", o.count)
	}
	return nil
}

// runLadder draws each capture as a ladder diagram.
func runLadder(o ladderOptions, names []string, stdout, stderr io.Writer) int {
	if err := o.parse(); err != nil {
		fmt.Fprintln(stderr, "roced decode:", err)
		return 2
	}
	status := 0
	for _, name := range names {
		if len(names) > 1 {
			fmt.Fprintf(stdout, "==> %s <==\n", name)
		}
		var l ladder.Ladder
		f, err := os.Open(name)
		if err == nil {
			err = l.ReadPcap(f)
			f.Close()
		}
		if err != nil {
			// Draw what was read up to the damage.
			fmt.Fprintf(stderr, "roced decode: %s: %v\n", name, err)
			status = 1
		}
		d := l.Diagram()
		n := 0
		d = d.Select(func(a ladder.Arrow) bool {
			switch {
			case o.qp != "" && !d.OnQP(a, o.qpn),
				o.from > 0 && a.Num < o.from,
				o.to > 0 && a.Num > o.to,
				o.count > 0 && n >= o.count:
				return false
			}
			n++
			return true
		})
		if err := d.WriteText(stdout); err != nil {
			fmt.Fprintln(stderr, "roced decode:", err)
			return 1
		}
		fmt.Fprintf(stderr, "%s: %d RoCEv2 packets, %d drawn\n", name, l.Len(), len(d.Arrows))
	}
	return status
}
