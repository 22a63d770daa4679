"""goroce interop harness: rxe's verbs, driven from the host (interop/pyverbs.go).

Started once per run (python3 VERBS [DEV GID_INDEX] ADDR PORT) through
rxe-peer.sh exec on rxe0 (GID index 1, IPv4), or on the host over
libgoroce.so (LD_PRELOAD, device goroce0), it serves one connection at a
time over TCP on the tap. Each connection is a fresh RC QP with its own
PD, regions and memory windows, connected to the other side's QP, and a
script of verbs the harness sends: the operations the tools never make
(memory windows, local invalidation, SEND with Invalidate), and a whole
SEND/WRITE/READ/atomic exchange, so that each side can be checked
against the other. One JSON object a line each way; every answer has
"ok" and, on failure, "error".

Requests:
  {"op": "create"}  create the QP and its objects; answer {"qpn", "psn",
      "gid", "addr", "rkey", "len"}: the target region (64 KiB,
      LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|MW_BIND)
  {"op": "connect", "qpn", "psn", "gid"}  move it to RTS towards the peer
      (QP access RDMA read/write/atomic)
  {"op": "bind1", "off", "len", "access"}  ibv_bind_mw of a type 1 window
      onto the target region; answer {"status", "rkey", "addr"}
  {"op": "bind2", "off", "len", "access"}  a BIND_MW work request of a
      type 2 window; answer {"status", "rkey", "addr"}
  {"op": "localinv", "rkey"}  a LOCAL_INV work request; answer {"status"}
  {"op": "write" | "read", "rkey", "addr", "len", "seed"}  RDMA WRITE of
      the pattern seed (or READ) through the host's rkey; answer {"status",
      "data"} (READ: the bytes read, hex)
  {"op": "sendinv", "rkey"}  SEND with Invalidate of 8 bytes; {"status"}
  {"op": "send", "len", "seed"}  SEND of the pattern; {"status"}
  {"op": "atomic", "kind" ("fadd" | "cswap"), "rkey", "addr", "add" or
      "compare" and "swap"}  into the local buffer; answer {"status",
      "orig"} (the 8 bytes read back as a little-endian integer)
  {"op": "recv", "len"}  post a receive (64 bytes by default); {"op":
      "pollrecv"}  wait for its completion; answer {"status", "with_inv",
      "wc_flags", "inv_rkey", "byte_len", "data"}
  {"op": "fill" | "mem", "off", "len", "seed"}  write the pattern into the
      target region, or answer its bytes {"data"} (hex)
  {"op": "state"}  the QP's state
  {"op": "bye"}  end the connection
"""
import json
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

PORT = 1
DEV, GID_INDEX = "rxe0", 1
SIZE = 64 * 1024
# In the local buffer: data from 0 (at most 8 KiB), an atomic's result,
# and receives.
ATOMIC_OFF, RECV_OFF = SIZE - 16384, SIZE - 8192
TIMEOUT = 10.0


def pattern(n, seed):
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


def full_gid(g):
    """'::ffff:192.0.2.1' or a GID's hex form -> the 8 groups pyverbs wants."""
    b = socket.inet_pton(socket.AF_INET6, g)
    return ":".join(b[i:i + 2].hex() for i in range(0, 16, 2))


class Conn:
    def __init__(self, ctx):
        self.ctx = ctx
        self.pd = PD(ctx)
        self.cq = CQ(ctx, 64)
        acc = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND | e.IBV_ACCESS_REMOTE_WRITE |
               e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC)
        self.target = MR(self.pd, SIZE, acc)
        self.local = MR(self.pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)
        self._mw1 = self._mw2 = None  # allocated at their first bind
        cap = QPCap(max_send_wr=32, max_recv_wr=32, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
        self.recv_pending = []  # completions of receives taken while waiting for sends
        self.send_pending = []
        self.wr = 1

    def endpoint(self):
        gid = self.ctx.query_gid(PORT, GID_INDEX)
        return {"qpn": self.qp.qp_num, "psn": 4242, "gid": str(gid),
                "addr": self.target.buf, "rkey": self.target.rkey, "len": SIZE}

    def connect(self, req):
        a = QPAttr()
        a.qp_state = e.IBV_QPS_INIT
        a.pkey_index = 0
        a.port_num = PORT
        a.qp_access_flags = (e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
                             e.IBV_ACCESS_REMOTE_ATOMIC | e.IBV_ACCESS_LOCAL_WRITE)
        self.qp.to_init(a)
        gr = GlobalRoute(dgid=GID(full_gid(req["gid"])), sgid_index=GID_INDEX, hop_limit=64)
        a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=PORT)
        a.path_mtu = e.IBV_MTU_1024
        a.dest_qp_num = req["qpn"]
        a.rq_psn = req["psn"]
        a.max_dest_rd_atomic = 4
        a.min_rnr_timer = 12
        self.qp.to_rtr(a)
        a.sq_psn = 4242
        a.timeout = 14
        a.retry_cnt = 7
        a.rnr_retry = 7
        a.max_rd_atomic = 4
        self.qp.to_rts(a)
        return {}

    @property
    def mw1(self):
        if self._mw1 is None:
            self._mw1 = MW(self.pd, e.IBV_MW_TYPE_1)
        return self._mw1

    @property
    def mw2(self):
        if self._mw2 is None:
            self._mw2 = MW(self.pd, e.IBV_MW_TYPE_2)
        return self._mw2

    def next_id(self):
        self.wr += 1
        return self.wr

    def wait(self, wr_id):
        """The completion of send wr_id (receives seen meanwhile are kept)."""
        end = time.monotonic() + TIMEOUT
        while True:
            for i, wc in enumerate(self.send_pending):
                if wc.wr_id == wr_id:
                    return self.send_pending.pop(i)
            n, wcs = self.cq.poll(num_entries=8)
            for wc in wcs[:n]:
                if wc.opcode & e.IBV_WC_RECV:
                    self.recv_pending.append(wc)
                else:
                    self.send_pending.append(wc)
            if n == 0:
                if time.monotonic() > end:
                    raise TimeoutError("no completion for wr_id %d" % wr_id)
                time.sleep(0.001)

    def wait_recv(self):
        end = time.monotonic() + TIMEOUT
        while not self.recv_pending:
            n, wcs = self.cq.poll(num_entries=8)
            for wc in wcs[:n]:
                (self.recv_pending if wc.opcode & e.IBV_WC_RECV else self.send_pending).append(wc)
            if n == 0:
                if time.monotonic() > end:
                    raise TimeoutError("no receive completion")
                time.sleep(0.001)
        return self.recv_pending.pop(0)

    def bind1(self, req):
        info = MWBindInfo(self.target, self.target.buf + req["off"], req["len"], req["access"])
        wr_id = self.next_id()
        self.qp.bind_mw(self.mw1, MWBind(info, e.IBV_SEND_SIGNALED, wr_id))
        wc = self.wait(wr_id)
        return {"status": wc.status, "opcode": wc.opcode, "rkey": self.mw1.rkey,
                "addr": self.target.buf + req["off"]}

    def bind2(self, req):
        info = MWBindInfo(self.target, self.target.buf + req["off"], req["len"], req["access"])
        wr_id = self.next_id()
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_BIND_MW, num_sge=0, send_flags=e.IBV_SEND_SIGNALED)
        wr.set_bind_wr(self.mw2, info)
        rkey = wr.rkey
        self.qp.post_send(wr)
        wc = self.wait(wr_id)
        return {"status": wc.status, "opcode": wc.opcode, "rkey": rkey,
                "addr": self.target.buf + req["off"]}

    def localinv(self, req):
        wr_id = self.next_id()
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_LOCAL_INV, num_sge=0, send_flags=e.IBV_SEND_SIGNALED)
        wr.imm_data = req["rkey"]  # the union's invalidate_rkey
        self.qp.post_send(wr)
        wc = self.wait(wr_id)
        return {"status": wc.status, "opcode": wc.opcode}

    def rdma(self, req, read):
        n = req["len"]
        if not read:
            self.local.write(pattern(n, req.get("seed", 0)), n)
        wr_id = self.next_id()
        op = e.IBV_WR_RDMA_READ if read else e.IBV_WR_RDMA_WRITE
        wr = SendWR(wr_id=wr_id, opcode=op, num_sge=1, sg=[SGE(self.local.buf, n, self.local.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(req["rkey"], req["addr"])
        self.qp.post_send(wr)
        wc = self.wait(wr_id)
        out = {"status": wc.status, "opcode": wc.opcode}
        if read and wc.status == 0:
            out["data"] = self.local.read(n, 0).hex()
        return out

    def sendinv(self, req):
        self.local.write(pattern(8, 1), 8)
        wr_id = self.next_id()
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND_WITH_INV, num_sge=1,
                    sg=[SGE(self.local.buf, 8, self.local.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        wr.imm_data = req["rkey"]
        self.qp.post_send(wr)
        wc = self.wait(wr_id)
        return {"status": wc.status, "opcode": wc.opcode}

    def send(self, req):
        n = req["len"]
        self.local.write(pattern(n, req.get("seed", 0)), n)
        wr_id = self.next_id()
        wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1,
                    sg=[SGE(self.local.buf, n, self.local.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        self.qp.post_send(wr)
        wc = self.wait(wr_id)
        return {"status": wc.status, "opcode": wc.opcode}

    def atomic(self, req):
        wr_id = self.next_id()
        res = self.local.buf + ATOMIC_OFF  # 8-byte aligned, away from the data
        if req["kind"] == "fadd":
            wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                        sg=[SGE(res, 8, self.local.lkey)], send_flags=e.IBV_SEND_SIGNALED)
            wr.set_wr_atomic(req["rkey"], req["addr"], req["add"])
        else:
            wr = SendWR(wr_id=wr_id, opcode=e.IBV_WR_ATOMIC_CMP_AND_SWP, num_sge=1,
                        sg=[SGE(res, 8, self.local.lkey)], send_flags=e.IBV_SEND_SIGNALED)
            wr.set_wr_atomic(req["rkey"], req["addr"], req["compare"], req["swap"])
        self.qp.post_send(wr)
        wc = self.wait(wr_id)
        orig = int.from_bytes(self.local.read(8, ATOMIC_OFF), "little")
        return {"status": wc.status, "opcode": wc.opcode, "orig": orig}

    def recv(self, req):
        n = req.get("len", 64)
        self.recv_len = n
        self.qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(self.local.buf + RECV_OFF, n, self.local.lkey)]))
        return {}

    def pollrecv(self, req):
        wc = self.wait_recv()
        # rxe fills the CQE with the kernel's IB_WC_WITH_INVALIDATE (1 << 2),
        # which libibverbs reads as IBV_WC_IP_CSUM_OK; IBV_WC_WITH_INV is
        # 1 << 3. Both are reported, and the union's rkey, for the harness.
        return {"status": wc.status, "opcode": wc.opcode, "wc_flags": wc.wc_flags,
                "with_inv": bool(wc.wc_flags & e.IBV_WC_WITH_INV),
                "inv_rkey": wc.imm_data, "byte_len": wc.byte_len,
                "data": self.local.read(wc.byte_len, RECV_OFF).hex()}

    def fill(self, req):
        data = pattern(req["len"], req.get("seed", 0))
        # MR.write writes at the start; move through a bytearray copy.
        cur = bytearray(self.target.read(SIZE, 0))
        cur[req["off"]:req["off"] + req["len"]] = data
        self.target.write(bytes(cur), SIZE)
        return {}

    def mem(self, req):
        return {"data": self.target.read(req["len"], req["off"]).hex()}

    def state(self, req):
        attr, _ = self.qp.query(e.IBV_QP_STATE)
        return {"state": attr.qp_state}

    def close(self):
        for o in (self.qp, self._mw1, self._mw2, self.target, self.local, self.cq, self.pd):
            if o is None:
                continue
            try:
                o.close()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass


def serve(ctx, sock):
    f = sock.makefile("rw")
    c = None
    try:
        for line in f:
            req = json.loads(line)
            op = req.get("op")
            try:
                if op == "bye":
                    f.write(json.dumps({"ok": True}) + "\n")
                    f.flush()
                    return
                if op == "create":
                    c = Conn(ctx)
                    out = c.endpoint()
                else:
                    fn = {"connect": c.connect, "send": c.send, "atomic": c.atomic, "bind1": c.bind1, "bind2": c.bind2, "localinv": c.localinv,
                          "write": lambda r: c.rdma(r, False), "read": lambda r: c.rdma(r, True),
                          "sendinv": c.sendinv, "recv": c.recv, "pollrecv": c.pollrecv,
                          "fill": c.fill, "mem": c.mem, "state": c.state}[op]
                    out = fn(req)
                out["ok"] = True
            except Exception as ex:  # noqa: BLE001 - every failure goes back to the harness
                out = {"ok": False, "error": "%s: %s" % (type(ex).__name__, ex)}
            f.write(json.dumps(out) + "\n")
            f.flush()
    finally:
        if c is not None:
            c.close()


def main():
    global DEV, GID_INDEX
    args = sys.argv[1:]
    if len(args) == 4:
        DEV, GID_INDEX = args[0], int(args[1])
        args = args[2:]
    addr, port = args[0], int(args[1])
    ctx = Context(name=DEV)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(1)
    print("listening", flush=True)
    while True:
        s, _ = ls.accept()
        try:
            serve(ctx, s)
        except Exception as ex:  # noqa: BLE001 - one connection's end is not the server's
            print("connection:", ex, flush=True)
        finally:
            s.close()


if __name__ == "__main__":
    main()
