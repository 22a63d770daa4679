# goroce conform's requester for the cases no tool's client plays: an RC
# QP, driven through pyverbs (rdma-core's Python verbs, python3-pyverbs),
# whose work the suite answers as a case says. It speaks ibv_rc_pingpong's
# exchange as that tool's client does (a 52-byte record
# "LID:QPN:PSN:GID" each way, then "done"), so the suite serves it as it
# serves ibv_rc_pingpong, and it ends as that tool ends: exit status 0 once
# its work completed, or "Failed status NAME (N) for wr_id W" and status 1.
#
#   python3 requester.py MODE HOST PORT DEV GIDX
#
# MODE send-read: a SEND then a READ on one QP (rnr_retry 7), both
#   signalled; success is both completions, the SEND's first.
# MODE rnr-retry-2: one SEND with rnr_retry 2, so that RNR NAKs can
#   exhaust it.
# DEV "-" takes the first device. The QP's timeout 14 and retry_cnt 7 are
# the tools' (ibv_rc_pingpong, perftest); the path MTU is the suite's 1024.
import random
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

MODES = {"send-read": 7, "rnr-retry-2": 2}
RECORD = 52
# ibv_wc_status_str's words for the statuses these cases can end with.
STATUS = {5: "Work Request Flushed Error", 9: "remote invalid request error", 10: "remote access error",
          11: "remote operation error", 12: "transport retry counter exceeded", 13: "RNR retry counter exceeded"}


def usage(msg):
    sys.stderr.write("requester.py: %s\nusage: requester.py MODE HOST PORT DEV GIDX (MODE: %s)\n"
                     % (msg, ", ".join(sorted(MODES))))
    sys.exit(2)


def read_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("the server closed the exchange after %d of %d bytes" % (len(b), n))
        b += c
    return b


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in MODES:
        usage("wrong arguments: %s" % " ".join(sys.argv[1:]))
    mode, host, port, dev, gidx = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    if not port.isdigit() or not gidx.isdigit():
        usage("PORT and GIDX are numbers")
    port, gidx = int(port), int(gidx)
    if dev == "-":
        devs = get_device_list()
        if not devs:
            sys.stderr.write("requester.py: no RDMA device\n")
            return 1
        dev = devs[0].name.decode()
    ctx = Context(name=dev)
    pd = PD(ctx)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=4, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, sq_sig_all=1))
    psn = random.randrange(1 << 24)
    gid = ctx.query_gid(1, gidx).gid.replace(":", "")

    s = socket.create_connection((host, port), timeout=60)
    s.sendall(("%04x:%06x:%06x:%s" % (0, qp.qp_num, psn, gid)).encode() + b"\0")
    rec = read_exact(s, RECORD).rstrip(b"\0").decode()
    _, rqpn, rpsn, rgid = rec.split(":")
    rgid = ":".join(rgid[i:i + 4] for i in range(0, 32, 4))

    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_INIT
    attr.pkey_index = 0
    attr.port_num = 1
    attr.qp_access_flags = 0
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_RTR
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = int(rqpn, 16)
    attr.rq_psn = int(rpsn, 16)
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    gr = GlobalRoute(dgid=GID(rgid), sgid_index=gidx)
    gr.hop_limit = 64
    attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    attr = QPAttr()
    attr.qp_state = e.IBV_QPS_RTS
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = MODES[mode]
    attr.sq_psn = psn
    attr.max_rd_atomic = 1
    qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
              e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)
    s.sendall(b"done\0")

    send = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)])
    qp.post_send(send)
    want = [(1, e.IBV_WC_SEND)]
    if mode == "send-read":
        # The suite's region is not checked: it answers as the case says.
        read = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(mr.buf + 1024, 64, mr.lkey)])
        read.set_wr_rdma(0x1234, 0x10000)
        qp.post_send(read)
        want.append((2, e.IBV_WC_RDMA_READ))

    got = []
    deadline = time.monotonic() + 50
    while len(got) < len(want):
        if time.monotonic() > deadline:
            sys.stderr.write("requester.py: %d of %d completions in 50 s\n" % (len(got), len(want)))
            return 1
        n, wcs = cq.poll()
        if n == 0:
            time.sleep(0.001)
            continue
        for wc in wcs:
            if wc.status != e.IBV_WC_SUCCESS:
                print("Failed status %s (%d) for wr_id %d" % (STATUS.get(wc.status, "error"), wc.status, wc.wr_id))
                return 1
            got.append((wc.wr_id, wc.opcode))
    if got != want:
        sys.stderr.write("requester.py: completions %s, expected %s\n" % (got, want))
        return 1
    print("requester.py: %s: %d work requests completed" % (mode, len(got)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
