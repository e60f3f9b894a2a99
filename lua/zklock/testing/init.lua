--- zklock.testing: throwaway ZooKeeper servers for lock tests.
--
-- Starts real ZooKeeper servers (Debian package `zookeeper`, 3.8) on 127.0.0.1,
-- each on a random free port with a private temporary data directory, and gives
-- you the knobs that fault tests need: kill, SIGSTOP/SIGCONT, restart on the same
-- port and data, four-letter words, and forced session expiry.
--
--     local testing = require("zklock.testing")
--
--     describe("my lock", function()
--       local zk
--       setup(function() zk = testing.server{ tick_ms = 500, min_session_ms = 1000 } end)
--       teardown(function() if zk then zk:stop() end end)
--
--       it("survives a server restart", function()
--         local c = zklock.connect(zk.hosts)
--         ...
--         zk:kill(); zk:restart()
--         assert.is_number(zk:mntr().zk_znode_count)
--       end)
--     end)
--
-- API
--   testing.server(opts) -> server      one standalone ZooKeeperServerMain
--     opts.tick_ms (500)                tickTime
--     opts.min_session_ms (1000)        minSessionTimeout
--     opts.max_session_ms (60000)       maxSessionTimeout
--     opts.container_check_ms (100)     -Dznode.container.checkIntervalMs (also the TTL node reaper)
--     opts.extended_types (false)       -Dzookeeper.extendedTypesEnabled=true (TTL nodes)
--     opts.port (nil = random free port in 20000-40000; retried on bind failure)
--     opts.timeout (20)                 seconds to wait for `ruok` -> `imok`
--     opts.config                       extra zoo.cfg lines: { ["key"] = value, ... }
--     opts.jvm_opts                     extra JVM arguments: { "-Dfoo=bar", ... }
--   server.hosts  "127.0.0.1:PORT"      server.port, server.dir (temp dir), server.pid,
--   server.data_dir, server.cfg, server.log (server output, file in server.dir)
--   server:stop([{keep_dir=true}])      SIGTERM (SIGKILL after 10 s), wait, remove server.dir.
--                                       Idempotent. Nodes of an ensemble keep their dir
--                                       (the ensemble removes it in ens:stop()).
--   server:kill()                       SIGKILL and wait until gone; dir kept for restart()
--   server:pause() / server:resume()    SIGSTOP / SIGCONT (a reliable connection loss)
--   server:restart([timeout_s])         start again on the same port and data; waits `ruok`
--   server:four(cmd [, timeout_s])      four-letter word (ruok, mntr, srvr, stat, cons, dump,
--                                       wchc, wchp, ...) -> reply string | nil, err
--   server:mntr()                       -> { zk_znode_count = 5, zk_server_state = "standalone", ... }
--                                          | nil, err
--   server:mode()                       -> "standalone" | "leader" | "follower" | nil, err
--   server:running()                    -> boolean (the JVM process exists and is not a zombie)
--   server:log_tail([n])                -> last n lines of the server output
--
--   testing.ensemble(opts) -> ensemble  n x QuorumPeerMain (opts.n = 3, other opts as above,
--                                       opts.timeout = 30); returns when every node answers
--                                       and exactly one is leader
--   ens.hosts  "127.0.0.1:p1,127.0.0.1:p2,..."   ens.nodes[i] (servers, as above), ens.dir
--   ens:leader([timeout_s])             index of the node that is leader (exactly one node says
--                                       leader and a quorum serves); polls up to timeout_s (10)
--                                       -> i | nil, err. Paused and dead nodes are skipped.
--   ens:wait_quorum([timeout_s])        like leader(), and also waits until every running,
--                                       unpaused node serves as leader or follower -> i | nil, err
--   ens:stop()                          stops all nodes (and links), removes ens.dir. Idempotent.
--   opts.partitions = true              links between the members that the kit can cut: each
--                                       member's zoo.cfg names a kit proxy (one per ordered pair,
--                                       127.0.0.1, python3) for every other member
--   ens:partition(group, ... [, opts])  members in different groups cannot talk ({1}, {2, 3});
--                                       members in no group form one more group -> true
--   ens:isolate(i [, opts])             member i cut from all others -> true
--   ens:isolate_leader([opts])          -> the isolated leader's index | nil, err
--   ens:heal()                          every link passes again (then ens:wait_quorum())
--     opts: { seconds = 120 (links heal by themselves after that), how = "cut" | "blackhole" }
--     ens.groups: the partition in effect (nil when healed); ens.links[i][j]: link i -> j
--
--   testing.stop_all()                  stops every server and ensemble this process started
--   testing.expire(client [, hosts [, timeout_ms]])
--                                       expire the client's session at the server (a second
--                                       handle with the same session id and password connects
--                                       and closes); needs the C module zklock.core
--                                       -> true | nil, err
--   testing.sleep(seconds)              fractional sleep
--   testing.now()                       monotonic seconds (for measuring), 10 ms resolution
--
--   Shell, file and process helpers (also used by the spec support code and its workers):
--   testing.shq(s)                      s quoted for POSIX sh ('...')
--   testing.sh(cmd)                     run cmd under sh (LD_PRELOAD unset) -> its stdout string;
--                                       raises if no shell can be started
--   testing.execute(cmd)                run cmd under sh (LD_PRELOAD unset) -> true if it exits 0
--   testing.read_file(path)             -> the whole file | nil if it cannot be opened
--   testing.write_file(path, s [, mode])  write (mode "w", or "a" to append); raises on failure
--   testing.exists(path)                -> boolean (the file can be opened for reading)
--   testing.proc_stat(pid)              -> state letter, starttime, ppid (strings, from
--                                          /proc/<pid>/stat) | nil if there is no such process
--   testing.pid_alive(pid [, starttime]) -> boolean: exists, is not a zombie, and (if starttime
--                                          is given) is the same process, not a reused pid
--   testing.exit_with_parent(client, parent_pid [, period [, busy [, on_gone]]])
--                                       in a worker process: exit (status 4, after on_gone())
--                                       once the test process that started it is gone
--   testing.free_ports(n [, avoid])     n distinct loopback ports no socket uses now (from
--                                       /proc/net/tcp*, in testing.config.port_min..port_max)
--   testing.spawn{ command = sh_cmd, log = path, pidfile = path [, cwd = dir]
--                  [, stop = "TERM"] [, grace = 3] }
--                                       run a long-lived command that goes away with this
--                                       process (babysitter shell, as for the servers; on exit:
--                                       `stop` signal, KILL after `grace` s) -> pid | nil, err
--   testing.pid, testing.pid_start      this process's pid (number) and its starttime (string)
--
-- The lock-test kit (docs/testing.md, "A Jepsen-style lock test in busted"; each module's header has the
-- details):
--   testing.proxy(target [, opts]) -> net   a fault proxy in front of one server (python3):
--       net.hosts, net:cut([s]), net:blackhole([s]), net:drop_replies([s]), net:delay(ms [, s]),
--       net:delay_replies(ms [, s]),
--       net:reset(), net:heal(), net:status(), net:stop()          (zklock.testing.net)
--   testing.nemesis(opts) -> nem             a seeded fault schedule (partition and isolate_leader
--       among its faults with an ensemble{ partitions = true }): nem:plan(seconds),
--       nem:run(seconds) -> report, nem:heal()                      (zklock.testing.nemesis)
--   testing.rng(seed)                        the nemesis's seeded generator: r(), r(lo, hi)
--   testing.check                            the history format and checkers: recorder, load,
--       mutex, semaphore, rwlock, tokens, fenced, fifo, leader, queue, all, main
--   testing.worker(opts) -> worker           a Lua worker process that goes away with this one
--   testing.fenced(client, path [, opts])    a znode that refuses stale fencing tokens
--   testing.eventually(fn [, timeout [, opts]])  poll fn until it returns true; raise on timeout
--   testing.with_server([opts,] fn), testing.with_ensemble([opts,] fn)  fn(server) and stop
--       it, and every proxy, worker and server started meanwhile, whatever happens
--
-- Failure convention: a server that cannot be started raises an error that carries the
-- tail of its log; four()/mntr()/mode()/leader()/wait_quorum()/expire() return nil, err.
--
-- Cleanup. Every server is recorded and testing.stop_all() stops them; it also runs when
-- the Lua state is closed (busted closes it on exit). Independently, each JVM runs under a
-- small babysitter shell (its own session, via setsid) that polls once a second whether the
-- Lua process that started it still exists; if not, it terminates the JVM. So a test process
-- that crashes or is SIGKILLed leaves no server behind (it goes within ~1-4 s). The temp dir
-- is left behind in that case only.
--
-- Modules (each can be required on its own; this one re-exports their public functions):
--   zklock.testing.config     the config table (java, jars, JVM options, port range)
--   zklock.testing.shell      shq, sh, execute, read_file, write_file, exists, sleep, now, temp dirs
--   zklock.testing.processes  proc_stat, pid_alive, pid, pid_start, spawn, exit_with_parent
--   zklock.testing.ports      free_ports, and which process listens on a port
--   zklock.testing.servers    server() and the Server methods (also used by ensemble nodes)
--   zklock.testing.ensemble   ensemble()
--   zklock.testing.registry   every server/ensemble started here; stop_all(), also at state close
--   zklock.testing.faults     expire()
--   zklock.testing.net        proxy() (and proxy.py, the fault proxy it runs)
--   zklock.testing.nemesis    new(), rng()
--   zklock.testing.check      recorder(), load(), the checkers, main()
--   zklock.testing.workers    worker()
--   zklock.testing.fenced     fenced()
--   zklock.testing.fixtures   eventually(), with_server(), with_ensemble()
--
-- Requirements: Linux (/proc), POSIX sh, java, the `zookeeper` package
-- (/usr/share/java/zookeeper.jar), socat or bash for four-letter words, and python3 (Debian's
-- base system has it) for the fault proxy of testing.proxy() only. Pure Lua:
-- runs under Lua 5.1-5.4 and LuaJIT. Paths can be changed in testing.config before use.

local config = require("zklock.testing.config")
local shell = require("zklock.testing.shell")
local processes = require("zklock.testing.processes")
local ports = require("zklock.testing.ports")
local registry = require("zklock.testing.registry")
local servers = require("zklock.testing.servers")
local ensemble = require("zklock.testing.ensemble")
local faults = require("zklock.testing.faults")
local net = require("zklock.testing.net")
local nemesis = require("zklock.testing.nemesis")
local workers = require("zklock.testing.workers")
local fenced = require("zklock.testing.fenced")
local fixtures = require("zklock.testing.fixtures")

local M = { _NAME = "zklock.testing", _VERSION = "0.1.0" }

M.config = config

-- servers and faults
M.server = servers.server
M.ensemble = ensemble.ensemble
M.stop_all = registry.stop_all
M.expire = faults.expire
M._sentinel = registry._sentinel

-- shell, files and clock
M.shq, M.sh, M.execute = shell.shq, shell.sh, shell.execute
M.read_file, M.write_file, M.exists = shell.read_file, shell.write_file, shell.exists
M.sleep, M.now = shell.sleep, shell.now

-- processes and ports
M.proc_stat, M.pid_alive = processes.proc_stat, processes.pid_alive
M.pid, M.pid_start = processes.pid, processes.pid_start
M.spawn, M.exit_with_parent = processes.spawn, processes.exit_with_parent
M.free_ports = ports.free_ports

-- the lock-test kit
M.proxy = net.proxy
M.nemesis = nemesis.new
M.rng = nemesis.rng
M.worker = workers.worker
M.fenced = fenced.fenced
M.eventually = fixtures.eventually
M.with_server, M.with_ensemble = fixtures.with_server, fixtures.with_ensemble
M.check = require("zklock.testing.check")

return M
