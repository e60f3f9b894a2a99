// spec/support/peers/DQueuePeer.java: producers and consumers of Curator 5.4's DistributedQueue
// for the distributed-queue specs (53-distributed-queue, 77-distributed-queue-interop), on a
// queue path shared with zklock's client:queue(path, { format = "curator", lock_path = ... }).
// Compiled and started by spec/support/queue_peers.lua (qp.dqueue).
//
//   java -cp ... DQueuePeer <mode: produce|consume> <hosts> <path> <log> <count (produce) |
//        idle seconds (consume)> <prefix (produce) | stop file (consume)> <max seconds>
//        <lock path ("-": none, plain mode)> <multi (produce: every multi-th message holds 3
//        items, 0: never) | work ms (consume: a sleep inside consumeMessage)>
//
// Log lines (each written straight to the file, so a kill -9 loses nothing already logged):
//   R            ready: the queue was started
//   P <item>     produce: the message holding the item was put (one line per item)
//   S <item>     consume: consumeMessage began with the item
//   C <item>     consume: consumeMessage finished the item (before Curator removes the node)
//   D <n> <ms>   done: n items put or consumed, ms from the first to the last; the peer exits 0
//   X <text>     an error; the peer exits 1
// A consumer ends once the stop file exists and no item came for `idle seconds`.
import java.io.FileOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.queue.DistributedQueue;
import org.apache.curator.framework.recipes.queue.MultiItem;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;

public class DQueuePeer {
    static FileOutputStream log;

    static synchronized void line(String s) {
        try {
            log.write((s + "\n").getBytes(StandardCharsets.UTF_8));
        } catch (Exception e) {
            System.exit(3);
        }
    }

    static final QueueSerializer<String> UTF8 = new QueueSerializer<String>() {
        public byte[] serialize(String s) {
            return s.getBytes(StandardCharsets.UTF_8);
        }

        public String deserialize(byte[] b) {
            return new String(b, StandardCharsets.UTF_8);
        }
    };

    public static void main(String[] args) throws Exception {
        String mode = args[0], hosts = args[1], path = args[2];
        log = new FileOutputStream(args[3], true);
        final long maxSeconds = Long.parseLong(args[6]);
        String lockPath = args[7].equals("-") ? null : args[7];
        final long extra = Long.parseLong(args[8]);
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
        CuratorFramework c = CuratorFrameworkFactory.newClient(hosts, 4000, 10000, new RetryNTimes(3, 200));
        c.start();
        if (!c.blockUntilConnected(30, TimeUnit.SECONDS)) throw new RuntimeException("no connection");
        final AtomicInteger n = new AtomicInteger();
        final AtomicLong last = new AtomicLong(System.nanoTime());
        final AtomicLong first = new AtomicLong(0), lastItem = new AtomicLong(0); // for D's ms
        try {
            if (mode.equals("produce")) {
                int count = Integer.parseInt(args[4]);
                String prefix = args[5];
                QueueBuilder<String> b = QueueBuilder.builder(c, null, UTF8, path).putInBackground(false);
                if (lockPath != null) b = b.lockPath(lockPath);
                DistributedQueue<String> q = b.buildQueue();
                q.start();
                line("R");
                first.set(System.nanoTime());
                int i = 1, msg = 0;
                while (i <= count) {
                    msg++;
                    int k = (extra > 0 && msg % extra == 0) ? Math.min(3, count - i + 1) : 1;
                    final String[] items = new String[k];
                    for (int j = 0; j < k; j++) items[j] = prefix + "-" + (i + j);
                    if (k == 1) {
                        q.put(items[0]);
                    } else {
                        final int[] at = { 0 };
                        q.putMulti(new MultiItem<String>() {
                            public String nextItem() {
                                return at[0] < items.length ? items[at[0]++] : null;
                            }
                        });
                    }
                    for (String it : items) line("P " + it);
                    n.addAndGet(k);
                    i += k;
                }
                lastItem.set(System.nanoTime());
                q.close();
            } else {
                final long idle = Long.parseLong(args[4]) * 1000000000L;
                final java.io.File stop = new java.io.File(args[5]);
                QueueConsumer<String> consumer = new QueueConsumer<String>() {
                    public void consumeMessage(String item) throws Exception {
                        first.compareAndSet(0, System.nanoTime());
                        line("S " + item);
                        if (extra > 0) Thread.sleep(extra);
                        line("C " + item);
                        n.incrementAndGet();
                        last.set(System.nanoTime());
                        lastItem.set(System.nanoTime());
                    }

                    public void stateChanged(CuratorFramework client, ConnectionState s) {
                    }
                };
                QueueBuilder<String> b = QueueBuilder.builder(c, consumer, UTF8, path);
                if (lockPath != null) b = b.lockPath(lockPath);
                DistributedQueue<String> q = b.buildQueue();
                q.start();
                line("R");
                while (!(stop.exists() && System.nanoTime() - last.get() > idle)) {
                    if (!stop.exists()) last.set(Math.max(last.get(), System.nanoTime() - idle / 2));
                    Thread.sleep(50);
                }
                q.close();
            }
        } catch (Exception e) {
            line("X " + e.toString().replace('\n', ' '));
            System.exit(1);
        }
        long ms = first.get() > 0 && lastItem.get() > first.get() ? (lastItem.get() - first.get()) / 1000000 : 0;
        line("D " + n.get() + " " + ms);
        System.exit(0);
    }
}
