// Package ladder draws ladder (sequence) diagrams of RoCEv2 exchanges: one
// column per endpoint (an address and a QP), one arrow per packet with its
// opcode, PSN and key fields, and notes that say why a packet was sent or
// what it means: a retransmission and what caused it, a PSN gap, a
// duplicate, a NAK and its cause, what an ACK or a READ response answers, a
// bad ICRC, a packet cut by the snap length, and the faults roced marked in
// its captures.
//
// A Ladder collects packets (from a capture with ReadPcap, or from any
// code that sees datagrams) and lays them out as a Diagram, which renders
// as text for a terminal (WriteText) or as an SVG picture (WriteSVG).
package ladder
