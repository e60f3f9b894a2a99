// CacheCurator.java - Curator 5.4's CuratorCache and TreeCache, the peers of
// bench/tools/cache_cost.lua.
//
//   java -cp <build dir>:<jars> CacheCurator HOSTS PATH LOGFILE MAX_SECONDS [curator|treecache]
//
// Builds a CuratorCache on PATH (the whole tree; on a 3.6+ server Curator uses one persistent
// recursive watch), or with "treecache" a TreeCache (one-shot data and children watches on every
// node, as the older recipe does), and appends to LOGFILE, one line each: "init MS" when the first load is in
// (ms from the cache's start), "chg TYPE PATH DATA" for every change event after it, "state NAME" for
// every connection state. Exits after MAX_SECONDS or when the file LOGFILE.stop exists.
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.cache.TreeCache;
import org.apache.curator.framework.recipes.cache.TreeCacheEvent;
import org.apache.curator.retry.RetryNTimes;

public class CacheCurator {
    static PrintWriter log;

    static synchronized void line(String s) {
        log.println(s);
        log.flush();
    }

    static String text(ChildData d) {
        if (d == null || d.getData() == null) return "";
        return new String(d.getData(), StandardCharsets.UTF_8).replace('\n', ' ');
    }

    public static void main(String[] a) throws Exception {
        String hosts = a[0], path = a[1], file = a[2];
        double max = Double.parseDouble(a[3]);
        boolean tree = a.length > 4 && a[4].equals("treecache");
        log = new PrintWriter(new FileWriter(file, true));
        CuratorFramework client = CuratorFrameworkFactory.builder().connectString(hosts)
            .sessionTimeoutMs(10000).connectionTimeoutMs(10000).retryPolicy(new RetryNTimes(1000, 100)).build();
        client.getConnectionStateListenable().addListener((c, s) -> line("state " + s));
        client.start();
        client.blockUntilConnected();
        final long t0 = System.nanoTime();
        if (tree) {
            TreeCache tc = TreeCache.newBuilder(client, path).build();
            final boolean[] init = { false };
            tc.getListenable().addListener((c, e) -> {
                TreeCacheEvent.Type t = e.getType();
                if (t == TreeCacheEvent.Type.INITIALIZED) {
                    init[0] = true;
                    line("init " + (System.nanoTime() - t0) / 1000000);
                } else if (init[0] && e.getData() != null && (t == TreeCacheEvent.Type.NODE_ADDED
                        || t == TreeCacheEvent.Type.NODE_UPDATED || t == TreeCacheEvent.Type.NODE_REMOVED)) {
                    line("chg " + t + " " + e.getData().getPath() + " " + text(e.getData()));
                }
            });
            tc.start();
            waitStop(file, max);
            tc.close();
            client.close();
            line("done");
            return;
        }
        CuratorCache cache = CuratorCache.build(client, path);
        cache.listenable().addListener(CuratorCacheListener.builder()
            .forInitialized(() -> line("init " + (System.nanoTime() - t0) / 1000000))
            .forCreates(d -> line("chg created " + d.getPath() + " " + text(d)))
            .forChanges((o, d) -> line("chg changed " + d.getPath() + " " + text(d)))
            .forDeletes(d -> line("chg deleted " + d.getPath() + " " + text(d)))
            .afterInitialized() // the first load's creates are not reported one by one
            .build());
        cache.start();
        waitStop(file, max);
        cache.close();
        client.close();
        line("done");
    }

    static void waitStop(String file, double max) throws InterruptedException {
        long end = System.nanoTime() + (long) (max * 1e9);
        Path stop = Paths.get(file + ".stop");
        while (System.nanoTime() < end && !Files.exists(stop)) Thread.sleep(20);
    }
}
