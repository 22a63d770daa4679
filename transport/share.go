package transport

// Sharer is a port 4791 that several processes of a host share, as they
// share one rxe device (package share's Member is one). A server owns the
// port, hands each process the packets of its own QPs (their QPNs lie in
// the process's block) and of its own connections (its CM's communication
// IDs lie in the block too), and the REQs for the services it listens on.
type Sharer interface {
	// Block returns this process's block: QPNs Block<<12 | 1..0xfff, and
	// CM communication IDs Block<<20 | 0..0xfffff. Block 0 is the owner's,
	// the process that bound the port itself and lets a server join it
	// (udp.Config.Owner): QPNs below nic.MemberQPNBase, communication IDs
	// below 1<<31.
	Block() uint32
	// Listen asks the server for the connection requests (REQ, SIDR_REQ)
	// of a service ID; it fails if another process listens on it.
	Listen(serviceID uint64) error
	// Unlisten gives a service ID back.
	Unlisten(serviceID uint64)
}

// Share returns the port the device shares with other processes, or nil
// when it has one of its own (Options.Share).
func (d *Device) Share() Sharer { return d.share }
