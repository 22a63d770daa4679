// Package mad holds the wire formats of the RDMA connection manager: the
// 256-byte management datagram (MAD) and its common header (the kernel's struct ib_mad_hdr), the
// communication-management messages carried in a MAD's data (IBA chapter 12: REQ,
// MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR, SIDR_REQ, SIDR_REP), the
// rdma_cm private-data header that Linux's rdma_cm puts at the start of a
// REQ's private data, and rdma_cm's service IDs.
//
// As in package bth, each format is a byte-slice view in the style of
// gVisor's pkg/tcpip/header: a REQ is the 232 bytes of MAD data it
// describes, each field has a getter and a setter at a named offset, and
// nothing is copied. Parse and ParseCM check a MAD before any view is
// taken, so an accessor on a view of a checked MAD never reads out of
// range. Field offsets are the kernel's (include/rdma/ibta_vol1_c12.h,
// which names the IBA tables) and Wireshark's packet-infiniband.c; the
// tests check them against real rxe captures with tshark as the oracle.
//
// A CM MAD travels in a UD SEND_ONLY to QP1 (the General Services
// Interface) with Q_Key 0x80010000. Sending and receiving on QP1, the CM
// state machine (communication IDs, transaction IDs, retries, MRA, time
// wait) and the Dial/Listen API are built on top of this package, in
// packages of their own; this one only reads and writes bytes.
package mad
