"""handoff_kazoo.py - a Kazoo 2.8 worker of bench/drivers/handoff_drain.lua (Debian's python3-kazoo).

    /usr/bin/python3 bench/drivers/handoff_kazoo.py HOSTS PATH N BATCH STATEFILE

The same protocol as the zklock worker in handoff_drain.lua: one KazooClient, N threads each
waiting on its own kazoo.recipe.lock.Lock of PATH, queued in batches of BATCH (a batch counts as
queued when every one of its locks has its node); then STATEFILE.ready. When the coordinator's
holder releases, every thread takes the lock once and releases it; the worker writes
STATEFILE.done: "<monotonic ms of its last acquisition> <bytes received> <acquisitions> -1 -1"
(bytes: tcp_info bytes_received of this process's connections to the server, through ss(8),
before and after the drain; -1 -1: Kazoo keeps no request counters).
"""
import logging
import os
import re
import subprocess
import sys
import threading
import time

from kazoo.client import KazooClient


def received(port):
    """Bytes this process's TCP connections to the server have received (-1: ss missing)."""
    try:
        out = subprocess.run(["ss", "-tinpH", "state", "established", "( dport = :%d )" % port],
                             capture_output=True, text=True, check=False).stdout
    except OSError:
        return -1
    total, mine, tag = 0, False, "pid=%d," % os.getpid()
    for line in out.splitlines():
        if line[:1] and not line[:1].isspace():
            mine = tag in line
        elif mine:
            m = re.search(r"bytes_received:(\d+)", line)
            if m:
                total += int(m.group(1))
    return total


def main():
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # the coordinator takes any output as a failure
    hosts, path, n, batch, state = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    port = int(hosts.rsplit(":", 1)[1])
    client = KazooClient(hosts=hosts, timeout=30)
    client.start(timeout=30)
    done = [0]
    early = [0]
    ready = [False]
    last = [0.0]
    mu = threading.Lock()
    failures = []

    def waiter(lock):
        try:
            if not lock.acquire(timeout=1200):
                raise RuntimeError("timed out")
            with mu:
                early[0] += 0 if ready[0] else 1  # took the lock before the holder released: a bug
                done[0] += 1
                last[0] = time.monotonic() * 1000.0
            lock.release()
        except Exception as e:  # reported through the state file's count and stderr
            failures.append(e)

    threads, locks = [], []
    limit = time.monotonic() + 600  # bounded: 10 minutes to queue
    queued = 0
    while queued < n:
        b = min(batch, n - queued)
        for _ in range(b):
            # the holder (the coordinator's zklock mutex) and zklock's and Curator's waiters name
            # their nodes "..-lock-<seq>": Kazoo's Lock sees them only when told (its own are
            # "..__lock__<seq>"); without it every Kazoo waiter would take the lock at once
            lock = client.Lock(path, "w", extra_lock_patterns=["-lock-"])
            t = threading.Thread(target=waiter, args=(lock,), daemon=True)
            t.start()
            threads.append(t)
            locks.append(lock)
        queued += b
        while any(lk.node is None for lk in locks[-b:]):  # the batch's nodes made
            if time.monotonic() > limit or failures:
                sys.stderr.write("waiters did not queue: %r\n" % (failures[:1],))
                os._exit(2)
            time.sleep(0.001)
    time.sleep(0.3)  # the last watches set
    ready[0] = True
    if early[0]:
        sys.stderr.write("%d waiter(s) took the lock while the holder held it\n" % early[0])
        os._exit(2)
    r0 = received(port)
    with open(state + ".ready", "w") as f:
        f.write("ready\n")
    end = time.monotonic() + 1200
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    r1 = received(port)
    if failures:
        sys.stderr.write("a waiter failed: %r\n" % failures[0])
    nbytes = -1 if r0 < 0 or r1 < 0 else r1 - r0
    with open(state + ".tmp", "w") as f:
        f.write("%.3f %d %d -1 -1\n" % (last[0], nbytes, done[0]))
    os.rename(state + ".tmp", state + ".done")
    client.stop()
    client.close()
    os._exit(0)


main()
