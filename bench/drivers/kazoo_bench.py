"""kazoo_bench.py - the Kazoo 2.8 contender (Debian's python3-kazoo, run by /usr/bin/python3).

    /usr/bin/python3 bench/drivers/kazoo_bench.py HOSTS WORKLOAD key=value ...

Same workloads and output as bench/drivers/zklock_bench.lua, with threads instead of
coroutines: one KazooClient per process, one recipe object per thread. Kazoo's own recipes
(Lock, ReadLock, Semaphore) with their own node names and layout.
"""
import math
import os
import re
import socket
import sys
import threading
import time

from kazoo.client import KazooClient

HOSTS, WORKLOAD = sys.argv[1], sys.argv[2]
OPT = {}
for a in sys.argv[3:]:
    k, _, v = a.partition("=")
    OPT[k] = v
PORT = int(HOSTS.rsplit(":", 1)[1])
now = time.monotonic
cpu = time.process_time  # user + system CPU of the whole process (every thread): CLOCK_PROCESS_CPUTIME_ID


def iopt(k, d):
    return int(OPT.get(k, d))


N4 = [0]  # four-letter words sent (each adds `cost` to zk_packets_received)


def four(cmd):
    N4[0] += 1
    with socket.create_connection(("127.0.0.1", PORT), timeout=5) as s:
        s.sendall(cmd.encode())
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode()


WATCH_KEYS = ("zk_sum_node_deleted_watch_count", "zk_sum_node_children_watch_count",
              "zk_sum_node_changed_watch_count", "zk_sum_node_created_watch_count")


def snap():
    m = {}
    for line in four("mntr").splitlines():
        kv = line.split("\t")
        if len(kv) == 2:
            try:
                m[kv[0]] = int(kv[1])
            except ValueError:
                pass
    return m.get("zk_packets_received", -1), sum(m.get(k, 0) for k in WATCH_KEYS), N4[0]


def mntr_cost():
    a, b = snap(), snap()
    return b[0] - a[0]


def requests(a, b):
    """requests sent to the server between two snaps, less what the four-letter words added"""
    return b[0] - a[0] - cost * (b[2] - a[2])


def total_watches():
    m = re.search(r"Total watches:\s*(\d+)", four("wchs"))
    return int(m.group(1)) if m else -1


def rss_kb(field="VmRSS"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def pct(s, q):
    if not s:
        return 0
    return s[int(math.floor(q * (len(s) - 1) + 0.5))]


out = {"rss_start_kb": rss_kb()}
client = KazooClient(hosts=HOSTS, timeout=10)
client.start(timeout=10)
rss_idle = rss_kb()
out["rss_idle_kb"] = rss_idle
base = "/bench/kazoo-%d" % os.getpid()
cost = mntr_cost()
secs = float(OPT.get("secs", 3))
failures = []


def run_threads(fns):
    th = [threading.Thread(target=f, daemon=True) for f in fns]
    for x in th:
        x.start()
    for x in th:
        x.join(300)
    if failures:
        raise failures[0]


if WORKLOAD == "uncontended":
    n, warm = iopt("n", 2000), iopt("warm", 200)
    m = client.Lock(base + "/uncontended")
    for _ in range(warm):
        m.acquire(timeout=10)
        m.release()
    lat = []
    s0 = snap()
    t0, cpu0 = now(), cpu()
    for _ in range(n):
        a = now()
        if not m.acquire(timeout=10):
            raise RuntimeError("timeout")
        m.release()
        lat.append(now() - a)
    el, cpu_el = now() - t0, cpu() - cpu0
    s1 = snap()
    lat.sort()
    out.update(cpu_us_per=cpu_el / n * 1e6, ops=n, secs=el, rate=n / el, p50_us=pct(lat, 0.5) * 1e6, p99_us=pct(lat, 0.99) * 1e6,
               req_per=requests(s0, s1) / n, notif_per=(s1[1] - s0[1]) / n)

elif WORKLOAD in ("contended", "read", "semaphore"):
    t = iopt("t", 64)
    path = base + "/" + WORKLOAD

    def make():
        if WORKLOAD == "contended":
            r = client.Lock(path)
        elif WORKLOAD == "read":
            r = client.ReadLock(path)
        else:
            r = client.Semaphore(path, max_leases=iopt("max", 4))
        return r

    w = make()
    w.acquire(timeout=10)
    w.release()
    objs = [make() for _ in range(t)]
    waits, count = [], [0]
    lock = threading.Lock()
    s0 = snap()
    t0, cpu0 = now(), cpu()
    deadline = t0 + secs

    def worker(r):
        try:
            local = []
            while now() < deadline:
                a = now()
                if not r.acquire(timeout=120):
                    raise RuntimeError("timeout")
                local.append(now() - a)
                r.release()
            with lock:
                waits.extend(local)
                count[0] += len(local)
        except Exception as e:  # noqa: BLE001 - reported by run_threads
            failures.append(e)

    run_threads([lambda r=r: worker(r) for r in objs])
    el, cpu_el = now() - t0, cpu() - cpu0
    s1 = snap()
    waits.sort()
    n = count[0]
    out.update(cpu_us_per=cpu_el / n * 1e6)
    out.update(t=t, ops=n, secs=el, rate=n / el, p50_wait_us=pct(waits, 0.5) * 1e6,
               p99_wait_us=pct(waits, 0.99) * 1e6, req_per=requests(s0, s1) / n,
               notif_per=(s1[1] - s0[1]) / n, rss_kb=rss_kb())

elif WORKLOAD == "independent":
    t = iopt("t", 1000)
    warmed = threading.Barrier(t + 1)
    go = threading.Event()
    count = [0]
    lock = threading.Lock()
    deadline = [0.0]

    def worker(i):
        try:
            m = client.Lock("%s/independent/%d" % (base, i))
            m.acquire(timeout=60)
            m.release()
            warmed.wait(300)
            go.wait(300)
            k = 0
            while now() < deadline[0]:
                if not m.acquire(timeout=120):
                    raise RuntimeError("timeout")
                k += 1
                m.release()
            with lock:
                count[0] += k
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    th = [threading.Thread(target=worker, args=(i + 1,), daemon=True) for i in range(t)]
    for x in th:
        x.start()
    warmed.wait(300)
    s0 = snap()
    t0, cpu0 = now(), cpu()
    deadline[0] = t0 + secs
    go.set()
    for x in th:
        x.join(300)
    if failures:
        raise failures[0]
    el, cpu_el = now() - t0, cpu() - cpu0
    s1 = snap()
    n = count[0]
    out.update(cpu_us_per=cpu_el / n * 1e6)
    out.update(t=t, ops=n, secs=el, rate=n / el, req_per=requests(s0, s1) / n,
               rss_kb=rss_kb(), rss_peak_kb=rss_kb("VmHWM"))

elif WORKLOAD == "herd":
    t = iopt("t", 100)
    path = base + "/herd"
    m = client.Lock(path)
    m.acquire(timeout=10)
    m.release()
    m.acquire(timeout=10)
    done = [0]
    lock = threading.Lock()
    s0 = snap()
    t0 = now()

    def waiter():
        try:
            w = client.Lock(path)
            if not w.acquire(timeout=600):
                raise RuntimeError("timeout")
            w.release()
            with lock:
                done[0] += 1
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    th = [threading.Thread(target=waiter, daemon=True) for _ in range(t)]
    for x in th:
        x.start()
    polls = 0
    limit = now() + 600
    while True:
        polls += 1
        if len(client.get_children(path)) >= t + 1:
            break
        if now() > limit:
            raise RuntimeError("waiters did not queue within 600 s")
        time.sleep(0.2 if t >= 5000 else 0.01)
    while True:  # ... and every waiter's watch set (Kazoo sets it a round trip after listing)
        watches_q = total_watches()
        if watches_q >= t or now() > limit:
            break
        time.sleep(0.01)
    out["enqueue_secs"] = now() - t0
    rss_q = rss_kb()
    s1 = snap()
    tr, cpu0 = now(), cpu()
    m.release()
    for x in th:
        x.join(600)
    if failures:
        raise failures[0]
    el, cpu_el = now() - tr, cpu() - cpu0
    s2 = snap()
    out["cpu_us_per"] = cpu_el / t * 1e6  # the drain: CPU per acquisition
    out.update(t=t, acquired=done[0], handoff_secs=el, handoff_rate=t / el,
               req_per=(requests(s0, s2) - polls) / t, notif_per=(s2[1] - s1[1]) / t,
               watches_queued=watches_q, rss_queued_kb=rss_q, rss_above_idle_kb=rss_q - rss_idle,
               rss_peak_kb=rss_kb("VmHWM"))
else:
    raise SystemExit("unknown workload " + WORKLOAD)

client.stop()
client.close()
print("RESULT " + " ".join("%s=%s" % (k, ("%.3f" % v) if isinstance(v, float) else v)
                           for k, v in sorted(out.items())), flush=True)
