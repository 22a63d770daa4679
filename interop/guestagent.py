"""goroce interop harness: its agent in the lab guest (interop/agent.go).

Started once per run (python3 AGENT ADDR PORT PIDFILE) through rxe-peer.sh exec, it
answers the harness's per-case questions over one TCP connection on the
tap, without the 9p spool's round trip or a fork per question (each costs
about a second in the TCG guest under load). One JSON object a line each
way:
  {"op": "snap", "from": SEQ}  rxe0's hw_counters, the guest's clock, the
      kernel log's next sequence number and its records from SEQ on
  {"op": "listen", "port": P, "timeout": S}  returns once something
      listens on TCP port P, or fails after S seconds
  {"op": "cmlisten", "port": P, "timeout": S}  the same for an rdma_cm ID
      in state LISTEN on port P (rdma resource show cm_id): rping's server
      listens on QP1, not on a TCP socket
  {"op": "run", "argv": [...], "timeout": S}  starts argv (under
      timeout(1), as rxe-peer.sh exec would run it, without its 9p round
      trips and bash) and answers {"ok": true, "pid": N}; a second answer
      {"ok": true, "exit": E, "stdout": ..., "stderr": ...} comes when it
      ends; when its time ran out, with "hung": where each of its threads
      was then (hung()), read before timeout(1) is told to end it. {"op": "stop"} on that connection sends it
      SIGTERM (timeout(1) passes it on); the connection closing kills its
      process group.
  {"op": "quit"}
Answers: {"ok": true, ...} or {"ok": false, "error": "..."}.
Each connection is served by its own thread: a run holds its connection
until the command ends, beside the session's.
"""
import errno
import json
import os
import select
import socket
import signal
import subprocess
import sys
import threading
import time

HW = os.environ.get("GOROCE_AGENT_HW", "/sys/class/infiniband/rxe0/ports/1/hw_counters")


def counters():
    out = {}
    for name in os.listdir(HW):
        try:
            with open(os.path.join(HW, name)) as f:
                out[name] = int(f.read().strip())
        except (OSError, ValueError):
            pass
    return out


def kmsg(start):
    """The kernel log records from sequence number start on, as dmesg prints
    them, and the next sequence number."""
    lines, nxt = [], start
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while reading
                    continue
                raise
            head, _, msg = rec.decode("utf-8", "replace").partition(";")
            f = head.split(",")
            seq, usec = int(f[1]), int(f[2])
            nxt = seq + 1
            if seq >= start:
                lines.append("[%5d.%06d] %s" % (usec // 1000000, usec % 1000000, msg.split("\n", 1)[0]))
    finally:
        os.close(fd)
    return lines, nxt


def listening(port):
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    x = line.split()
                    if x[3] == "0A" and int(x[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def cm_listening(port):
    # rdma(8) asks the kernel over netlink; the guest has no other view of
    # rdma_cm's IDs. One fork per poll, about 30 ms in the TCG guest.
    try:
        out = subprocess.run(["rdma", "-j", "resource", "show", "cm_id"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=10).stdout
        ids = json.loads(out or b"[]")
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    suffix = ":%d" % port
    return any(x.get("state") == "LISTEN" and str(x.get("src-addr", "")).endswith(suffix) for x in ids)


def wait_for(req, conn, check, what):
    port, end = int(req["port"]), time.monotonic() + float(req["timeout"])
    while not check(port):
        if time.monotonic() > end:
            return {"ok": False, "error": "nothing listens on %s port %d after %ss" % (what, port, req["timeout"])}
        # Readable means the harness gave up (it closed): stop waiting.
        if select.select([conn], [], [], 0.02)[0]:
            return {"ok": False, "error": "cancelled"}
    return {"ok": True}


def answer(req, conn):
    op = req.get("op")
    if op == "snap":
        clock = time.time_ns()
        lines, nxt = kmsg(int(req.get("from", 0)))
        return {"ok": True, "clock_ns": clock, "counters": counters(), "next": nxt, "dmesg": lines}
    if op == "listen":
        return wait_for(req, conn, listening, "TCP")
    if op == "cmlisten":
        return wait_for(req, conn, cm_listening, "RDMA CM")
    return {"ok": False, "error": "unknown op %r" % op}


def where(pid, addr):
    """The mapping of pid's that holds address addr: "FILE+0xOFFSET"."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            for line in f:
                x = line.split()
                lo, hi = (int(v, 16) for v in x[0].split("-"))
                if lo <= addr < hi:
                    name = os.path.basename(x[5]) if len(x) > 5 else "anonymous"
                    return "%s+%#x" % (name, addr - lo + int(x[2], 16))
    except (OSError, ValueError, IndexError):
        pass
    return "%#x" % addr


def hung(pgid):
    """One line per thread of process group pgid but its leader (timeout(1)):
    its state, the signals it blocks, the system call it waits in with its
    user-space address (as FILE+OFFSET, for gdb or addr2line on the same
    file) and its kernel stack. A run that hangs says where."""
    lines = []
    for d in sorted(os.listdir("/proc"), key=lambda v: (len(v), v)):
        if not d.isdigit() or int(d) == pgid:
            continue
        pid = int(d)
        try:
            with open("/proc/%d/stat" % pid) as f:
                st = f.read()
            comm = st[st.index("(") + 1:st.rindex(")")]
            if int(st[st.rindex(")") + 2:].split()[2]) != pgid:
                continue
            tids = sorted(os.listdir("/proc/%d/task" % pid), key=int)
        except (OSError, ValueError, IndexError):
            continue
        for tid in tids:
            t = "/proc/%d/task/%s/" % (pid, tid)
            try:
                with open(t + "status") as f:
                    status = dict(l.split(":", 1) for l in f if ":" in l)
                with open(t + "syscall") as f:
                    sc = f.read().split()
            except (OSError, ValueError):
                continue
            line = "%s[%d] thread %s: %s" % (comm, pid, tid, status.get("State", "?").strip())
            blocked = int(status.get("SigBlk", "0").strip() or "0", 16)
            if blocked:
                line += ", blocks signals %s" % ",".join(str(n) for n in range(1, 65) if blocked >> (n - 1) & 1)
            if sc and sc[0].lstrip("-").isdigit() and len(sc) >= 3:
                line += ", in system call %s at %s" % (sc[0], where(pid, int(sc[-1], 16)))
            elif sc:
                line += ", %s" % " ".join(sc)
            try:
                with open(t + "stack") as f:
                    frames = [l.split("] ", 1)[-1].split("/")[0].strip() for l in f if l.strip()]
                if frames:
                    line += "; kernel: " + " < ".join(frames[:8])
            except OSError:
                pass
            lines.append(line)
    return lines


def run(req, conn, rf):
    """Runs req's argv and answers twice: started, then ended."""
    # timeout(1)'s own limit is a backstop: at the run's time the agent
    # reads where the command is, then gives timeout(1) the SIGALRM its
    # own timer would (expire() below), so the reading always comes first.
    limit = float(req["timeout"])
    secs = str(max(1, int(limit + 0.999)) + 5)
    try:
        p = subprocess.Popen(["timeout", "--foreground", "-k", "3", secs] + [str(a) for a in req["argv"]],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd="/root" if os.path.isdir("/root") else None, start_new_session=True)
    except OSError as e:
        conn.sendall((json.dumps({"ok": False, "error": "%s: %s" % (type(e).__name__, e)}) + "\n").encode())
        return
    conn.sendall((json.dumps({"ok": True, "pid": p.pid}) + "\n").encode())
    out = {}

    def collect():
        out["stdout"], out["stderr"] = p.communicate()

    t = threading.Thread(target=collect, daemon=True)
    t.start()
    ended = threading.Event()

    def watch():
        # "stop": SIGTERM to timeout(1), which passes it to the tool; the
        # harness gone (EOF): the whole group, at once. Never once the
        # command has ended: its pid may be another's by then.
        for line in rf:
            if line.strip() and json.loads(line).get("op") == "stop" and not ended.is_set():
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        if not ended.is_set():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass

    threading.Thread(target=watch, daemon=True).start()
    seen = {}

    def expire():
        # The run's time is out: where it hung, then timeout(1) ends it
        # as at its own timer (SIGALRM: exit status 124, -k after it).
        if ended.is_set():
            return
        seen["hung"] = hung(p.pid)
        if not ended.is_set():
            try:
                os.kill(p.pid, signal.SIGALRM)
            except OSError:
                pass

    before = threading.Timer(limit, expire)
    before.daemon = True
    before.start()
    t.join()
    ended.set()
    before.cancel()
    rc = p.returncode
    a = {"ok": True, "exit": rc if rc >= 0 else 128 - rc,
         "stdout": out["stdout"].decode("utf-8", "replace"), "stderr": out["stderr"].decode("utf-8", "replace")}
    if a["exit"] in (124, 137) and seen.get("hung"):
        a["hung"] = seen["hung"]
    try:
        conn.sendall((json.dumps(a) + "\n").encode())
    except OSError:
        pass


def serve(conn, srv):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rf = conn.makefile("r")
    for line in rf:
        try:
            req = json.loads(line)
        except ValueError:
            req = {"op": None}
        if req.get("op") == "quit":
            # A pid file left behind would have the next run kill
            # whatever process reuses the pid.
            os.remove(sys.argv[3])
            conn.close()
            os._exit(0)
        if req.get("op") == "run":
            try:
                run(req, conn, rf)
            except Exception as e:
                try:
                    conn.sendall((json.dumps({"ok": False, "error": "%s: %s" % (type(e).__name__, e)}) + "\n").encode())
                except OSError:
                    pass
            break
        try:
            a = answer(req, conn)
        except Exception as e:  # the harness reports it with the case
            a = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        try:
            conn.sendall((json.dumps(a) + "\n").encode())
        except OSError:
            break
    conn.close()


def main():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((sys.argv[1], int(sys.argv[2])))
    srv.listen(16)
    with open(sys.argv[3], "w") as f:
        f.write("%d\n" % os.getpid())
    print("listening", flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, srv), daemon=True).start()


main()
