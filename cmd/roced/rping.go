package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/tools/rping"
)

// librdmacm's rping, connecting through goroce's RDMA connection manager
// (package cm) and running rping's SEND/READ/WRITE loop (package
// tools/rping).

func init() {
	register("rping", "librdmacm's rping: RDMA CM connection, then SEND/READ/WRITE pings (-s server, -c client)",
		func(args []string, stdout, stderr io.Writer) int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runRping(ctx, args, stdout, stderr)
		})
}

// exitEINVAL is rping's exit status for a bad command line.
const exitEINVAL = 22

func runRping(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := rping.ParseFlags(args)
	if err != nil {
		if showsUsage(err) {
			// rping answers getopt's complaints (-h, an unknown option, a
			// missing argument) with its usage alone: it sets opterr 0.
			rping.Usage(stdout, "roced rping")
		} else {
			fmt.Fprintf(stderr, "roced rping: %s\n", strings.TrimPrefix(err.Error(), rping.ErrUsage.Error()+": "))
		}
		return exitEINVAL
	}
	ec := endpoint.Config{Link: cfg.Link, GID: -1, Pcap: cfg.Pcap}
	if cfg.Server {
		if cfg.Addr.IsValid() && !cfg.Addr.IsUnspecified() {
			ec.Dev = cfg.Addr.String()
		}
	} else {
		ec.Peer = cfg.Addr.String()
		if cfg.Source.IsValid() {
			ec.Dev = cfg.Source.String()
		}
	}
	ep, m, err := openCM(ec, stderr, "roced rping")
	if err != nil {
		if errors.Is(err, endpoint.ErrNoDevice) {
			fmt.Fprintf(stderr, "rdma_bind_addr: No such device (%v)\n", err)
		} else {
			fmt.Fprintf(stderr, "roced rping: %v\n", err)
		}
		return 1
	}
	defer ep.Close()
	defer m.Close()
	return rping.Run(ctx, cfg, rping.Env{Dev: ep.Device, CM: m, Local: ep.Addr, Stdout: stdout, Stderr: stderr})
}
