// HandoffCurator.java - a Curator 5.4 worker of bench/drivers/handoff_drain.lua.
//
//   java -cp <bench/out/java-handoff>:<Curator's jars> HandoffCurator HOSTS PATH N BATCH STATEFILE
//
// The same protocol as the zklock worker in handoff_drain.lua: one CuratorFramework, N threads
// each waiting on its own InterProcessMutex of PATH, queued in batches of BATCH (a batch counts as
// queued when PATH has gained at least that many children: Curator does not tell which node is a
// waiter's before it holds, so the coordinator checks the total); then STATEFILE.ready. When the
// coordinator's holder releases, every thread takes the mutex once and releases it; the worker
// writes STATEFILE.done: "<monotonic ms of its last acquisition> <bytes received> <acquisitions>
// -1 -1" (bytes: tcp_info bytes_received of this process's connections to the server, through
// ss(8), before and after the drain; -1 -1: no request counters).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;

public class HandoffCurator {
    static final Pattern BYTES = Pattern.compile("bytes_received:(\\d+)");

    // the same clock as the coordinator's (CLOCK_MONOTONIC, ms)
    static double monoMs() { return System.nanoTime() / 1e6; }

    static long received(int port) {
        try {
            Process p = new ProcessBuilder("ss", "-tinpH", "state", "established", "( dport = :" + port + " )")
                .redirectErrorStream(true).start();
            String tag = "pid=" + ProcessHandle.current().pid() + ",";
            long total = 0;
            boolean mine = false;
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream()))) {
                for (String line; (line = r.readLine()) != null; ) {
                    if (!line.isEmpty() && !Character.isWhitespace(line.charAt(0))) {
                        mine = line.contains(tag);
                    } else if (mine) {
                        Matcher m = BYTES.matcher(line);
                        if (m.find()) total += Long.parseLong(m.group(1));
                    }
                }
            }
            p.waitFor();
            return total;
        } catch (Exception e) {
            return -1;
        }
    }

    public static void main(String[] args) throws Exception {
        String hosts = args[0], path = args[1], state = args[4];
        int n = Integer.parseInt(args[2]), batch = Integer.parseInt(args[3]);
        int port = Integer.parseInt(hosts.substring(hosts.lastIndexOf(':') + 1));
        CuratorFramework client = CuratorFrameworkFactory.newClient(hosts, 30000, 10000, new RetryNTimes(3, 100));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) throw new RuntimeException("could not connect");
        AtomicInteger done = new AtomicInteger();
        AtomicLong lastMicros = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<Thread> threads = new ArrayList<>();
        double limit = monoMs() + 600_000; // bounded: 10 minutes to queue
        int queued = 0;
        while (queued < n) {
            int b = Math.min(batch, n - queued);
            int before = client.getChildren().forPath(path).size();
            for (int i = 0; i < b; i++) {
                InterProcessMutex w = new InterProcessMutex(client, path);
                Thread t = new Thread(null, () -> {
                    try {
                        if (!w.acquire(1200, TimeUnit.SECONDS)) throw new RuntimeException("timed out");
                        done.incrementAndGet();
                        lastMicros.accumulateAndGet((long) (monoMs() * 1000), Math::max);
                        w.release();
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                    }
                }, "waiter", 256 * 1024); // small stacks: a thread per waiter
                t.setDaemon(true);
                t.start();
                threads.add(t);
            }
            queued += b;
            while (client.getChildren().forPath(path).size() < before + b) {
                if (monoMs() > limit || failure.get() != null) {
                    System.err.println("waiters did not queue: " + failure.get());
                    System.exit(2);
                }
                Thread.sleep(1);
            }
        }
        Thread.sleep(300); // the last watches set
        long r0 = received(port);
        Files.writeString(Path.of(state + ".ready"), "ready\n");
        double end = monoMs() + 1_200_000;
        for (Thread t : threads) t.join(Math.max(1, (long) (end - monoMs())));
        long r1 = received(port);
        if (failure.get() != null) System.err.println("a waiter failed: " + failure.get());
        long bytes = r0 < 0 || r1 < 0 ? -1 : r1 - r0;
        Files.writeString(Path.of(state + ".tmp"),
            String.format("%.3f %d %d -1 -1%n", lastMicros.get() / 1000.0, bytes, done.get()));
        Files.move(Path.of(state + ".tmp"), Path.of(state + ".done"), StandardCopyOption.ATOMIC_MOVE);
        client.close();
        System.exit(0);
    }
}
