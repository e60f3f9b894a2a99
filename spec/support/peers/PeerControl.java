// PeerControl.java - the file protocol every JVM peer of the interop specs speaks (see peer.lua):
//   DIR/control  commands appended by the spec: "<seq> <command> key=value ..."
//   DIR/reply    replies appended by the peer: "<seq> ok|timeout|err key=value ..."; "0 ready ..."
//                once its client is connected
// A peer class extends PeerControl (for reply, now, fmt, oneLine and PID) and hands its command
// handler to serve(), which runs each command on a thread of its own (a blocking acquire does not
// hold up the next command) until the spec process (PARENT_PID) is gone or the deadline passes.
// Clock: System.nanoTime() / 1e6, CLOCK_MONOTONIC in milliseconds on Linux (HotSpot reads
// clock_gettime(CLOCK_MONOTONIC)), the clock of zklock's core.now(); printed with 3 decimals.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

public class PeerControl {
    interface Handler {
        void handle(long seq, String cmd, Map<String, String> args);
    }

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
}
