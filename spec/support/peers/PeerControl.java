// PeerControl.java - the file protocol every JVM peer of the interop specs speaks (see peer.lua):
//   DIR/control  commands appended by the spec: "<seq> <command> key=value ..."
//   DIR/reply    replies appended by the peer: "<seq> ok|timeout|err key=value ..."; "0 ready ..."
//                once its client is connected
// A peer class extends PeerControl (for reply, now, fmt, oneLine and PID) and hands its command
// handler to serve(), which runs each command on a thread of its own (a blocking acquire does not
// hold up the next command) until the spec process (PARENT_PID) is gone or the deadline passes.
// Clock: System.nanoTime() / 1e6, CLOCK_MONOTONIC in milliseconds on Linux (HotSpot reads
// clock_gettime(CLOCK_MONOTONIC)), the clock of zklock's core.now(); printed with 3 decimals.
//
// A peer made of one CuratorFramework and a command table (MemberPeer, SharedPeer) has its main
// here: runCurator(args, retries, commands) connects `client`, answers ping and quit itself, runs
// every other command through commands.run, and replies "err <exception>" when one throws.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.RetryNTimes;

public class PeerControl {
    interface Handler {
        void handle(long seq, String cmd, Map<String, String> args);
    }

    // A peer's own commands: run cmd and reply, or return false when cmd is not one of them.
    interface Commands {
        boolean run(long seq, String cmd, Map<String, String> args) throws Exception;
    }

    static CuratorFramework client; // runCurator's client

    static File replyFile;
    static final Object replyLock = new Object();
    static final String PID = String.valueOf(ProcessHandle.current().pid());

    static double now() { return System.nanoTime() / 1e6; }

    static String fmt(double ms) { return String.format(Locale.ROOT, "%.3f", ms); }

    static void reply(long seq, String text) {
        synchronized (replyLock) {
            try (FileOutputStream o = new FileOutputStream(replyFile, true)) {
                o.write((seq + " " + text.replace('\n', ' ') + "\n").getBytes(StandardCharsets.UTF_8));
            } catch (IOException e) {
                System.err.println("cannot write reply: " + e);
            }
        }
    }

    static String oneLine(Throwable e) {
        return (e.getClass().getSimpleName() + ":" + e.getMessage()).replaceAll("\\s+", "_");
    }

    // Replies go to DIR/reply from now on.
    static void replyTo(File dir) { replyFile = new File(dir, "reply"); }

    // Read DIR/control as it grows and run each command line on a thread of its own; return when
    // the process `parent` is gone or after maxSeconds.
    static void serve(File dir, long parent, long maxSeconds, Handler h) throws Exception {
        File control = new File(dir, "control");
        Optional<ProcessHandle> ph = ProcessHandle.of(parent);
        double deadline = now() + maxSeconds * 1000.0;
        long offset = 0, polls = 0;
        StringBuilder partial = new StringBuilder();
        while (now() < deadline) {
            if (++polls % 100 == 0 && (ph.isEmpty() || !ph.get().isAlive())) break; // the spec is gone
            long len = control.length();
            if (len <= offset) {
                Thread.sleep(2);
                continue;
            }
            try (RandomAccessFile f = new RandomAccessFile(control, "r")) {
                f.seek(offset);
                byte[] b = new byte[(int) (len - offset)];
                f.readFully(b);
                offset = len;
                partial.append(new String(b, StandardCharsets.UTF_8));
            }
            int nl;
            while ((nl = partial.indexOf("\n")) >= 0) {
                String line = partial.substring(0, nl).trim();
                partial.delete(0, nl + 1);
                if (line.isEmpty()) continue;
                String[] w = line.split("\\s+");
                long seq = Long.parseLong(w[0]);
                Map<String, String> kv = new HashMap<>();
                for (int i = 2; i < w.length; i++) {
                    int eq = w[i].indexOf('=');
                    if (eq > 0) kv.put(w[i].substring(0, eq), w[i].substring(eq + 1));
                }
                String cmd = w.length > 1 ? w[1] : "";
                Thread t = new Thread(() -> h.handle(seq, cmd, kv));
                t.setDaemon(true);
                t.start();
            }
        }
    }

    static int iarg(Map<String, String> a, String k, int dflt) {
        String v = a.get(k);
        return v == null ? dflt : Integer.parseInt(v);
    }

    static byte[] bytes(String s) { return (s == null ? "" : s).getBytes(StandardCharsets.UTF_8); }

    // The main of a one-client peer: java ... Peer HOSTS DIR PARENT_PID MAX_SECONDS [SESSION_MS].
    // Connects `client` (RetryNTimes(retries, 100); not connected within 30 s: "0 err
    // not_connected", exit 3), replies "0 ready now=<ms> pid=<pid>" and serves commands until
    // serve() returns; then closes the client and exits 0.
    //   ping -> ok now=<ms> pid=<pid>;  quit -> closes the client (its session and ephemeral nodes
    //   go at once), ok, exit 0;  any other command: commands.run, or "err unknown_command=<cmd>"
    static void runCurator(String[] args, int retries, Commands commands) throws Exception {
        String hosts = args[0];
        File dir = new File(args[1]);
        long parent = Long.parseLong(args[2]);
        long maxSeconds = Long.parseLong(args[3]);
        int sessionMs = args.length > 4 ? Integer.parseInt(args[4]) : 10000;
        replyTo(dir);
        client = CuratorFrameworkFactory.builder().connectString(hosts).sessionTimeoutMs(sessionMs)
            .connectionTimeoutMs(10000).retryPolicy(new RetryNTimes(retries, 100)).build();
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
            reply(0, "err not_connected");
            System.exit(3);
        }
        reply(0, "ready now=" + fmt(now()) + " pid=" + PID);
        serve(dir, parent, maxSeconds, (seq, cmd, a) -> {
            try {
                switch (cmd) {
                case "ping":
                    reply(seq, "ok now=" + fmt(now()) + " pid=" + PID);
                    break;
                case "quit":
                    client.close();
                    reply(seq, "ok");
                    System.exit(0);
                    break;
                default:
                    if (!commands.run(seq, cmd, a)) reply(seq, "err unknown_command=" + cmd);
                }
            } catch (Throwable e) {
                reply(seq, "err " + oneLine(e));
            }
        });
        client.close();
        System.exit(0);
    }
}
