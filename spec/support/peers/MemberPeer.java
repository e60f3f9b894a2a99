// MemberPeer.java - Apache Curator 5.4 group membership (GroupMember, PersistentNode) for the
// interop spec spec/78-curator-member_spec.lua. Same file protocol as CuratorPeer.java (see
// peer.lua); main, ping and quit are PeerControl.runCurator's:
//   java -cp <classes>:<jars> MemberPeer HOSTS DIR PARENT_PID MAX_SECONDS [SESSION_MS]
//   DIR/control  "<seq> <command> key=value ..."; DIR/reply "<seq> ok|timeout|err key=value ..."
// Every command runs on a thread of its own. Data values travel as plain words (no white space).
//   ping                                   -> ok now=<ms> pid=<pid>
//   member id= path= data=                 a started GroupMember(client, path, id, data) (kept under id)
//   member_set id= data=                   setThisData -> ok
//   members id=                            getCurrentMembers -> ok list=<id:data,...> (sorted by id)
//   member_close id=                       close -> ok
//   pnode id= path= mode=ephemeral|ephemeral_sequential protected=0|1 data=
//                                          a started PersistentNode; waits up to 10 s for its first
//                                          node -> ok node=<actual path> | timeout
//   pnode_info id=                         -> ok node=<actual path or -> created=<nodeCreated calls>
//   pnode_close id=                        close (deletes the node) -> ok
//   protected name=                        Curator's reading of a node name (ProtectedUtils)
//                                          -> ok protected=true|false id=<protected id or -> normalized=<name>
//   quit                                   -> ok, then exit
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;

import org.apache.curator.framework.imps.ProtectedUtils;
import org.apache.curator.framework.recipes.nodes.GroupMember;
import org.apache.curator.framework.recipes.nodes.PersistentNode;
import org.apache.zookeeper.CreateMode;

public class MemberPeer extends PeerControl {
    static final ConcurrentHashMap<String, GroupMember> members = new ConcurrentHashMap<>();
    static final ConcurrentHashMap<String, PersistentNode> pnodes = new ConcurrentHashMap<>();
    static final ConcurrentHashMap<String, AtomicInteger> created = new ConcurrentHashMap<>();

    // The commands of the header but ping and quit (PeerControl.runCurator answers those).
    static boolean run(long seq, String cmd, Map<String, String> a) throws Exception {
        switch (cmd) {
        case "member": {
            GroupMember m = new GroupMember(client, a.get("path"), a.get("id"), bytes(a.get("data")));
            m.start();
            members.put(a.get("id"), m);
            reply(seq, "ok");
            break;
        }
        case "member_set":
            members.get(a.get("id")).setThisData(bytes(a.get("data")));
            reply(seq, "ok");
            break;
        case "members": {
            Map<String, byte[]> cur = members.get(a.get("id")).getCurrentMembers();
            List<String> out = new ArrayList<>();
            for (String k : new TreeSet<>(cur.keySet())) out.add(k + ":" + new String(cur.get(k), StandardCharsets.UTF_8));
            reply(seq, "ok list=" + String.join(",", out));
            break;
        }
        case "member_close": {
            GroupMember m = members.remove(a.get("id"));
            if (m != null) m.close();
            reply(seq, "ok");
            break;
        }
        case "pnode": {
            String id = a.get("id");
            CreateMode mode = "ephemeral_sequential".equals(a.get("mode")) ? CreateMode.EPHEMERAL_SEQUENTIAL
                                                                           : CreateMode.EPHEMERAL;
            PersistentNode n = new PersistentNode(client, mode, "1".equals(a.get("protected")), a.get("path"),
                                                  bytes(a.get("data")));
            AtomicInteger count = new AtomicInteger();
            created.put(id, count);
            n.getListenable().addListener(path -> count.incrementAndGet());
            pnodes.put(id, n);
            n.start();
            if (!n.waitForInitialCreate(10, TimeUnit.SECONDS)) {
                reply(seq, "timeout");
                break;
            }
            reply(seq, "ok node=" + n.getActualPath());
            break;
        }
        case "pnode_info": {
            PersistentNode n = pnodes.get(a.get("id"));
            String p = n.getActualPath();
            reply(seq, "ok node=" + (p == null ? "-" : p) + " created=" + created.get(a.get("id")).get());
            break;
        }
        case "pnode_close": {
            PersistentNode n = pnodes.remove(a.get("id"));
            if (n != null) n.close();
            reply(seq, "ok");
            break;
        }
        case "protected": {
            String name = a.get("name");
            Optional<String> pid = ProtectedUtils.extractProtectedId(name);
            reply(seq, "ok protected=" + ProtectedUtils.isProtectedZNode(name) + " id=" + pid.orElse("-")
                + " normalized=" + ProtectedUtils.normalize(name));
            break;
        }
        default:
            return false;
        }
        return true;
    }

    public static void main(String[] args) throws Exception {
        runCurator(args, 1000, MemberPeer::run);
    }
}
