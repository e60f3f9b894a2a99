#!/usr/bin/python3
"""zklock.testing's fault proxy: a small TCP proxy for fault tests (python3 stdlib only, one
thread, selectors). zklock.testing.net starts and drives it; this is its wire of files.

    python3 proxy.py LISTEN_PORT TARGET_HOST:PORT CONTROL_FILE
                     [--parent PID] [--max-seconds N]
                     [--route LISTEN_PORT,TARGET_HOST:PORT[,HELLO_HOST:PORT]] ...

Listens on 127.0.0.1:LISTEN_PORT (0 = any free port) and forwards every accepted connection to
TARGET, both ways. Each --route adds one more listener with a target of its own; the commands
below act on the connections of every route alike. Once listening it writes the ports to
CONTROL_FILE.port (atomically, by rename), one a line: the first listener's, then each route's.

HELLO (for the links between ZooKeeper ensemble members): on a route given a HELLO address, the
first message of each connection from the client is read as a ZooKeeper election handshake
(8-byte protocol version < 0, 8-byte server id, 4-byte length, that many bytes of the sender's
election address) and the address is replaced by HELLO before it is forwarded. The receiving
member connects back to the address it reads there, so this keeps its reply on a proxy too.
A connection that starts otherwise (an old protocol with a version >= 0, a length above 4096)
is forwarded unchanged.

Control. Every 20 ms the proxy reads CONTROL_FILE: one command a line, "SEQ COMMAND [ARG]", SEQ a
positive integer that grows. Lines with a SEQ above the last one applied are applied in order;
then SEQ is written to CONTROL_FILE.ack, so a test knows when a command has taken effect.
Commands:
    drop          existing connections: forward nothing more from server to client (the client
                  keeps sending and the server keeps applying; its replies are lost). A dropping
                  connection never forwards again (its byte stream is cut mid-frame): close it
                  with `cut` or `heal`.
    drop_both     existing connections: forward nothing in either direction (a stall).
    cut           close every connection, both sides.
    reset         close every connection with a TCP reset towards the client (SO_LINGER 0), and
                  normally towards the server.
    heal          close the dropping and blackholed connections, `new pass`, `delay 0`, and
                  cancel a pending `heal_after`.
    delay MS      forward every byte (both directions, existing and later connections) MS
                  milliseconds after it arrived (0 = at once); order is kept.
    delay_replies MS  the same towards the client only: requests reach the server at once, its
                  replies (and pushes) come back MS late.
    blackhole     existing connections: forward nothing either way and never close (silence);
                  later connections: `new blackhole`.
    heal_after S  apply `heal` by itself S seconds from now (a bound on a fault; the last one
                  given counts).
    blackhole_after_push S
                  arm: connections (open now and later) forward as usual until the server sends
                  a client a watch notification (see Frames); that frame is forwarded whole, then
                  every connection goes `blackhole` at once (nothing more either way, nothing
                  closed, later connections swallowed; a close by the server is not passed on
                  either: the client sees its connection close only at `heal`) and `heal`
                  follows S seconds later by itself (this replaces a pending `heal_after`). Bytes of that connection that a
                  `delay` still holds back towards the client are forwarded before the push, the
                  ones towards the server are dropped. `heal` disarms.
    new MODE      how later connections are treated: pass (forward), blackhole (accept, connect
                  nowhere, swallow everything), refuse (accept and close at once), drop (forward
                  client to server only).
    status        just write the status file now.
    quit          exit.
Signals: SIGUSR1 = drop, SIGUSR2 = cut, SIGTERM/SIGINT/SIGHUP = exit.

Frames: the proxy follows the server-to-client byte stream of every connection as ZooKeeper
frames (a 4-byte big-endian length, then that many bytes). The first frame of a connection is the
connect response; every later one starts with a reply header (xid int32, zxid int64, err int32),
and a watch notification is a frame whose xid is -1. A length outside 0..64 MiB stops the
following on that connection (it is then not a ZooKeeper client connection).

Status: CONTROL_FILE.status is rewritten (atomically) whenever a counter changed, at most every
20 ms: "key value" lines: open, accepted, c2s, s2c (bytes forwarded), c2s_dropped, s2c_dropped,
dropping (connections), new (mode), applied (last SEQ), delay (ms), healing (1 while a
heal_after is pending), pushes (watch notifications forwarded so far), armed (1 while a
blackhole_after_push waits for its push), push_silenced (how many times it fired), push_ms (the
CLOCK_MONOTONIC time in ms at which it last fired, -1 before), closes_held (server closes kept
from a client silenced after a push).

Closing: when one side closes, the other first gets what was already read for it (a ZooKeeper
member writes its election handshake and closes at once when it expects a connect-back), then
sees the close.

Bounds: exits when the parent dies (--parent PID, else the process that started it), after
--max-seconds (default 900), on SIGTERM; at most 512 connections at once (more are refused);
at most 4 MiB buffered per direction per connection (reading pauses beyond that).
"""

import errno
import os
import selectors
import signal
import socket
import struct
import sys
import time

TICK = 0.02
MAX_CONNS = 512
MAX_BUF = 4 << 20
CHUNK = 65536


def write_atomic(path, text):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def proc_start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    if rest and rest[0] in ("Z", "X", "x"):
        return None
    return rest[19] if len(rest) > 19 else None


class Conn:
    """One client connection and its upstream socket."""

    def __init__(self, proxy, client, upstream, hello=None):
        self.proxy = proxy
        self.hello = hello                # bytes: the election address to write into the handshake
        self.hello_buf = bytearray()
        self.client = client
        self.upstream = upstream          # None in blackhole mode
        self.to_client = bytearray()
        self.to_server = bytearray()
        self.drop_s2c = False
        self.drop_c2s = False
        self.closed = False
        self.closing = False              # one side closed: flush what the other still gets, then close
        self.delayed = []                 # [due, to_server?, bytes] while a delay is set
        self.delayed_c2s = 0              # entries of `delayed` towards the server
        self.delayed_bytes = 0
        self.silent = False               # silenced after a push: the server's close is kept back too
        # following the server's frames (see Frames in the module text)
        self.fr_len = bytearray()         # the current frame's length bytes read so far
        self.fr_left = -1                 # body bytes of the current frame still to come (-1: in its length)
        self.fr_xid = bytearray()         # the first 4 body bytes read so far
        self.fr_count = 0                 # frames completed
        self.fr_lost = upstream is None or hello is not None

    def sockets(self):
        return [s for s in (self.client, self.upstream) if s is not None]

    def interest(self, sock):
        ev = 0
        if self.closing:
            buf = self.to_client if sock is self.client else self.to_server
            return selectors.EVENT_WRITE if buf else 0
        if sock is self.client:
            if len(self.to_server) < MAX_BUF and self.delayed_bytes < MAX_BUF:
                ev |= selectors.EVENT_READ
            if self.to_client:
                ev |= selectors.EVENT_WRITE
        else:
            if len(self.to_client) < MAX_BUF and self.delayed_bytes < MAX_BUF:
                ev |= selectors.EVENT_READ
            if self.to_server:
                ev |= selectors.EVENT_WRITE
        return ev

    def update(self):
        if self.closed:
            return
        sel = self.proxy.sel
        for s in self.sockets():
            ev = self.interest(s)
            try:
                key = sel.get_key(s)
            except KeyError:
                key = None
            if key is None:
                if ev:
                    sel.register(s, ev, self)
            elif ev == 0:
                sel.unregister(s)
            elif key.events != ev:
                sel.modify(s, ev, self)

    def hold(self, to_server, data):
        """Keep data back until its due time (the `delay` command)."""
        self.delayed.append([time.monotonic() + self.proxy.delay / 1000.0, to_server, data])
        self.delayed_bytes += len(data)
        if to_server:
            self.delayed_c2s += 1

    def release_due(self, now):
        """Move delayed data whose time has come into the send buffers; -> next due time."""
        while self.delayed and (self.delayed[0][0] <= now or self.proxy.delay <= 0):
            _, to_server, data = self.delayed.pop(0)
            self.delayed_bytes -= len(data)
            if to_server:
                self.delayed_c2s -= 1
                if self.drop_c2s:
                    self.proxy.stats["c2s_dropped"] += len(data)
                else:
                    self.to_server += data
            elif self.drop_s2c:
                self.proxy.stats["s2c_dropped"] += len(data)
            else:
                self.to_client += data
        self.update()
        return self.delayed[0][0] if self.delayed else None

    def follow(self, data):
        """Follow the server's frames through data (bytes from the server); -> the offset just
        past the first watch notification that ends in data while a blackhole_after_push is
        armed, else None."""
        if self.fr_lost:
            return None
        i, n = 0, len(data)
        while i < n:
            if self.fr_left < 0:
                take = min(4 - len(self.fr_len), n - i)
                self.fr_len += data[i:i + take]
                i += take
                if len(self.fr_len) < 4:
                    break
                length = struct.unpack(">i", bytes(self.fr_len))[0]
                self.fr_len = bytearray()
                if length < 0 or length > (64 << 20):
                    self.fr_lost = True
                    return None
                self.fr_left = length
                self.fr_xid = bytearray()
            if self.fr_left > 0:
                take = min(self.fr_left, n - i)
                if len(self.fr_xid) < 4:
                    self.fr_xid += data[i:i + min(take, 4 - len(self.fr_xid))]
                self.fr_left -= take
                i += take
            if self.fr_left == 0:
                self.fr_left = -1
                self.fr_count += 1
                if self.fr_count > 1 and len(self.fr_xid) == 4 and struct.unpack(">i", bytes(self.fr_xid))[0] == -1:
                    self.proxy.stats["pushes"] += 1
                    if self.proxy.push_armed is not None:
                        return i
        return None

    def rewrite_hello(self, data):
        """Hold the first bytes until the election handshake is complete, then give it back with
        the address replaced (or unchanged if it is not such a handshake)."""
        buf = self.hello_buf
        buf += data
        if len(buf) < 8:
            return b""
        version = struct.unpack(">q", bytes(buf[:8]))[0]
        out = None
        if version >= 0:
            out = bytes(buf)
        elif len(buf) >= 20:
            n = struct.unpack(">i", bytes(buf[16:20]))[0]
            if n < 0 or n > 4096:
                out = bytes(buf)
            elif len(buf) >= 20 + n:
                out = bytes(buf[:16]) + struct.pack(">i", len(self.hello)) + self.hello + bytes(buf[20 + n:])
        if out is None:
            if len(buf) > 8192:
                out = bytes(buf)
            else:
                return b""
        self.hello = None
        self.hello_buf = bytearray()
        return out

    def reset(self):
        """Close with an RST towards the client (its next send fails with ECONNRESET)."""
        try:
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close()

    def close(self):
        if self.closed:
            return
        self.closed = True
        for s in self.sockets():
            try:
                self.proxy.sel.unregister(s)
            except (KeyError, ValueError):
                pass
            try:
                s.close()
            except OSError:
                pass
        self.proxy.conns.discard(self)
        self.proxy.dirty = True

    def on_event(self, sock, mask):
        st = self.proxy.stats
        if mask & selectors.EVENT_READ:
            try:
                data = sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                self.close()
                return
            if data is not None:
                if not data and self.silent and sock is self.upstream:
                    # silent after a push: the server's close is not passed on either (the client
                    # hears nothing until heal closes its side)
                    try:
                        self.proxy.sel.unregister(sock)
                    except (KeyError, ValueError):
                        pass
                    try:
                        sock.close()
                    except OSError:
                        pass
                    self.upstream = None
                    self.to_server.clear()
                    self.proxy.stats["closes_held"] += 1
                    self.proxy.dirty = True
                    self.update()
                    return
                if not data:
                    # either side closed: close both (the peer sees EOF), once the peer has what
                    # was already read for it (a ZooKeeper member writes its election handshake
                    # and closes at once when it expects the other member to connect back)
                    if sock is self.client and self.hello is not None and self.hello_buf:
                        self.to_server += self.hello_buf
                        self.hello, self.hello_buf = None, bytearray()
                    pending = self.to_server if sock is self.client else self.to_client
                    if not pending or self.upstream is None:
                        self.close()
                        return
                    self.closing = True
                    self.update()
                    return
                if sock is self.client and self.hello is not None:
                    data = self.rewrite_hello(data)
                if not data:
                    pass
                elif sock is self.client:
                    if self.drop_c2s or self.upstream is None:
                        st["c2s_dropped"] += len(data)
                    elif (self.proxy.delay > 0 and self.proxy.delay_c2s) or self.delayed_c2s:
                        self.hold(True, data)
                    else:
                        self.to_server += data
                else:
                    cut = None if self.drop_s2c else self.follow(data)
                    rest = b""
                    if cut is not None:
                        data, rest = data[:cut], data[cut:]
                    if self.drop_s2c:
                        st["s2c_dropped"] += len(data)
                    elif self.proxy.delay > 0 or self.delayed:
                        self.hold(False, data)
                    else:
                        self.to_client += data
                    if cut is not None:
                        st["s2c_dropped"] += len(rest)
                        self.proxy.silence_after_push(self)
                        if self.closed:
                            return
                self.proxy.dirty = True
        if mask & selectors.EVENT_WRITE:
            if sock is self.client:
                buf, key = self.to_client, "s2c"
            else:
                buf, key = self.to_server, "c2s"
            if buf:
                try:
                    n = sock.send(buf)
                except (BlockingIOError, InterruptedError):
                    n = 0
                except OSError:
                    self.close()
                    return
                del buf[:n]
                st[key] += n
                self.proxy.dirty = True
            if self.closing and not self.to_client and not self.to_server:
                self.close()
                return
        self.update()


class Proxy:
    def __init__(self, port, target, control, parent, max_seconds, routes=()):
        self.target = target
        self.control = control
        self.parent = parent
        self.parent_start = proc_start_time(parent) if parent else None
        self.deadline = time.monotonic() + max_seconds
        self.sel = selectors.DefaultSelector()
        self.conns = set()
        self.new_mode = "pass"
        self.delay = 0
        self.delay_c2s = True  # False: `delay_replies` (towards the client only)
        self.heal_at = None
        self.applied = 0
        self.pending_signals = []
        self.stop = False
        self.dirty = True
        self.last_status = None
        self.push_armed = None            # seconds of silence after the next push, while armed
        self.push_ms = -1
        self.stats = {"accepted": 0, "c2s": 0, "s2c": 0, "c2s_dropped": 0, "s2c_dropped": 0,
                      "pushes": 0, "push_silenced": 0, "closes_held": 0}
        self.routes = {}                  # listening socket -> (target, hello)
        ports = []
        for lport, ltarget, hello in [(port, target, None)] + list(routes):
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", lport))
            listener.listen(64)
            listener.setblocking(False)
            self.sel.register(listener, selectors.EVENT_READ, None)
            self.routes[listener] = (ltarget, hello)
            ports.append(listener.getsockname()[1])
        self.port = ports[0]
        write_atomic(control + ".port", "".join("%d\n" % p for p in ports))

    # ------------------------------------------------------------ connections

    def accept(self, listener):
        target, hello = self.routes[listener]
        for _ in range(64):
            try:
                client, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.stats["accepted"] += 1
            self.dirty = True
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            mode = self.new_mode
            if mode == "refuse" or len(self.conns) >= MAX_CONNS:
                client.close()
                continue
            upstream = None
            if mode != "blackhole":
                try:
                    upstream = socket.create_connection(target, timeout=2)
                except OSError:
                    client.close()  # target down: the client sees the connection close
                    continue
                upstream.setblocking(False)
                upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Conn(self, client, upstream, hello)
            if mode == "drop":
                conn.drop_s2c = True
            self.conns.add(conn)
            conn.update()

    # ------------------------------------------------------------ commands

    def silence_after_push(self, conn):
        """A push was just forwarded on conn while armed: blackhole everything, keep what conn
        already has for its client (the push last), heal by itself later."""
        seconds = self.push_armed
        self.push_armed = None
        for c in list(self.conns):
            if c is conn:
                while c.delayed:
                    _, to_server, data = c.delayed.pop(0)
                    c.delayed_bytes -= len(data)
                    if to_server:
                        self.stats["c2s_dropped"] += len(data)
                    else:
                        c.to_client += data
            else:
                c.to_client.clear()
            c.drop_s2c = c.drop_c2s = True
            c.silent = True
            c.to_server.clear()
            c.update()
        self.new_mode = "blackhole"
        self.heal_at = time.monotonic() + seconds
        self.push_ms = int(time.monotonic() * 1000)
        self.stats["push_silenced"] += 1
        self.dirty = True

    def apply(self, cmd, arg):
        if cmd == "drop":
            for c in self.conns:
                c.drop_s2c = True
                c.to_client.clear()
        elif cmd == "drop_both":
            for c in self.conns:
                c.drop_s2c = c.drop_c2s = True
                c.to_client.clear()
                c.to_server.clear()
        elif cmd == "cut":
            for c in list(self.conns):
                c.close()
        elif cmd == "reset":
            for c in list(self.conns):
                c.reset()
        elif cmd == "heal":
            for c in list(self.conns):
                if c.drop_s2c or c.drop_c2s or c.upstream is None:
                    c.close()
            self.new_mode = "pass"
            self.delay = 0
            self.delay_c2s = True
            self.heal_at = None
            self.push_armed = None
        elif cmd == "blackhole":
            for c in self.conns:
                c.drop_s2c = c.drop_c2s = True
                c.to_client.clear()
                c.to_server.clear()
            self.new_mode = "blackhole"
        elif cmd == "delay" or cmd == "delay_replies":
            try:
                self.delay = max(0, min(int(arg), 600000))
                self.delay_c2s = cmd == "delay"
            except (TypeError, ValueError):
                pass
        elif cmd == "blackhole_after_push":
            try:
                self.push_armed = max(0.0, float(arg))
            except (TypeError, ValueError):
                pass
        elif cmd == "heal_after":
            try:
                self.heal_at = time.monotonic() + max(0.0, float(arg))
            except (TypeError, ValueError):
                pass
        elif cmd == "new":
            if arg in ("pass", "blackhole", "refuse", "drop"):
                self.new_mode = arg
        elif cmd == "quit":
            self.stop = True
        for c in list(self.conns):
            c.update()
        self.dirty = True

    def poll_control(self):
        try:
            with open(self.control) as f:
                text = f.read()
        except OSError:
            return
        acked = self.applied
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 2 or not parts[0].isdigit():
                continue
            seq = int(parts[0])
            if seq <= self.applied:
                continue
            self.apply(parts[1], parts[2] if len(parts) > 2 else None)
            self.applied = seq
        if self.applied != acked:
            self.write_status()  # the status shows a command's effect once its ack is visible
            write_atomic(self.control + ".ack", "%d\n" % self.applied)

    def write_status(self, force=False):
        if not (self.dirty or force):
            return
        self.dirty = False
        dropping = sum(1 for c in self.conns if c.drop_s2c or c.drop_c2s)
        lines = ["open %d" % len(self.conns), "dropping %d" % dropping, "new %s" % self.new_mode,
                 "applied %d" % self.applied, "delay %d" % self.delay,
                 "healing %d" % (1 if self.heal_at is not None else 0),
                 "armed %d" % (1 if self.push_armed is not None else 0), "push_ms %d" % self.push_ms]
        lines += ["%s %d" % (k, v) for k, v in sorted(self.stats.items())]
        text = "\n".join(lines) + "\n"
        if text != self.last_status or force:
            self.last_status = text
            write_atomic(self.control + ".status", text)

    def parent_alive(self):
        if self.parent:
            st = proc_start_time(self.parent)
            return st is not None and (self.parent_start is None or st == self.parent_start)
        return os.getppid() == self.initial_ppid

    # ------------------------------------------------------------ main loop

    def run(self):
        self.initial_ppid = os.getppid()
        next_tick = 0.0
        while not self.stop:
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + TICK
                if now > self.deadline or not self.parent_alive():
                    break
                while self.pending_signals:
                    self.apply(self.pending_signals.pop(0), None)
                if self.heal_at is not None and now >= self.heal_at:
                    self.apply("heal", None)
                self.poll_control()
                self.write_status()
            due = None
            for c in list(self.conns):
                if c.delayed:
                    d = c.release_due(time.monotonic())
                    if d is not None and (due is None or d < due):
                        due = d
            wake = next_tick if due is None else min(next_tick, due)
            timeout = max(0.0, wake - time.monotonic())
            try:
                events = self.sel.select(timeout)
            except InterruptedError:
                continue
            for key, mask in events:
                if key.data is None:
                    self.accept(key.fileobj)
                else:
                    conn = key.data
                    if not conn.closed:
                        conn.on_event(key.fileobj, mask)
        for c in list(self.conns):
            c.close()
        for listener in self.routes:
            listener.close()
        self.write_status(force=True)


def main(argv):
    args, opts, routes = [], {"--parent": None, "--max-seconds": "900"}, []
    i = 1
    while i < len(argv):
        if argv[i] == "--route" and i + 1 < len(argv):
            routes.append(argv[i + 1].split(","))
            i += 2
        elif argv[i] in opts and i + 1 < len(argv):
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) != 3:
        sys.stderr.write(__doc__)
        return 2
    port = int(args[0])
    def address(s):
        host, _, tport = s.rpartition(":")
        return (host or "127.0.0.1", int(tport))

    extra = []
    for r in routes:
        if len(r) not in (2, 3):
            sys.stderr.write("bad --route %s: expected LISTEN_PORT,HOST:PORT[,HELLO_HOST:PORT]\n" % ",".join(r))
            return 2
        extra.append((int(r[0]), address(r[1]), r[2].encode() if len(r) == 3 else None))
    parent = int(opts["--parent"]) if opts["--parent"] else None
    proxy = Proxy(port, address(args[1]), args[2], parent, float(opts["--max-seconds"]), extra)

    def on_signal(signum, frame):
        if signum == signal.SIGUSR1:
            proxy.pending_signals.append("drop")
        elif signum == signal.SIGUSR2:
            proxy.pending_signals.append("cut")
        else:
            proxy.stop = True

    for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    proxy.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
