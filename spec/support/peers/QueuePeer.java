// spec/support/peers/QueuePeer.java: the Java producers and consumers of the queue interop spec
// (75-queue-interop): Curator's SimpleDistributedQueue or ZooKeeper's queue recipe
// (org.apache.zookeeper.recipes.queue.DistributedQueue) on a queue path shared with zklock.
// Compiled and started by spec/support/queue_peers.lua.
//
//   java -cp ... QueuePeer <impl: curator|jar> <mode: produce|consume> <hosts> <path> <log>
//        <count (produce) | poll seconds (consume)> <prefix (produce) | stop file (consume)>
//        <max seconds> [threads (default 1): producer threads (items split among them) or
//        consumer threads, on one client] [work ms (consume): a sleep after each take, the
//        item's processing]
//
// Log lines (each written straight to the file, so a kill -9 loses nothing already logged):
//   R            ready: connected
//   P <item>     produce: the item was put (offer returned)
//   T <item>     consume: the item was taken (written after the take returned)
//   D <n> <ms>   done: n items put or taken, ms from the first to the last; the peer exits 0
//   X <text>     an error; the peer exits 1
// A consumer takes until a poll of `poll seconds` finds nothing once the stop file exists.
import java.io.FileOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.queue.SimpleDistributedQueue;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.recipes.queue.DistributedQueue;

public class QueuePeer {
    interface Q {
        void put(byte[] data) throws Exception;

        byte[] poll(long ms) throws Exception; // null: nothing within ms
    }

    static FileOutputStream log;

    static synchronized void line(String s) {
        try {
            log.write((s + "\n").getBytes(StandardCharsets.UTF_8));
        } catch (Exception e) {
            System.exit(3);
        }
    }

    public static void main(String[] args) throws Exception {
        String impl = args[0], mode = args[1], hosts = args[2], path = args[3];
        log = new FileOutputStream(args[4], true);
        final long maxSeconds = Long.parseLong(args[7]);
        Thread guard = new Thread(() -> {
            try {
                Thread.sleep(maxSeconds * 1000);
            } catch (InterruptedException e) {
                return;
            }
            line("X max seconds reached");
            System.exit(2);
        });
        guard.setDaemon(true);
        guard.start();
        Q q;
        if (impl.equals("curator")) {
            CuratorFramework c = CuratorFrameworkFactory.newClient(hosts, 10000, 10000, new RetryNTimes(3, 200));
            c.start();
            if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) throw new RuntimeException("no connection");
            SimpleDistributedQueue sq = new SimpleDistributedQueue(c, path);
            q = new Q() {
                public void put(byte[] d) throws Exception {
                    sq.offer(d);
                }

                public byte[] poll(long ms) throws Exception {
                    return sq.poll(ms, TimeUnit.MILLISECONDS);
                }
            };
        } else {
            CountDownLatch up = new CountDownLatch(1);
            ZooKeeper zk = new ZooKeeper(hosts, 10000, e -> {
                if (e.getState() == Watcher.Event.KeeperState.SyncConnected) up.countDown();
            });
            if (!up.await(30, TimeUnit.SECONDS)) throw new RuntimeException("no connection");
            DistributedQueue dq = new DistributedQueue(zk, path, ZooDefs.Ids.OPEN_ACL_UNSAFE);
            q = new Q() {
                public void put(byte[] d) throws Exception {
                    dq.offer(d);
                }

                // the recipe's take() has no timeout: poll, and sleep a little while it is empty
                public byte[] poll(long ms) throws Exception {
                    long end = System.nanoTime() + ms * 1000000L;
                    while (true) {
                        byte[] d = dq.poll();
                        if (d != null) return d;
                        if (System.nanoTime() >= end) return null;
                        Thread.sleep(20);
                    }
                }
            };
        }
        line("R");
        final java.util.concurrent.atomic.AtomicInteger n = new java.util.concurrent.atomic.AtomicInteger();
        final long[] span = { 0, 0 };
        try {
            if (mode.equals("produce")) {
                int count = Integer.parseInt(args[5]);
                String prefix = args[6];
                int threads = args.length > 8 ? Integer.parseInt(args[8]) : 1;
                final Q fq = q;
                final Exception[] failed = { null };
                Thread[] ts = new Thread[threads];
                span[0] = System.nanoTime();
                for (int t = 0; t < threads; t++) {
                    final int first = t + 1, step = threads;
                    ts[t] = new Thread(() -> {
                        try {
                            for (int i = first; i <= count; i += step) {
                                String item = prefix + "-" + i;
                                fq.put(item.getBytes(StandardCharsets.UTF_8));
                                line("P " + item);
                                n.incrementAndGet();
                            }
                        } catch (Exception e) {
                            synchronized (failed) {
                                failed[0] = e;
                            }
                        }
                    });
                    ts[t].start();
                }
                for (Thread t : ts) t.join();
                span[1] = System.nanoTime();
                if (failed[0] != null) throw failed[0];
            } else {
                final long wait = Long.parseLong(args[5]) * 1000;
                final java.io.File stop = new java.io.File(args[6]);
                int threads = args.length > 8 ? Integer.parseInt(args[8]) : 1;
                final long work = args.length > 9 ? Long.parseLong(args[9]) : 0;
                final Q fq = q;
                final Exception[] failed = { null };
                Thread[] ts = new Thread[threads];
                for (int t = 0; t < threads; t++) {
                    ts[t] = new Thread(() -> {
                        try {
                            while (true) {
                                boolean last = stop.exists();
                                byte[] d = fq.poll(wait);
                                if (d == null) {
                                    if (last) break;
                                    continue;
                                }
                                line("T " + new String(d, StandardCharsets.UTF_8));
                                if (work > 0) Thread.sleep(work);
                                long t1 = System.nanoTime();
                                synchronized (span) {
                                    if (span[0] == 0) span[0] = t1;
                                    span[1] = t1;
                                }
                                n.incrementAndGet();
                            }
                        } catch (Exception e) {
                            synchronized (failed) {
                                failed[0] = e;
                            }
                        }
                    });
                    ts[t].start();
                }
                for (Thread t : ts) t.join();
                if (failed[0] != null) throw failed[0];
            }
        } catch (Exception e) {
            line("X " + e.toString().replace('\n', ' '));
            System.exit(1);
        }
        line("D " + n.get() + " " + (span[1] - span[0]) / 1000000);
        System.exit(0);
    }
}
