// Package cm is goroce's RDMA connection manager: it connects RC queue
// pairs the way Linux's rdma_cm does, with CM MADs on QP1, so that a
// program built on librdmacm (rping, and in time every rdma_cm
// application) can connect to goroce and goroce to it.
//
// A Manager runs the connection manager of one transport.Device: it owns
// the device's QP1 and keeps the state of every connection (communication
// IDs, transaction IDs, the CM state machine of IBA 12.9: idle, REQ sent,
// REP sent, established, DREQ sent, time wait), retries a MAD that gets no
// answer after the timeout the messages carry, honours an MRA, sends one
// for a REQ its program is slow to answer (ListenConfig.DeferAccept), rejects a
// REQ for a service nobody listens on with the specification's reason
// (8, invalid service ID), and never lets a duplicate REQ open a second
// connection.
//
// On top of it sits an API in the vocabulary of Go's net package and of
// librdmacm: Listen on an IP address and port of the TCP port space
// (rdma_cm's RDMA_PS_TCP, the RC connections rping and most tools make)
// and Accept; Dial with private data, responder resources and initiator
// depth. Both return a Conn whose QP is already in RTS; Close or
// Disconnect end it with DREQ/DREP, and Done reports a disconnection by
// the peer. Events is the manager's stream of what happens to its
// connections, as an rdma_cm event channel: ESTABLISHED, REJECTED (with
// the reason), UNREACHABLE, CONNECT_ERROR, DISCONNECTED, TIMEWAIT_EXIT.
//
// A connection may instead name a QP the program keeps and moves itself
// (QPConfig.ExternalQPN), as librdmacm connects an id with no QP: the CM
// announces it and touches it never; QPAttr gives the attributes that
// bring it to RTS in agreement with the REQ and REP, Dial returns at the
// REP (CONNECT_RESPONSE) and Conn.Establish sends the RTU.
//
// RC connections may also be made in the IB port space (RDMA_PS_IB,
// 0x013f: ListenConfig.PortSpace, ConnParams.PortSpace), and UD services
// resolved in the IPoIB and IB spaces (ListenUDIn, ResolveUDIn), as
// rdma_cm takes them; each space has ports of its own.
//
// The UDP port space (rdma_cm's RDMA_PS_UDP, UD QPs) has no connections:
// a UD service is resolved with SIDR_REQ and SIDR_REP (IBA 12.11).
// ListenUD takes the requests for a port and hands each to the program
// once, which answers it with Accept (its QP, made by CreateUDQP with
// rdma_cm's Q_Key) or Reject; a duplicate request is answered with the
// same SIDR_REP, and one for a port nobody listens on "unsupported", as
// Linux answers it. ResolveUD is the active side: the QPN, Q_Key,
// private data and address vector of the service, the SIDR_REQ retried
// as a REQ is.
//
// The wire format is package mad's; this package decides what to send
// and when. Timers run on a clock.Clock, so tests drive them by hand.
package cm
