package rawudp

import (
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// batchConn is what ipv4.PacketConn and ipv6.PacketConn share: sendmmsg
// and recvmmsg on Linux.
type batchConn interface {
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
}

func batchOf(c *net.UDPConn) batchConn {
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		return ipv6.NewPacketConn(c)
	}
	return ipv4.NewPacketConn(c)
}

// messages makes n messages of size-byte buffers.
func messages(n, size int, to net.Addr) []ipv4.Message {
	ms := make([]ipv4.Message, n)
	for i := range ms {
		ms[i] = ipv4.Message{Buffers: [][]byte{make([]byte, size)}, Addr: to}
	}
	return ms
}

// batchWriter sends datagrams with sendmmsg.
type batchWriter struct {
	c  batchConn
	ms []ipv4.Message
}

func newBatchWriter(c *net.UDPConn, to net.Addr, size int) batchWriter {
	return batchWriter{c: batchOf(c), ms: messages(batch, size, to)}
}

// write sends k datagrams (k <= batch), as many calls as it takes.
func (w batchWriter) write(k int) error {
	for off := 0; off < k; {
		n, err := w.c.WriteBatch(w.ms[off:k], 0)
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// recvBatches counts datagrams read with recvmmsg until rx is closed.
func recvBatches(rx *net.UDPConn, size int, got, last *atomic.Int64) {
	c := batchOf(rx)
	ms := messages(batch, size, nil)
	for {
		n, err := c.ReadBatch(ms, 0)
		if err != nil {
			return
		}
		got.Add(int64(n))
		last.Store(time.Now().UnixNano())
	}
}
