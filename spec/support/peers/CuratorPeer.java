// CuratorPeer.java - an Apache Curator 5.4 contender (Debian's libcurator-recipes-java) for the
// interop specs (spec/70-curator_spec.lua, spec/71-kazoo_spec.lua).
//
//   java -cp <classes>:<jars> CuratorPeer HOSTS DIR PARENT_PID MAX_SECONDS [SESSION_MS]
//   java -cp <classes>:<jars> CuratorPeer --participants HOSTS RECIPE PATH [MAX]
//        one-shot: print getParticipantNodes of RECIPE (mutex|read|write|semaphore) at PATH
//
// spec/support/peers/peer.lua compiles this file with javac (into a temporary directory cached by
// the hash of this source and the class path) and starts one JVM per spec file. The JVM is driven
// through files, as the kazoo and zklock peers are (same protocol, see peer.lua):
//   DIR/control  commands appended by the spec: "<seq> <command> key=value ..."
//   DIR/reply    replies appended by this peer: "<seq> ok|timeout|err key=value ...";
//                "0 ready ..." once the client is connected
// Every command runs on its own thread, so a blocking acquire does not hold up the next command.
//   ping                                   -> ok now=<ms> version=<curator version>
//   participants recipe= path= [max=]      -> ok n=<count> list=<a,b,...>  (getParticipantNodes)
//   hold id= recipe= path= [max=] [timeout_ms=]
//        acquire on a thread of its own and keep holding until "release id=";
//        -> ok node=<full path> czxid=<n> start=<ms>  |  timeout waited=<ms>  |  err ...
//   release id=                            -> ok start=<ms> end=<ms>  (after the node is deleted)
//   downgrade id=                          a write hold: acquire the read lock (same thread), then
//                                          release the write lock -> ok node=<read node> czxid= at=<ms>
//   loop recipe= path= threads= seconds= log= [start_at=] [hold_ms=] [hold_min_ms=] [gap_ms=]
//        [write_pct=] [max=] [timeout_ms=] [seed=] [key=]
//        threads acquire/hold/release in a loop; every hold interval goes to `log`;
//        -> ok holds=<n> timeouts=<n> errors=<n> [error=<first error>]   when all threads ended
//   leader path= id= log= [hold_ms=] [seconds=] [key=]
//        a LeaderSelector (autoRequeue, setId(id)) leading for hold_ms (interruptible: Curator
//        interrupts on SUSPENDED and LOST) each term, for `seconds` or until leader_stop;
//        -> ok terms=<n> when it has stopped
//   latch path= id= log= [hold_ms=] [seconds=] [key=]
//        a loop of LeaderLatch(path, id): start, await, lead hold_ms or until leadership is lost
//        (notLeader), close; again, for `seconds` or until leader_stop; -> ok terms=<n>
//   leader_stop id=                        end a leader/latch loop early -> ok
//   leader_participants kind=selector|latch path=
//        -> ok list=<id:1|0,...> leader=<id>  (getParticipants / getLeader of that recipe)
//        Leader and latch logs: B key owner id czxid start node  when a term begins (flushed),
//        then the H line (format below, mode leader|latch) when it ends.
//   quit                                   -> ok, then exit
// Revocation (spec/74-curator-revoke_spec.lua):
//   hold ... revocable=1                   mutex/read/write: makeRevocable before acquiring; each
//                                          call of its listener counts (and with release_on_revoke=1
//                                          the holder releases, as a cooperative holder would)
//   revoked id=                            -> ok n=<listener calls so far for hold id>
//   revoke path=                           Revoker.attemptRevoke(client, path) -> ok
// Recipes: mutex (InterProcessMutex), read / write (InterProcessReadWriteLock's two sides),
// rwmix (loop only: each iteration read or write, write_pct % writes), semaphore
// (InterProcessSemaphoreV2 with max= leases).
//
// Clock: every time is System.nanoTime() / 1e6, i.e. CLOCK_MONOTONIC in milliseconds on Linux
// (HotSpot reads clock_gettime(CLOCK_MONOTONIC)), the same clock as zklock's core.now() and
// Python's time.monotonic(); printed with 3 decimals (microseconds).
//
// Log lines (tab-separated; the first 11 fields are spec/support/fault_worker.lua's H/S format):
//   H|S key owner thread czxid start end session-events lock-events held release node mode
//   F mode code waited_ms          an acquire that timed out (code ETIMEDOUT) or failed
//   X message                      an unexpected error
// H = a lock hold, S = a semaphore lease; czxid is the fencing token (the node's creation zxid,
// read with checkExists while holding); session-events lists the connection state changes
// (SUSPENDED, LOST, RECONNECTED) seen during the hold, "-" if none; mode is mutex, read, write
// or lease; node is the node's name (last path element).
//
// The peer exits when the spec process (PARENT_PID) is gone or after MAX_SECONDS in any case.
import java.io.*;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.*;
import org.apache.curator.framework.recipes.locks.*;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.data.Stat;

public class CuratorPeer extends PeerControl {
    static CuratorFramework client;
    static final List<String> events = Collections.synchronizedList(new ArrayList<>());
    static final ConcurrentHashMap<String, Holder> holders = new ConcurrentHashMap<>();
    static long maxSeconds;
    static Method getLockPath;

    // ------------------------------------------------------------ recipes

    interface Held {
        String node();
        void release() throws Exception;
    }

    // One contender: a recipe object, reused for every acquire of its thread.
    static class Contender {
        final String recipe, path;
        final int max;
        InterProcessMutex mutex;
        InterProcessReadWriteLock rw;
        InterProcessSemaphoreV2 sem;

        Contender(String recipe, String path, int max) {
            this.recipe = recipe;
            this.path = path;
            this.max = max;
            switch (recipe) {
            case "mutex": mutex = new InterProcessMutex(client, path); break;
            case "read": case "write": case "rwmix": rw = new InterProcessReadWriteLock(client, path); break;
            case "semaphore": sem = new InterProcessSemaphoreV2(client, path, max); break;
            default: throw new IllegalArgumentException("unknown recipe " + recipe);
            }
        }

        // mode: mutex | read | write | lease. timeoutMs < 0: wait forever. null = timed out.
        Held acquire(String mode, long timeoutMs) throws Exception {
            if (mode.equals("lease")) {
                Lease l = timeoutMs < 0 ? sem.acquire() : sem.acquire(timeoutMs, TimeUnit.MILLISECONDS);
                if (l == null) return null;
                // getNodeName() is the lease's name under <path>/leases
                String name = l.getNodeName();
                String full = name.startsWith("/") ? name : path + "/leases/" + name;
                return new Held() {
                    public String node() { return full; }
                    public void release() throws Exception { l.close(); }
                };
            }
            InterProcessMutex m = mode.equals("mutex") ? mutex : mode.equals("read") ? rw.readLock() : rw.writeLock();
            if (timeoutMs < 0) m.acquire();
            else if (!m.acquire(timeoutMs, TimeUnit.MILLISECONDS)) return null;
            String node = (String) getLockPath.invoke(m); // the calling thread's lock node
            return new Held() {
                public String node() { return node; }
                public void release() throws Exception { m.release(); }
            };
        }
    }

    static String modeOf(String recipe) {
        switch (recipe) {
        case "semaphore": return "lease";
        default: return recipe;
        }
    }

    // Curator's version, from the Maven properties inside the recipes jar (Debian's manifest has none).
    static String version() {
        try (InputStream in = InterProcessMutex.class.getResourceAsStream(
                "/META-INF/maven/org.apache.curator/curator-recipes/pom.properties")) {
            if (in == null) return "unknown";
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version", "unknown");
        } catch (IOException e) {
            return "unknown";
        }
    }

    static long czxid(String node) {
        try {
            Stat st = client.checkExists().forPath(node);
            return st == null ? -1 : st.getCzxid();
        } catch (Exception e) {
            return -1;
        }
    }

    static String basename(String p) {
        int i = p.lastIndexOf('/');
        return i >= 0 ? p.substring(i + 1) : p;
    }

    // ------------------------------------------------------------ commands

    static class Holder {
        final LinkedBlockingQueue<String[]> actions = new LinkedBlockingQueue<>();
    }

    static int iarg(Map<String, String> a, String k, int d) {
        String v = a.get(k);
        return v == null || v.isEmpty() ? d : Integer.parseInt(v);
    }

    static double darg(Map<String, String> a, String k, double d) {
        String v = a.get(k);
        return v == null || v.isEmpty() ? d : Double.parseDouble(v);
    }

    // ------------------------------------------------------------ revocation (its own block)

    static final ConcurrentHashMap<String, AtomicInteger> revokeCalls = new ConcurrentHashMap<>();

    // makeRevocable on the contender's lock (Curator has no revocation for semaphore leases,
    // CURATOR-650): the listener counts its calls under the hold's id, and with release it asks
    // the holding thread to release (Curator locks are thread-bound).
    static void revocable(Contender c, String id, boolean release) {
        if (c.sem != null) throw new IllegalArgumentException("Curator semaphores are not revocable");
        AtomicInteger n = revokeCalls.computeIfAbsent(id, k -> new AtomicInteger());
        RevocationListener<InterProcessMutex> l = m -> {
            n.incrementAndGet();
            Holder h = holders.get(id);
            if (release && h != null) h.actions.add(new String[] { "release", "-1" });
        };
        if (c.mutex != null) c.mutex.makeRevocable(l);
        if (c.rw != null) {
            c.rw.readLock().makeRevocable(l);
            c.rw.writeLock().makeRevocable(l);
        }
    }

    static void revocation(long seq, String cmd, Map<String, String> a) throws Exception {
        if (cmd.equals("revoked")) {
            AtomicInteger n = revokeCalls.get(a.get("id"));
            reply(seq, "ok n=" + (n == null ? 0 : n.get()));
        } else {
            Revoker.attemptRevoke(client, a.get("path"));
            reply(seq, "ok");
        }
    }

    static void handle(long seq, String cmd, Map<String, String> a) {
        try {
            switch (cmd) {
            case "ping": {
                reply(seq, "ok now=" + fmt(now()) + " version=" + version() + " pid=" + PID);
                break;
            }
            case "participants": {
                Collection<String> list = participants(a.get("recipe"), a.get("path"), iarg(a, "max", 1));
                reply(seq, "ok n=" + list.size() + " list=" + String.join(",", list));
                break;
            }
            case "hold": {
                String id = a.get("id"), recipe = a.get("recipe");
                Contender c = new Contender(recipe, a.get("path"), iarg(a, "max", 1));
                if ("1".equals(a.get("revocable"))) revocable(c, id, "1".equals(a.get("release_on_revoke")));
                double t0 = now();
                Held h = c.acquire(modeOf(recipe), (long) darg(a, "timeout_ms", -1));
                if (h == null) {
                    reply(seq, "timeout waited=" + fmt(now() - t0));
                    break;
                }
                double start = now();
                String node = h.node();
                Holder holder = new Holder();
                holders.put(id, holder);
                reply(seq, "ok node=" + node + " czxid=" + czxid(node) + " start=" + fmt(start));
                // the holding thread serves "downgrade" and "release" (Curator locks are thread-bound)
                while (true) {
                    String[] act = holder.actions.poll(maxSeconds, TimeUnit.SECONDS);
                    if (act == null) return;
                    long aseq = Long.parseLong(act[1]);
                    if (act[0].equals("downgrade")) {
                        // Curator's documented downgrade: acquire the read lock while holding the
                        // write lock (granted at once), then release the write lock
                        if (!recipe.equals("write")) { reply(aseq, "err not_a_write_hold"); continue; }
                        Held r = c.acquire("read", -1);
                        double at = now();
                        h.release();
                        h = r;
                        reply(aseq, "ok node=" + r.node() + " czxid=" + czxid(r.node()) + " at=" + fmt(at));
                        continue;
                    }
                    holders.remove(id);
                    double end = now();
                    h.release();
                    reply(aseq, "ok start=" + fmt(start) + " end=" + fmt(end));
                    return;
                }
            }
            case "release":
            case "downgrade": {
                Holder h = holders.get(a.get("id"));
                if (h == null) {
                    reply(seq, "err no_such_hold");
                    break;
                }
                h.actions.add(new String[] { cmd, Long.toString(seq) });
                break;
            }
            case "revoked":
            case "revoke":
                revocation(seq, cmd, a);
                break;
            case "loop":
                loop(seq, a);
                break;
            // leader election commands: see LeaderPeer at the end of this file
            case "leader":
            case "latch":
            case "leader_stop":
            case "leader_participants":
                LeaderPeer.handle(seq, cmd, a);
                break;
            case "quit":
                client.close(); // ends the session: its ephemeral nodes go at once
                reply(seq, "ok");
                System.exit(0);
                break;
            default:
                reply(seq, "err unknown_command_" + cmd);
            }
        } catch (Throwable e) {
            reply(seq, "err " + oneLine(e));
        }
    }

    static void loop(long seq, Map<String, String> a) throws Exception {
        String recipe = a.get("recipe"), path = a.get("path");
        String key = a.getOrDefault("key", path);
        int threads = iarg(a, "threads", 2), max = iarg(a, "max", 1);
        double seconds = darg(a, "seconds", 5), startAt = darg(a, "start_at", now());
        double holdMs = darg(a, "hold_ms", 5), holdMin = darg(a, "hold_min_ms", 0), gapMs = darg(a, "gap_ms", 0);
        int writePct = iarg(a, "write_pct", 30);
        long timeoutMs = (long) darg(a, "timeout_ms", 10000);
        long seed = (long) darg(a, "seed", 1);
        double end = startAt + seconds * 1000;
        AtomicLong holds = new AtomicLong(), timeouts = new AtomicLong(), errors = new AtomicLong();
        AtomicReference<String> firstError = new AtomicReference<>();
        PrintWriter log = new PrintWriter(new BufferedWriter(new OutputStreamWriter(
            new FileOutputStream(a.get("log"), true), StandardCharsets.UTF_8)));
        Thread[] th = new Thread[threads];
        for (int i = 0; i < threads; i++) {
            final int ti = i + 1;
            th[i] = new Thread(() -> {
                Random r = new Random(seed * 1000003L + ti);
                try {
                    Contender c = new Contender(recipe, path, max);
                    double wait = startAt - now();
                    if (wait > 0) Thread.sleep((long) wait);
                    while (now() < end) {
                        String mode = recipe.equals("rwmix") ? (r.nextInt(100) < writePct ? "write" : "read") : modeOf(recipe);
                        double t0 = now();
                        Held h;
                        try {
                            h = c.acquire(mode, timeoutMs);
                        } catch (Exception e) {
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, oneLine(e));
                            synchronized (log) { log.println("F\t" + mode + "\t" + e.getClass().getSimpleName() + "\t" + fmt(now() - t0)); }
                            Thread.sleep(50);
                            continue;
                        }
                        if (h == null) {
                            timeouts.incrementAndGet();
                            synchronized (log) { log.println("F\t" + mode + "\tETIMEDOUT\t" + fmt(now() - t0)); }
                            continue;
                        }
                        double start = now();
                        int ev0 = events.size();
                        String node = h.node();
                        long z = czxid(node);
                        double hold = holdMin + r.nextDouble() * (holdMs - holdMin);
                        if (hold > 0) Thread.sleep((long) hold, (int) ((hold % 1) * 1e6));
                        double finish = now();
                        String sess = "-";
                        synchronized (events) {
                            if (events.size() > ev0) sess = String.join(",", events.subList(ev0, events.size()));
                        }
                        String rel = "ok";
                        try {
                            h.release();
                        } catch (Exception e) {
                            rel = e.getClass().getSimpleName();
                            errors.incrementAndGet();
                            firstError.compareAndSet(null, oneLine(e));
                        }
                        holds.incrementAndGet();
                        String line = String.join("\t", mode.equals("lease") ? "S" : "H", key, "curator-" + PID,
                            "t" + ti, Long.toString(z), fmt(start), fmt(finish), sess, "-", "1", rel,
                            basename(node), mode);
                        synchronized (log) { log.println(line); }
                        if (gapMs > 0) Thread.sleep((long) (r.nextDouble() * gapMs));
                    }
                } catch (Throwable e) {
                    errors.incrementAndGet();
                    firstError.compareAndSet(null, oneLine(e));
                    synchronized (log) { log.println("X\t" + oneLine(e)); }
                }
            });
            th[i].start();
        }
        for (Thread t : th) t.join((long) (seconds * 1000 + timeoutMs + 60000));
        synchronized (log) { log.flush(); log.close(); }
        String err = firstError.get();
        reply(seq, "ok holds=" + holds.get() + " timeouts=" + timeouts.get() + " errors=" + errors.get()
              + (err != null ? " error=" + err : ""));
    }

    // ------------------------------------------------------------ main

    static Collection<String> participants(String recipe, String path, int max) throws Exception {
        switch (recipe) {
        case "mutex": return new InterProcessMutex(client, path).getParticipantNodes();
        case "read": return new InterProcessReadWriteLock(client, path).readLock().getParticipantNodes();
        case "write": return new InterProcessReadWriteLock(client, path).writeLock().getParticipantNodes();
        case "semaphore": return new InterProcessSemaphoreV2(client, path, max).getParticipantNodes();
        default: throw new IllegalArgumentException("unknown recipe " + recipe);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length >= 4 && args[0].equals("--participants")) {
            // one-shot: java ... CuratorPeer --participants HOSTS RECIPE PATH [MAX]
            // prints getParticipantNodes, one per line
            client = CuratorFrameworkFactory.newClient(args[1], new RetryNTimes(3, 100));
            client.start();
            if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) System.exit(3);
            for (String n : participants(args[2], args[3], args.length > 4 ? Integer.parseInt(args[4]) : 1))
                System.out.println(n);
            client.close();
            System.exit(0);
        }
        String hosts = args[0];
        File dir = new File(args[1]);
        long parent = Long.parseLong(args[2]);
        maxSeconds = Long.parseLong(args[3]);
        int sessionMs = args.length > 4 ? Integer.parseInt(args[4]) : 10000;
        replyTo(dir);
        getLockPath = InterProcessMutex.class.getDeclaredMethod("getLockPath");
        getLockPath.setAccessible(true);

        client = CuratorFrameworkFactory.builder().connectString(hosts).sessionTimeoutMs(sessionMs)
            .connectionTimeoutMs(10000).retryPolicy(new RetryNTimes(10, 100)).build();
        client.getConnectionStateListenable().addListener((c, st) -> events.add(st.name()));
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            reply(0, "err not_connected");
            System.exit(3);
        }
        events.clear();
        reply(0, "ready now=" + fmt(now()) + " pid=" + PID);

        serve(dir, parent, maxSeconds, CuratorPeer::handle);
        client.close();
        System.exit(0);
    }

    // ------------------------------------------------------------ leader election (LeaderPeer)

    static class LeaderPeer {
        static final ConcurrentHashMap<String, AtomicBoolean> stops = new ConcurrentHashMap<>();

        static PrintWriter open(String path) throws IOException {
            return new PrintWriter(new BufferedWriter(new OutputStreamWriter(
                new FileOutputStream(path, true), StandardCharsets.UTF_8)));
        }

        static void line(PrintWriter log, String text) {
            synchronized (log) { log.println(text); log.flush(); }
        }

        static String sessSince(int ev0) {
            synchronized (events) {
                return events.size() > ev0 ? String.join(",", events.subList(ev0, events.size())) : "-";
            }
        }

        static void handle(long seq, String cmd, Map<String, String> a) throws Exception {
            switch (cmd) {
            case "leader_stop": {
                AtomicBoolean st = stops.get(a.get("id"));
                if (st == null) { reply(seq, "err no_such_leader"); return; }
                st.set(true);
                reply(seq, "ok");
                return;
            }
            case "leader_participants": {
                Collection<Participant> ps;
                Participant lead;
                if ("latch".equals(a.get("kind"))) {
                    LeaderLatch l = new LeaderLatch(client, a.get("path"), "observer");
                    ps = l.getParticipants();
                    lead = l.getLeader();
                } else {
                    LeaderSelector sel = new LeaderSelector(client, a.get("path"), new LeaderSelectorListenerAdapter() {
                        public void takeLeadership(CuratorFramework cf) {}
                    });
                    ps = sel.getParticipants();
                    lead = sel.getLeader();
                }
                List<String> out = new ArrayList<>();
                for (Participant p : ps) out.add(p.getId() + ":" + (p.isLeader() ? 1 : 0));
                reply(seq, "ok list=" + String.join(",", out) + " leader=" + lead.getId());
                return;
            }
            case "leader": selector(seq, a); return;
            case "latch": latch(seq, a); return;
            default: reply(seq, "err unknown_command_" + cmd);
            }
        }

        static void selector(long seq, Map<String, String> a) throws Exception {
            String path = a.get("path"), id = a.get("id"), key = a.getOrDefault("key", path);
            double holdMs = darg(a, "hold_ms", 100), seconds = darg(a, "seconds", 30);
            AtomicBoolean stop = new AtomicBoolean();
            stops.put(id, stop);
            AtomicLong terms = new AtomicLong();
            PrintWriter log = open(a.get("log"));
            java.lang.reflect.Field mf = LeaderSelector.class.getDeclaredField("mutex");
            mf.setAccessible(true);
            final LeaderSelector[] self = new LeaderSelector[1];
            LeaderSelector sel = new LeaderSelector(client, path, new LeaderSelectorListenerAdapter() {
                public void takeLeadership(CuratorFramework cf) throws Exception {
                    double start = now();
                    int ev0 = events.size();
                    String node = (String) getLockPath.invoke(mf.get(self[0]));
                    long z = czxid(node);
                    line(log, String.join("\t", "B", key, "curator-" + PID, id, Long.toString(z), fmt(start),
                        basename(node)));
                    String how = "ok";
                    try {
                        double until = start + holdMs;
                        while (now() < until && !stop.get()) Thread.sleep(1);
                    } catch (InterruptedException e) {
                        how = "interrupted";
                    }
                    double end = now();
                    terms.incrementAndGet();
                    line(log, String.join("\t", "H", key, "curator-" + PID, id, Long.toString(z), fmt(start),
                        fmt(end), sessSince(ev0), "-", "0", how, basename(node), "leader"));
                    if (how.equals("interrupted")) Thread.currentThread().interrupt();
                }
            });
            self[0] = sel;
            sel.setId(id);
            sel.autoRequeue();
            sel.start();
            double deadline = now() + seconds * 1000;
            while (now() < deadline && !stop.get()) Thread.sleep(5);
            stop.set(true);
            sel.close();
            stops.remove(id);
            reply(seq, "ok terms=" + terms.get());
        }

        static void latch(long seq, Map<String, String> a) throws Exception {
            String path = a.get("path"), id = a.get("id"), key = a.getOrDefault("key", path);
            double holdMs = darg(a, "hold_ms", 100), seconds = darg(a, "seconds", 30);
            AtomicBoolean stop = new AtomicBoolean();
            stops.put(id, stop);
            long terms = 0;
            PrintWriter log = open(a.get("log"));
            double deadline = now() + seconds * 1000;
            while (now() < deadline && !stop.get()) {
                LeaderLatch l = new LeaderLatch(client, path, id);
                AtomicReference<Double> lostAt = new AtomicReference<>();
                l.addListener(new LeaderLatchListener() {
                    public void isLeader() {}
                    public void notLeader() { lostAt.compareAndSet(null, now()); }
                });
                l.start();
                boolean led = false;
                while (!led && now() < deadline && !stop.get()) led = l.await(50, TimeUnit.MILLISECONDS);
                if (!led) { l.close(); break; }
                double start = now();
                int ev0 = events.size();
                String node = l.getOurPath();
                long z = czxid(node);
                line(log, String.join("\t", "B", key, "curator-" + PID, id, Long.toString(z), fmt(start),
                    basename(node)));
                double until = start + holdMs;
                while (now() < until && l.hasLeadership() && !stop.get()) Thread.sleep(1);
                Double lost = lostAt.get();
                double end = lost != null ? lost : now();
                String how = lost != null ? "lost" : "ok";
                l.close();
                terms++;
                line(log, String.join("\t", "H", key, "curator-" + PID, id, Long.toString(z), fmt(start),
                    fmt(end), sessSince(ev0), "-", "0", how, basename(node), "latch"));
            }
            stops.remove(id);
            reply(seq, "ok terms=" + terms);
        }
    }
}
