// SharedPeer.java - Apache Curator 5.4 shared values and double barrier for the interop spec
// spec/76-curator-shared_spec.lua. Same file protocol as CuratorPeer.java (see peer.lua); main,
// ping and quit are PeerControl.runCurator's:
//   java -cp <classes>:<jars> SharedPeer HOSTS DIR PARENT_PID MAX_SECONDS [SESSION_MS]
//   DIR/control  "<seq> <command> key=value ..."; DIR/reply "<seq> ok|timeout|err key=value ..."
// Every command runs on a thread of its own.
//   ping                                   -> ok now=<ms> pid=<pid>
//   count_add path= n= [seed=]             SharedCount: n times read the versioned value and
//                                          trySetCount(value + 1) until it succeeds
//                                          -> ok tries=<trySetCount calls>
//   count_get path= [seed=]                -> ok value=<n> version=<v>
//   count_listen id= path= [seed=]         a started SharedCount with a listener counting calls
//   count_seen id=                         -> ok n=<listener calls> last=<last value seen>
//   long_add path= n= [lock=]              DistributedAtomicLong (RetryNTimes(50, 1), PromotedToLock
//                                          at lock= if given): n increments, each repeated until
//                                          it succeeds -> ok fails=<unsucceeded increments>
//   long_get path=                         -> ok value=<n>
//   long_set path= value=                  forceSet -> ok
//   enter id= path= qty= [timeout_ms=]     DistributedDoubleBarrier (kept under id) enter
//                                          -> ok entered=true|false at=<ms>
//   leave id= [timeout_ms=]                -> ok left=true|false at=<ms>
//   wl_hold id= dir= [timeout_ms=]         ZooKeeper's own WriteLock (zookeeper-recipes-lock) on
//                                          the raw ZooKeeper handle: lock(), then wait for its
//                                          LockListener.lockAcquired up to timeout_ms; not acquired
//                                          in time: unlock() then close() (no later re-lock)
//                                          -> ok acquired=true|false node=<its id> at=<ms>
//   wl_release id=                         unlock() -> ok acquired_calls=<n> released_calls=<n> at=<ms>
//   quit                                   -> ok, then exit
// Clock: System.nanoTime() / 1e6 (CLOCK_MONOTONIC ms), like the other peers.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.recipes.atomic.*;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.shared.*;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.recipes.lock.LockListener;
import org.apache.zookeeper.recipes.lock.WriteLock;

public class SharedPeer extends PeerControl {
    static final ConcurrentHashMap<String, DistributedDoubleBarrier> barriers = new ConcurrentHashMap<>();
    static final ConcurrentHashMap<String, int[]> seen = new ConcurrentHashMap<>();
    static final ConcurrentHashMap<String, WriteLock> writeLocks = new ConcurrentHashMap<>();
    static final ConcurrentHashMap<String, int[]> wlCalls = new ConcurrentHashMap<>();

    static DistributedAtomicLong atomicLong(Map<String, String> a) {
        String lock = a.get("lock");
        if (lock == null) return new DistributedAtomicLong(client, a.get("path"), new RetryNTimes(50, 1));
        PromotedToLock p = PromotedToLock.builder().lockPath(lock).timeout(10, TimeUnit.SECONDS)
            .retryPolicy(new RetryNTimes(3, 1)).build();
        return new DistributedAtomicLong(client, a.get("path"), new RetryNTimes(2, 1), p);
    }

    // The commands of the header but ping and quit (PeerControl.runCurator answers those).
    static boolean run(long seq, String cmd, Map<String, String> a) throws Exception {
        switch (cmd) {
        case "count_add": {
            int n = iarg(a, "n", 1), tries = 0;
            try (SharedCount sc = new SharedCount(client, a.get("path"), iarg(a, "seed", 0))) {
                sc.start();
                for (int i = 0; i < n; i++) {
                    while (true) {
                        tries++;
                        VersionedValue<Integer> v = sc.getVersionedValue();
                        if (sc.trySetCount(v, v.getValue() + 1)) break;
                    }
                }
            }
            reply(seq, "ok tries=" + tries);
            break;
        }
        case "count_get": {
            try (SharedCount sc = new SharedCount(client, a.get("path"), iarg(a, "seed", 0))) {
                sc.start();
                VersionedValue<Integer> v = sc.getVersionedValue();
                reply(seq, "ok value=" + v.getValue() + " version=" + v.getVersion());
            }
            break;
        }
        case "count_listen": {
            SharedCount sc = new SharedCount(client, a.get("path"), iarg(a, "seed", 0));
            int[] s = new int[2];
            seen.put(a.get("id"), s);
            sc.addListener(new SharedCountListener() {
                public void countHasChanged(SharedCountReader r, int newCount) {
                    synchronized (s) { s[0]++; s[1] = newCount; }
                }
                public void stateChanged(CuratorFramework c, ConnectionState st) {}
            });
            sc.start();
            reply(seq, "ok");
            break;
        }
        case "count_seen": {
            int[] s = seen.get(a.get("id"));
            synchronized (s) { reply(seq, "ok n=" + s[0] + " last=" + s[1]); }
            break;
        }
        case "long_add": {
            DistributedAtomicLong dal = atomicLong(a);
            int n = iarg(a, "n", 1), fails = 0;
            for (int i = 0; i < n; i++) {
                while (!dal.increment().succeeded()) fails++;
            }
            reply(seq, "ok fails=" + fails);
            break;
        }
        case "long_get":
            reply(seq, "ok value=" + atomicLong(a).get().postValue());
            break;
        case "long_set":
            atomicLong(a).forceSet(Long.parseLong(a.get("value")));
            reply(seq, "ok");
            break;
        case "enter": {
            DistributedDoubleBarrier b = new DistributedDoubleBarrier(client, a.get("path"), iarg(a, "qty", 1));
            barriers.put(a.get("id"), b);
            int t = iarg(a, "timeout_ms", -1);
            boolean ok = true;
            if (t < 0) b.enter(); else ok = b.enter(t, TimeUnit.MILLISECONDS);
            reply(seq, "ok entered=" + ok + " at=" + fmt(now()));
            break;
        }
        case "leave": {
            DistributedDoubleBarrier b = barriers.get(a.get("id"));
            int t = iarg(a, "timeout_ms", -1);
            boolean ok = true;
            if (t < 0) b.leave(); else ok = b.leave(t, TimeUnit.MILLISECONDS);
            reply(seq, "ok left=" + ok + " at=" + fmt(now()));
            break;
        }
        case "wl_hold": {
            String id = a.get("id");
            int[] calls = new int[2];
            CountDownLatch got = new CountDownLatch(1);
            WriteLock wl = new WriteLock(client.getZookeeperClient().getZooKeeper(), a.get("dir"), null);
            wl.setLockListener(new LockListener() {
                public void lockAcquired() { synchronized (calls) { calls[0]++; } got.countDown(); }
                public void lockReleased() { synchronized (calls) { calls[1]++; } }
            });
            writeLocks.put(id, wl);
            wlCalls.put(id, calls);
            boolean ok = wl.lock();
            if (!ok) ok = got.await(iarg(a, "timeout_ms", 10000), TimeUnit.MILLISECONDS);
            // not acquired in time: unlock() and then close(): an unlocked WriteLock whose
            // predecessor watch fires later runs lock() again and makes a new node, and
            // close() alone deletes nothing (unlock() does nothing once closed)
            if (!ok) { wl.unlock(); wl.close(); }
            reply(seq, "ok acquired=" + ok + " node=" + wl.getId() + " at=" + fmt(now()));
            break;
        }
        case "wl_release": {
            WriteLock wl = writeLocks.get(a.get("id"));
            wl.unlock();
            int[] calls = wlCalls.get(a.get("id"));
            synchronized (calls) {
                reply(seq, "ok acquired_calls=" + calls[0] + " released_calls=" + calls[1] + " at=" + fmt(now()));
            }
            break;
        }
        default:
            return false;
        }
        return true;
    }

    public static void main(String[] args) throws Exception {
        runCurator(args, 10, SharedPeer::run);
    }
}
