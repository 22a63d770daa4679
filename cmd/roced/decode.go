package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/goroce/goroce/bth/dissect"
)

func init() {
	register("decode", "print the RoCEv2 packets of a pcap or pcapng file, one line each", runDecode)
}

const decodeUsage = `usage: roced decode [-v] FILE.pcap|FILE.pcapng ...
       roced decode --ladder [--qp QPN] [--packets N-M] [--count N] FILE...

Prints one line per RoCEv2 packet (UDP destination port 4791) of each
capture, classic pcap or pcapng, with Ethernet, raw IP (link types 101,
228, 229) or Linux cooked (SLL 113, SLL2 276, as tcpdump -i any writes)
framing. Other packets are skipped. A line is

  N TIME SRC:PORT > DST:PORT OPCODE qpn=0xQPN psn=0xPSN ackreq=0|1 [FLAGS] [HEADERS] payload=LEN icrc=ok|BAD

  N        frame number in the file, from 1
  TIME     the timestamp as the file records it, seconds.fraction since
           the epoch (some captures hold monotonic clocks: printed as is)
  OPCODE   the opcode's name, e.g. "RC SEND Only", "UD SEND Only", "CNP"
  FLAGS    se (solicited event), fecn, becn, mig, pkey=0xKEY when not
           0xffff, pad=N when not 0
  HEADERS  the extended headers' key fields:
             reth va=0xVA rkey=0xKEY dmalen=N
             aeth ACK credits=N|invalid msn=N
             aeth NAK PSN sequence error msn=N   (and the other NAK codes)
             aeth RNR NAK timer=12 (640µs) msn=N
             deth qkey=0xKEY srcqp=0xQPN
             imm=0xDATA                    immediate data
             ieth rkey=0xKEY               SEND with Invalidate
             atomic va=0xVA rkey=0xKEY swap=0xV compare=0xV   (CmpSwap)
             atomic va=0xVA rkey=0xKEY add=0xV                (FetchAdd)
             atomicack orig=0xV
             xrceth srq=0xN, rdeth eecnxt=0xN, feth sel=N plt=N
  LEN      payload bytes, pad excluded
  icrc=ok  the invariant CRC matches; icrc=BAD when it does not; icrc=cut
           when the capture's snap length cut the packet (tcpdump -s): its
           headers are decoded, "[captured N of M bytes]" follows, and a
           packet cut inside its transport headers is malformed

A packet to port 4791 that is not a valid RoCEv2 packet is printed as

  N TIME SRC:PORT > DST:PORT malformed: REASON (LEN bytes)

and decoding goes on. With several files, each file's lines follow a
"==> FILE <==" line. A summary (packets, RoCEv2, ICRC bad, malformed,
other) goes to standard error at the end of each file.

--ladder draws the exchange as a ladder diagram instead: one column per
endpoint (address and QP; "QP ?" where the sender's QP cannot be told),
one arrow per packet with its frame number, the time since the first
packet, its opcode and PSN, and its key fields (ackreq, the AETH's ACK,
NAK code or RNR timer and MSN, the RETH, the payload length); lines
starting with "*" under an arrow say why: what an ACK or READ response
answers, a retransmission and its cause, a PSN gap, a duplicate, a NAK and
what caused it, a bad or uncaptured ICRC, and the faults roced marked in a
pcapng capture. --qp QPN keeps the packets to or from that QP, --packets
N-M those with frame numbers N to M (N- : from N on), --count N the first
N of what is left; notes are worked out over the whole capture first.

-v adds every field of every header after each line, one header per
indented line: link layer, IP, UDP, BTH (reserved bits included), each
extended header, payload (first 32 bytes), pad bytes and the ICRC stored
and computed.

Exit status: 0 when every file was read to its end; 1 when a file could
not be opened or read (lines up to the damage are printed); 2 for bad
usage.
`

func runDecode(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// -h is the usage on stdout; a bad flag is its one line, then the
	// usage, on stderr.
	fs.Usage = func() {}
	verbose := fs.Bool("v", false, "print every field of every header")
	var lo ladderOptions
	fs.BoolVar(&lo.on, "ladder", false, "draw a ladder diagram")
	fs.StringVar(&lo.qp, "qp", "", "with --ladder: only packets to or from `QPN`")
	fs.StringVar(&lo.packets, "packets", "", "with --ladder: only frames `N-M`")
	fs.IntVar(&lo.count, "count", 0, "with --ladder: at most `N` packets")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, decodeUsage)
			return 0
		}
		fmt.Fprintf(stderr, "roced decode: %v\n%s", err, decodeUsage)
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if !lo.on && (lo.qp != "" || lo.packets != "" || lo.count != 0) {
		fmt.Fprintln(stderr, "roced decode: --qp, --packets and --count go with --ladder")
		return 2
	}
	if lo.on {
		if *verbose {
			fmt.Fprintln(stderr, "roced decode: -v and --ladder do not go together")
			return 2
		}
		return runLadder(lo, fs.Args(), stdout, stderr)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	status := 0
	for _, name := range fs.Args() {
		if fs.NArg() > 1 {
			fmt.Fprintf(w, "==> %s <==\n", name)
		}
		d := dissect.Decoder{W: w, Verbose: *verbose}
		err := d.File(name)
		w.Flush()
		if d.Opened {
			cut := ""
			if d.Cut > 0 {
				cut = fmt.Sprintf(" (%d cut by the snap length, ICRC not checked)", d.Cut)
			}
			fmt.Fprintf(stderr, "%s: %d packets, %d RoCEv2%s, %d ICRC bad, %d malformed, %d other\n",
				name, d.Packets, d.RoCE, cut, d.ICRCBad, d.Malformed, d.Packets-d.RoCE-d.Malformed)
		}
		if err != nil {
			fmt.Fprintf(stderr, "roced decode: %v\n", err)
			status = 1
		}
	}
	return status
}
