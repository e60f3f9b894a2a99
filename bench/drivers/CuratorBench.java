// CuratorBench.java - the Apache Curator 5.4 contender (Debian's libcurator-recipes-java).
//
//   java -cp <build dir>:<jars> CuratorBench HOSTS WORKLOAD key=value ...
//
// Same workloads and output as bench/drivers/zklock_bench.lua, with threads instead of
// coroutines: one CuratorFramework per process, one recipe object per thread (the usual way
// to use InterProcessMutex, which is reentrant per thread). bench/run compiles this at bench time
// into bench/out/java; no .class file is kept in the repository.
import java.io.*;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.*;
import org.apache.curator.retry.RetryNTimes;

public class CuratorBench {
    static int port;
    static Map<String, String> opt = new HashMap<>();
    static TreeMap<String, Object> out = new TreeMap<>();

    static double now() { return System.nanoTime() / 1e9; }

    // Client CPU (user + system, seconds) of the whole JVM process: every thread, the JIT
    // compilers and the garbage collector included, not only the threads that run the recipes.
    static final com.sun.management.OperatingSystemMXBean OS =
        (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
    static double cpu() { return OS.getProcessCpuTime() / 1e9; }

    static long n4; // four-letter words sent (each adds `cost` to zk_packets_received)
    static long cost;

    static String four(String cmd) throws IOException {
        n4++;
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(5000);
            s.getOutputStream().write(cmd.getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().flush();
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    static final String[] WATCH_KEYS = {"zk_sum_node_deleted_watch_count", "zk_sum_node_children_watch_count",
            "zk_sum_node_changed_watch_count", "zk_sum_node_created_watch_count"};

    /** {packets received, watch notifications, four-letter words so far} from mntr */
    static long[] snap() throws IOException {
        Map<String, Long> m = new HashMap<>();
        for (String line : four("mntr").split("\n")) {
            String[] kv = line.split("\t");
            if (kv.length == 2) {
                try { m.put(kv[0], Long.parseLong(kv[1].trim())); } catch (NumberFormatException e) { }
            }
        }
        long w = 0;
        for (String k : WATCH_KEYS) w += m.getOrDefault(k, 0L);
        return new long[] {m.getOrDefault("zk_packets_received", -1L), w, n4};
    }

    static long mntrCost() throws IOException {
        long[] a = snap(), b = snap();
        return b[0] - a[0];
    }

    /** requests sent to the server between two snaps, less what the four-letter words added */
    static long requests(long[] a, long[] b) { return b[0] - a[0] - cost * (b[2] - a[2]); }

    static long totalWatches() throws IOException {
        java.util.regex.Matcher mt = java.util.regex.Pattern.compile("Total watches:\\s*(\\d+)").matcher(four("wchs"));
        return mt.find() ? Long.parseLong(mt.group(1)) : -1;
    }

    static long rssKb(String field) throws IOException {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith(field + ":")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
        }
        return -1;
    }

    static double pct(double[] sorted, double q) {
        if (sorted.length == 0) return 0;
        return sorted[(int) Math.floor(q * (sorted.length - 1) + 0.5)];
    }

    static int iopt(String k, int d) { return opt.containsKey(k) ? Integer.parseInt(opt.get(k)) : d; }
    static double dopt(String k, double d) { return opt.containsKey(k) ? Double.parseDouble(opt.get(k)) : d; }

    interface Contender {
        Object acquire() throws Exception;
        void release(Object h) throws Exception;
    }

    public static void main(String[] args) throws Exception {
        String hosts = args[0], workload = args[1];
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            if (eq > 0) opt.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        port = Integer.parseInt(hosts.substring(hosts.lastIndexOf(':') + 1));
        out.put("rss_start_kb", rssKb("VmRSS"));
        CuratorFramework client = CuratorFrameworkFactory.newClient(hosts, 10000, 10000, new RetryNTimes(3, 100));
        client.start();
        if (!client.blockUntilConnected(10, TimeUnit.SECONDS)) throw new RuntimeException("could not connect");
        long rssIdle = rssKb("VmRSS");
        out.put("rss_idle_kb", rssIdle);
        String base = "/bench/curator-" + ProcessHandle.current().pid();
        cost = mntrCost();
        double secs = dopt("secs", 3);

        switch (workload) {
        case "uncontended": {
            int n = iopt("n", 2000), warm = iopt("warm", 200);
            InterProcessMutex m = new InterProcessMutex(client, base + "/uncontended");
            for (int i = 0; i < warm; i++) { m.acquire(); m.release(); }
            double[] lat = new double[n];
            long[] s0 = snap();
            double t0 = now(), cpu0 = cpu();
            for (int i = 0; i < n; i++) {
                double a = now();
                if (!m.acquire(10, TimeUnit.SECONDS)) throw new RuntimeException("timeout");
                m.release();
                lat[i] = now() - a;
            }
            double el = now() - t0;
            out.put("cpu_us_per", (cpu() - cpu0) / n * 1e6);
            long[] s1 = snap();
            Arrays.sort(lat);
            out.put("ops", n); out.put("secs", el); out.put("rate", n / el);
            out.put("p50_us", pct(lat, 0.5) * 1e6); out.put("p99_us", pct(lat, 0.99) * 1e6);
            out.put("req_per", (double) requests(s0, s1) / n);
            out.put("notif_per", (double) (s1[1] - s0[1]) / n);
            break;
        }
        case "contended": case "read": case "semaphore": {
            int t = iopt("t", 64);
            String path = base + "/" + workload;
            int max = iopt("max", 4);
            Callable<Contender> make = () -> {
                if (workload.equals("contended")) {
                    InterProcessMutex m = new InterProcessMutex(client, path);
                    return new Contender() {
                        public Object acquire() throws Exception { if (!m.acquire(120, TimeUnit.SECONDS)) throw new RuntimeException("timeout"); return m; }
                        public void release(Object h) throws Exception { m.release(); }
                    };
                } else if (workload.equals("read")) {
                    InterProcessMutex m = new InterProcessReadWriteLock(client, path).readLock();
                    return new Contender() {
                        public Object acquire() throws Exception { if (!m.acquire(120, TimeUnit.SECONDS)) throw new RuntimeException("timeout"); return m; }
                        public void release(Object h) throws Exception { m.release(); }
                    };
                } else {
                    InterProcessSemaphoreV2 s = new InterProcessSemaphoreV2(client, path, max);
                    return new Contender() {
                        public Object acquire() throws Exception { Lease l = s.acquire(120, TimeUnit.SECONDS); if (l == null) throw new RuntimeException("timeout"); return l; }
                        public void release(Object h) throws Exception { s.returnLease((Lease) h); }
                    };
                }
            };
            { Contender w = make.call(); w.release(w.acquire()); } // parents, outside the measured part
            Contender[] cs = new Contender[t];
            for (int i = 0; i < t; i++) cs[i] = make.call();
            ConcurrentLinkedQueue<double[]> allWaits = new ConcurrentLinkedQueue<>();
            AtomicLong count = new AtomicLong();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            long[] s0 = snap();
            double t0 = now(), cpu0 = cpu(), deadline = t0 + secs;
            Thread[] th = new Thread[t];
            for (int i = 0; i < t; i++) {
                Contender c = cs[i];
                th[i] = new Thread(() -> {
                    double[] w = new double[1024];
                    int k = 0;
                    try {
                        while (now() < deadline) {
                            double a = now();
                            Object h = c.acquire();
                            if (k == w.length) w = Arrays.copyOf(w, k * 2);
                            w[k++] = now() - a;
                            count.incrementAndGet();
                            c.release(h);
                        }
                    } catch (Throwable e) { failure.compareAndSet(null, e); }
                    allWaits.add(Arrays.copyOf(w, k));
                });
                th[i].start();
            }
            for (Thread x : th) x.join(300_000);
            if (failure.get() != null) throw new RuntimeException(failure.get());
            double el = now() - t0, cpuEl = cpu() - cpu0;
            long[] s1 = snap();
            double[] waits = allWaits.stream().flatMapToDouble(Arrays::stream).sorted().toArray();
            long n = count.get();
            out.put("t", t); out.put("ops", n); out.put("secs", el); out.put("rate", n / el);
            out.put("p50_wait_us", pct(waits, 0.5) * 1e6); out.put("p99_wait_us", pct(waits, 0.99) * 1e6);
            out.put("cpu_us_per", cpuEl / n * 1e6);
            out.put("req_per", (double) requests(s0, s1) / n);
            out.put("notif_per", (double) (s1[1] - s0[1]) / n);
            out.put("rss_kb", rssKb("VmRSS"));
            break;
        }
        case "independent": {
            int t = iopt("t", 1000);
            CyclicBarrier warmed = new CyclicBarrier(t + 1);
            CountDownLatch go = new CountDownLatch(1);
            AtomicLong count = new AtomicLong();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            double[] deadline = new double[1];
            Thread[] th = new Thread[t];
            for (int i = 0; i < t; i++) {
                InterProcessMutex m = new InterProcessMutex(client, base + "/independent/" + (i + 1));
                th[i] = new Thread(() -> {
                    try {
                        m.acquire(); m.release(); // parents, outside the measured part
                        warmed.await();
                        go.await();
                        while (now() < deadline[0]) {
                            if (!m.acquire(120, TimeUnit.SECONDS)) throw new RuntimeException("timeout");
                            count.incrementAndGet();
                            m.release();
                        }
                    } catch (Throwable e) { failure.compareAndSet(null, e); }
                });
                th[i].start();
            }
            warmed.await(300, TimeUnit.SECONDS);
            long[] s0 = snap();
            double t0 = now(), cpu0 = cpu();
            deadline[0] = t0 + secs;
            go.countDown();
            for (Thread x : th) x.join(300_000);
            if (failure.get() != null) throw new RuntimeException(failure.get());
            double el = now() - t0, cpuEl = cpu() - cpu0;
            long[] s1 = snap();
            long n = count.get();
            out.put("t", t); out.put("ops", n); out.put("secs", el); out.put("rate", n / el);
            out.put("cpu_us_per", cpuEl / n * 1e6);
            out.put("req_per", (double) requests(s0, s1) / n);
            out.put("rss_kb", rssKb("VmRSS")); out.put("rss_peak_kb", rssKb("VmHWM"));
            break;
        }
        case "herd": {
            int t = iopt("t", 100);
            String path = base + "/herd";
            InterProcessMutex m = new InterProcessMutex(client, path);
            m.acquire(); m.release();
            m.acquire(); // the holder is this thread
            AtomicInteger done = new AtomicInteger();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            long[] s0 = snap();
            double t0 = now();
            Thread[] th = new Thread[t];
            for (int i = 0; i < t; i++) {
                InterProcessMutex w = new InterProcessMutex(client, path);
                th[i] = new Thread(() -> {
                    try {
                        if (!w.acquire(600, TimeUnit.SECONDS)) throw new RuntimeException("timeout");
                        w.release();
                        done.incrementAndGet();
                    } catch (Throwable e) { failure.compareAndSet(null, e); }
                });
                th[i].start();
            }
            int polls = 0;
            double limit = now() + 600;
            while (true) {
                polls++;
                if (client.getChildren().forPath(path).size() >= t + 1) break;
                if (now() > limit) throw new RuntimeException("waiters did not queue within 600 s");
                Thread.sleep(t >= 5000 ? 200 : 10);
            }
            long watchesQ;
            while (true) { // ... and every waiter's watch set
                watchesQ = totalWatches();
                if (watchesQ >= t || now() > limit) break;
                Thread.sleep(10);
            }
            out.put("enqueue_secs", now() - t0);
            long rssQ = rssKb("VmRSS");
            long[] s1 = snap();
            double tr = now(), cpu0 = cpu();
            m.release();
            for (Thread x : th) x.join(600_000);
            if (failure.get() != null) throw new RuntimeException(failure.get());
            double el = now() - tr;
            out.put("cpu_us_per", (cpu() - cpu0) / t * 1e6); // the drain: CPU per acquisition
            long[] s2 = snap();
            out.put("t", t); out.put("acquired", done.get());
            out.put("handoff_secs", el); out.put("handoff_rate", t / el);
            out.put("req_per", (double) (requests(s0, s2) - polls) / t);
            out.put("notif_per", (double) (s2[1] - s1[1]) / t);
            out.put("watches_queued", watchesQ);
            out.put("rss_queued_kb", rssQ); out.put("rss_above_idle_kb", rssQ - rssIdle);
            out.put("rss_peak_kb", rssKb("VmHWM"));
            break;
        }
        default:
            throw new IllegalArgumentException("unknown workload " + workload);
        }
        client.close();
        StringBuilder sb = new StringBuilder("RESULT");
        for (Map.Entry<String, Object> e : out.entrySet()) {
            Object v = e.getValue();
            sb.append(' ').append(e.getKey()).append('=');
            sb.append(v instanceof Double ? String.format(Locale.ROOT, "%.3f", (Double) v) : v.toString());
        }
        System.out.println(sb);
        System.out.flush();
        System.exit(0);
    }
}
