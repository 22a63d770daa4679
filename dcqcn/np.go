package dcqcn

import "time"

// NP is the notification point of one receiving QP: it answers packets
// that arrive marked Congestion Experienced with CNPs to their sender,
// at most one per np_min_time_between_cnps (mlx5 paces per QP). The zero
// NP is ready; the QP's lock guards it.
type NP struct {
	last time.Time
	sent bool
}

// Marked handles a CE-marked packet received at now and reports whether
// a CNP should go back for it.
func (n *NP) Marked(p *Params, now time.Time) bool {
	if n.sent && now.Sub(n.last) < us(p.MinTimeBetweenCNPs) {
		return false
	}
	n.last, n.sent = now, true
	return true
}
