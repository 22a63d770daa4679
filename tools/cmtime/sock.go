package cmtime

import (
	"context"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// sockServer is 56's sock_server (-S): accept -c TCP connections, close
// them, print the table. The first accept starts full connect; closing
// them all is its destroy id.
func (r *run) sockServer(ctx context.Context) int {
	n := r.cfg.Connections
	r.reset(n)
	r.printf("Server baseline socket setup")
	l, err := r.env.Listen("tcp4", net.JoinHostPort(r.tcpBind(), strconv.Itoa(int(r.cfg.Port))))
	if err != nil {
		return r.perror("bind", err)
	}
	defer l.Close()
	if r.env.Listening != nil {
		r.env.Listening(netip.AddrPortFrom(netip.IPv4Unspecified(), r.cfg.Port))
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	r.printf("Accept sockets")
	socks := make([]net.Conn, 0, n)
	for i := range n {
		s, err := l.Accept()
		if err != nil {
			for _, s := range socks {
				s.Close()
			}
			return r.perror("accept", err)
		}
		socks = append(socks, s)
		if i == 0 {
			r.start(stepFullConnect)
		}
	}
	r.end(stepFullConnect)
	r.printf("Closing sockets")
	r.start(stepDestroyID)
	for _, s := range socks {
		s.Close()
	}
	r.end(stepDestroyID)
	r.printf("Server baseline socket results:")
	r.report()
	return 0
}

// sockClient is 56's sock_client (-S): create -c sockets, then connect
// them on the work queue's threads, close them; socket(2) and connect(2)
// are timed one by one, as cmtime calls them.
func (r *run) sockClient(ctx context.Context) int {
	n := r.cfg.Connections
	r.reset(n)
	r.printf("Client baseline socket setup")
	family := unix.AF_INET
	if r.cfg.Addr.Is6() {
		family = unix.AF_INET6
	}
	// One Sockaddr per connect: unix.Connect writes its raw form into
	// it, so the -n threads may not share one (the race detector saw it).
	sockaddr := func() unix.Sockaddr {
		if family == unix.AF_INET6 {
			return &unix.SockaddrInet6{Port: int(r.cfg.Port), Addr: r.cfg.Addr.As16()}
		}
		return &unix.SockaddrInet4{Port: int(r.cfg.Port), Addr: r.cfg.Addr.As4()}
	}
	fds := make([]int, n)
	for i := range fds {
		fds[i] = -1
	}
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	r.start(stepFullConnect)
	r.printf("Creating sockets")
	err := r.timed(n, stepCreateID, func(i int) error {
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		r.mu.Lock()
		fds[i] = fd
		r.mu.Unlock()
		return err
	})
	if err != nil {
		return r.perror("socket", err)
	}
	r.printf("Connecting sockets")
	if err := r.timed(n, stepConnect, func(i int) error { return connect(ctx, fds[i], sockaddr()) }); err != nil {
		return r.perror("connect", err)
	}
	r.end(stepFullConnect)
	r.printf("Closing sockets")
	r.start(stepDestroyID)
	for i, fd := range fds {
		unix.Close(fd)
		fds[i] = -1
	}
	r.end(stepDestroyID)
	r.printf("Client baseline socket results:")
	r.report()
	return 0
}

// connect is connect(2) on a non-blocking socket, waited for until it
// completes or ctx ends (a signal), as cmtime's blocking connect would be
// but for the signal.
func connect(ctx context.Context, fd int, sa unix.Sockaddr) error {
	err := unix.Connect(fd, sa)
	if err != unix.EINPROGRESS {
		return err
	}
	for {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(p, 100)
		if err != nil && err != unix.EINTR {
			return err
		}
		if n > 0 {
			e, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			if err != nil {
				return err
			}
			if e != 0 {
				return unix.Errno(e)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
