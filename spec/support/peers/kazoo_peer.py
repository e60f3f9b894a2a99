"""kazoo_peer.py - a Kazoo 2.8 contender (Debian's python3-kazoo) for the interop specs.

    /usr/bin/python3 spec/support/peers/kazoo_peer.py HOSTS DIR PARENT_PID MAX_SECONDS [SESSION_MS]

Same file protocol, commands, clock and log format as CuratorPeer.java (see there and
spec/support/peers/peer.lua): commands in DIR/control, replies in DIR/reply, "0 ready" once
connected. Times are time.monotonic() in milliseconds, i.e. CLOCK_MONOTONIC, the clock of zklock's
core.now() and of Java's System.nanoTime() on Linux.

Recipes (the `recipe=` argument):
  lock         kazoo Lock
  rlock        kazoo ReadLock   (2.8.0: its own node does not match its own pattern, kazoo#649)
  wlock        kazoo WriteLock
  compat       a Lock subclass that *creates* Curator-style names: _NODE_NAME = "-lock-" and
               _EXCLUDE_NAMES = ["-lock-", "__lock__"] (private attributes of kazoo's Lock)
  semaphore    kazoo Semaphore (max= leases)
  rwmix        loop only: each iteration rlock or wlock (write_pct % writes)
`patterns=` gives extra_lock_patterns, comma-separated (absent or empty: none), e.g.
patterns=-lock-  or  patterns=__WRIT__,__READ__ . `timeout_ms=0` means blocking=False.

Extra commands:
  participants recipe= path= [patterns=]   the children the recipe counts as contenders, in its
                                           own order (its regex), "-> ok n= list="
  lockobj id= recipe= path= [patterns=]    make a lock object and keep it (reused by hold obj=id)
  hold ... [obj=<lockobj id>]              acquire with that object instead of a new one
  exists path=                             -> ok exists=0|1
"""
import os
import random
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout, NoNodeError
from kazoo.recipe.lock import Lock, ReadLock, WriteLock, Semaphore
import kazoo.version

HOSTS, DIR, PARENT, MAX_SECONDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
SESSION_MS = int(sys.argv[5]) if len(sys.argv) > 5 else 10000
REPLY = os.path.join(DIR, "reply")
CONTROL = os.path.join(DIR, "control")
PID = str(os.getpid())
reply_lock = threading.Lock()
events = []            # connection state changes, in order
events_lock = threading.Lock()
holders = {}           # id -> Holder
lockobjs = {}          # id -> lock object (lockobj command)


def now():
    return time.monotonic() * 1000.0


def fmt(ms):
    return "%.3f" % ms


def one_line(e):
    return ("%s:%s" % (type(e).__name__, e)).replace(" ", "_").replace("\n", "_")


def reply(seq, text):
    with reply_lock:
        with open(REPLY, "a") as f:
            f.write("%d %s\n" % (seq, text.replace("\n", " ")))


class CompatLock(Lock):
    """A kazoo Lock whose nodes are named <hex32>-lock-<seq10>, which Curator and zklock parse."""
    _NODE_NAME = "-lock-"
    _EXCLUDE_NAMES = ["-lock-", "__lock__"]


RECIPES = {"lock": Lock, "rlock": ReadLock, "wlock": WriteLock, "compat": CompatLock}


def patterns_of(a):
    p = a.get("patterns", "")
    return [x for x in p.split(",") if x]


def make_lock(client, recipe, path, a):
    if recipe == "semaphore":
        return Semaphore(client, path, identifier="kazoo-" + PID, max_leases=int(a.get("max", 1)))
    cls = RECIPES[recipe]
    return cls(client, path, identifier="kazoo-" + PID, extra_lock_patterns=patterns_of(a))


def acquire(obj, timeout_ms):
    """True if acquired, False if it timed out (LockTimeout or a False return)."""
    try:
        if timeout_ms is None or timeout_ms < 0:
            return bool(obj.acquire())
        if timeout_ms == 0:
            return bool(obj.acquire(blocking=False))
        return bool(obj.acquire(timeout=timeout_ms / 1000.0))
    except LockTimeout:
        return False


def node_of(obj):
    if isinstance(obj, Semaphore):
        return obj.create_path
    return obj.path + "/" + obj.node


def czxid(node):
    try:
        st = client.exists(node)
        return st.czxid if st else -1
    except Exception:  # noqa: BLE001
        return -1


class Holder:
    def __init__(self):
        self.go = threading.Event()
        self.release_seq = None


def farg(a, k, d):
    v = a.get(k)
    return d if v is None or v == "" else float(v)


def handle(seq, cmd, a):
    try:
        if cmd == "ping":
            reply(seq, "ok now=%s version=%s pid=%s" % (fmt(now()), kazoo.version.__version__, PID))
        elif cmd == "participants":
            obj = make_lock(client, a["recipe"], a["path"], a)
            try:
                children = client.get_children(a["path"])
            except NoNodeError:
                children = []
            regex = obj._contenders_re  # what the recipe counts as a contender (2.8 private API)
            ms = sorted((m for m in (regex.search(c) for c in children) if m), key=lambda m: m.groups())
            names = [m.string for m in ms]
            reply(seq, "ok n=%d list=%s" % (len(names), ",".join(names)))
        elif cmd == "lockobj":
            lockobjs[a["id"]] = make_lock(client, a["recipe"], a["path"], a)
            reply(seq, "ok")
        elif cmd == "exists":
            reply(seq, "ok exists=%d" % (1 if client.exists(a["path"]) else 0))
        elif cmd == "hold":
            if a.get("obj"):
                obj = lockobjs[a["obj"]]
            else:
                obj = make_lock(client, a["recipe"], a["path"], a)
            t0 = now()
            try:
                got = acquire(obj, farg(a, "timeout_ms", -1))
            except Exception as e:  # noqa: BLE001
                reply(seq, "err %s waited=%s" % (one_line(e), fmt(now() - t0)))
                return
            if not got:
                reply(seq, "timeout waited=%s" % fmt(now() - t0))
                return
            start = now()
            node = node_of(obj)
            h = Holder()
            holders[a["id"]] = h
            reply(seq, "ok node=%s czxid=%d start=%s" % (node, czxid(node), fmt(start)))
            if not h.go.wait(MAX_SECONDS):
                return
            end = now()
            obj.release()
            reply(h.release_seq, "ok start=%s end=%s" % (fmt(start), fmt(end)))
        elif cmd == "release":
            h = holders.pop(a.get("id"), None)
            if h is None:
                reply(seq, "err no_such_hold")
                return
            h.release_seq = seq
            h.go.set()
        elif cmd == "loop":
            loop(seq, a)
        elif cmd == "quit":
            client.stop()
            client.close()
            reply(seq, "ok")
            os._exit(0)
        else:
            reply(seq, "err unknown_command_" + cmd)
    except Exception as e:  # noqa: BLE001
        reply(seq, "err " + one_line(e))


def loop(seq, a):
    recipe, path = a["recipe"], a["path"]
    key = a.get("key", path)
    threads = int(a.get("threads", 2))
    seconds = farg(a, "seconds", 5)
    start_at = farg(a, "start_at", now())
    hold_ms, hold_min = farg(a, "hold_ms", 5), farg(a, "hold_min_ms", 0)
    gap_ms = farg(a, "gap_ms", 0)
    write_pct = int(a.get("write_pct", 30))
    timeout_ms = farg(a, "timeout_ms", 10000)
    seed = int(farg(a, "seed", 1))
    end = start_at + seconds * 1000
    counts = {"holds": 0, "timeouts": 0, "errors": 0}
    first_error = []
    clock = threading.Lock()
    log = open(a["log"], "a")

    def emit(line):
        with clock:
            log.write(line + "\n")

    def worker(ti):
        r = random.Random(seed * 1000003 + ti)
        try:
            if recipe == "rwmix":
                objs = {"read": make_lock(client, "rlock", path, a), "write": make_lock(client, "wlock", path, a)}
            else:
                mode0 = "lease" if recipe == "semaphore" else ("read" if recipe == "rlock" else
                                                               "write" if recipe == "wlock" else "mutex")
                objs = {mode0: make_lock(client, recipe, path, a)}
            wait = start_at - now()
            if wait > 0:
                time.sleep(wait / 1000.0)
            while now() < end:
                if recipe == "rwmix":
                    mode = "write" if r.randrange(100) < write_pct else "read"
                else:
                    mode = next(iter(objs))
                obj = objs[mode]
                t0 = now()
                try:
                    got = acquire(obj, timeout_ms)
                except Exception as e:  # noqa: BLE001
                    with clock:
                        counts["errors"] += 1
                        if not first_error:
                            first_error.append(one_line(e))
                    emit("F\t%s\t%s\t%s" % (mode, type(e).__name__, fmt(now() - t0)))
                    time.sleep(0.05)
                    continue
                if not got:
                    with clock:
                        counts["timeouts"] += 1
                    emit("F\t%s\tETIMEDOUT\t%s" % (mode, fmt(now() - t0)))
                    continue
                start = now()
                with events_lock:
                    ev0 = len(events)
                node = node_of(obj)
                z = czxid(node)
                hold = hold_min + r.random() * (hold_ms - hold_min)
                if hold > 0:
                    time.sleep(hold / 1000.0)
                finish = now()
                with events_lock:
                    sess = ",".join(events[ev0:]) or "-"
                rel = "ok"
                try:
                    obj.release()
                except Exception as e:  # noqa: BLE001
                    rel = type(e).__name__
                    with clock:
                        counts["errors"] += 1
                        if not first_error:
                            first_error.append(one_line(e))
                with clock:
                    counts["holds"] += 1
                emit("\t".join(["S" if mode == "lease" else "H", key, "kazoo-" + PID, "t%d" % ti, str(z),
                                fmt(start), fmt(finish), sess, "-", "1", rel, node.rsplit("/", 1)[-1], mode]))
                if gap_ms > 0:
                    time.sleep(r.random() * gap_ms / 1000.0)
        except Exception as e:  # noqa: BLE001
            with clock:
                counts["errors"] += 1
                if not first_error:
                    first_error.append(one_line(e))
            emit("X\t" + one_line(e))

    th = [threading.Thread(target=worker, args=(i + 1,), daemon=True) for i in range(threads)]
    for t in th:
        t.start()
    for t in th:
        t.join(seconds + timeout_ms / 1000.0 + 60)
    with clock:
        log.close()
    reply(seq, "ok holds=%d timeouts=%d errors=%d%s" % (
        counts["holds"], counts["timeouts"], counts["errors"], (" error=" + first_error[0]) if first_error else ""))


def parent_alive():
    try:
        os.kill(PARENT, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % PARENT) as f:
            return f.read().split(") ")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def on_state(state):
    with events_lock:
        events.append(str(state))


client = KazooClient(hosts=HOSTS, timeout=SESSION_MS / 1000.0)
client.add_listener(on_state)
client.start(timeout=30)
with events_lock:
    del events[:]
reply(0, "ready now=%s pid=%s" % (fmt(now()), PID))

deadline = now() + MAX_SECONDS * 1000
offset = 0
partial = ""
polls = 0
while now() < deadline:
    polls += 1
    if polls % 100 == 0 and not parent_alive():
        break
    try:
        size = os.path.getsize(CONTROL)
    except OSError:
        size = 0
    if size > offset:
        with open(CONTROL, "rb") as f:
            f.seek(offset)
            data = f.read(size - offset)
        offset += len(data)
        partial += data.decode()
        while "\n" in partial:
            line, partial = partial.split("\n", 1)
            w = line.split()
            if not w:
                continue
            kv = {}
            for x in w[2:]:
                k, _, v = x.partition("=")
                kv[k] = v
            threading.Thread(target=handle, args=(int(w[0]), w[1] if len(w) > 1 else "", kv), daemon=True).start()
    else:
        time.sleep(0.002)
try:
    client.stop()
    client.close()
finally:
    os._exit(0)
