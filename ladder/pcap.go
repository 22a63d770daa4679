package ladder

import (
	"errors"
	"fmt"
	"io"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
)

// ReadPcap adds the RoCEv2 packets of a classic pcap or pcapng capture,
// numbered by their frame number in the file (as roced decode numbers
// them). Other packets, and packets too short to hold a BTH, are skipped.
// A packet the snap length cut is added with Cut set, the bytes it lacks
// zero.
func (l *Ladder) ReadPcap(r io.Reader) error {
	pr, err := pcapfile.NewReader(r)
	if err != nil {
		return err
	}
	for n := 1; ; n++ {
		p, err := pr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("after packet %d: %w", n-1, err)
		}
		data := p.Data
		if p.Info.Length > len(data) {
			data = make([]byte, p.Info.Length)
			copy(data, p.Data)
		}
		fr, err := bth.DecodeLink(bth.LinkType(p.LinkType), data)
		if err != nil || len(fr.RoCE()) < bth.BTHLen {
			continue
		}
		// Headers the snap length cut are zeros: not worth a column.
		if len(data) > len(p.Data) {
			if pk, err := bth.Parse(fr.RoCE()); err != nil || cap(data)-cap(fr.RoCE())+pk.HdrLen() > len(p.Data) {
				continue
			}
		}
		l.Add(Packet{Num: n, Time: p.Info.Timestamp, Frame: fr, Cut: len(data) > len(p.Data), Comments: p.Comments})
	}
}
