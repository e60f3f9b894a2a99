---@meta zklock.testing

---Throwaway ZooKeeper servers for lock tests (Debian's `zookeeper` package, on 127.0.0.1, each
---on a free port with a private temporary directory), the knobs fault tests need, and the small
---shell, file and process helpers the specs use. A server that cannot be started raises with the
---tail of its log; `four`, `mntr`, `mode`, `leader`, `wait_quorum` and `expire` return
---`nil, err`. Every server is stopped by `stop_all()`, also when the Lua state closes, and by a
---watchdog shell should the Lua process die. Durations are seconds unless the name ends in `_ms`.
---
---```lua
---local testing = require("zklock.testing")
---local zk = testing.server{ tick_ms = 500, min_session_ms = 1000 }
---local c = assert(zklock.connect(zk.hosts))
---zk:stop()
---```
---@class zklock.testing
---@field config zklock.testing.Config Paths and limits, shared by every zklock.testing module; change before use.
---@field pid integer This process's pid.
---@field pid_start string This process's start time (from /proc/self/stat), to tell a reused pid.
---@field _NAME string `"zklock.testing"`.
---@field _VERSION string Its version (equal to `zklock._VERSION`).
---@field check zklock.testing.check The history format and the checkers (also `require("zklock.testing.check")`).
local testing = {}

---Start one standalone ZooKeeper server (ZooKeeperServerMain) and wait until it answers `ruok`.
---
---Errors: raises if it cannot be started (the message carries the tail of its log) or on an
---invalid option.
---@param opts? zklock.testing.ServerOptions
---@return zklock.testing.Server server
function testing.server(opts) end

---Options of `testing.server` (and, through `EnsembleOptions`, of `testing.ensemble`).
---@class zklock.testing.ServerOptions
---@field tick_ms? integer `tickTime` (default 500).
---@field min_session_ms? integer `minSessionTimeout` (default 1000).
---@field max_session_ms? integer `maxSessionTimeout` (default 60000).
---@field container_check_ms? integer `-Dznode.container.checkIntervalMs` (default 100): how often the server reaps empty containers and expired TTL nodes.
---@field extended_types? boolean `-Dzookeeper.extendedTypesEnabled=true` (default false): the server accepts TTL nodes (`client:create`'s `ttl`).
---@field port? integer Client port (default: a random free port in `config.port_min..port_max`, retried on a bind failure). Ignored by `ensemble`, which picks its own.
---@field timeout? number Seconds to wait for the server to serve (default 20; 30 for an ensemble).
---@field config? table<string, any> Extra zoo.cfg lines: `{ ["key"] = value }`.
---@field jvm_opts? string[] Extra JVM arguments: `{ "-Dfoo=bar" }`.

---Start `n` servers (QuorumPeerMain) as one quorum; returns when every node answers and exactly
---one is leader.
---
---Errors: raises if the ensemble cannot be started or on an invalid option.
---@param opts? zklock.testing.EnsembleOptions
---@return zklock.testing.Ensemble ensemble
function testing.ensemble(opts) end

---Options of `testing.ensemble`: those of `testing.server`, and:
---@class zklock.testing.EnsembleOptions: zklock.testing.ServerOptions
---@field n? integer Number of servers (default 3).
---@field init_limit? integer `initLimit` in ticks (default 10).
---@field sync_limit? integer `syncLimit` in ticks (default 4).
---@field partitions? boolean Links between the members that the kit can cut (default false): each member gets a zoo.cfg of its own in which every other member's quorum and election addresses are kit proxies on 127.0.0.1 (one python3 process per ordered pair of members), so `ens:partition`, `ens:isolate`, `ens:isolate_leader` and `ens:heal` work; no root needed. Reconfig stays disabled, and the members back off their election messages 2 s at most (`-Dzookeeper.fastleader.maxNotificationInterval=2000`, which `jvm_opts` can override) so that a healed member rejoins within seconds.

---Stop every server and ensemble this process started.
---@return true? ok
---@return string? err The errors of those that failed to stop.
function testing.stop_all() end

---Expire a live client's session at the server: a second handle connects with the same session
---id and password, then closes. The client sees `SUSPENDED`, then `EXPIRED`, typically within
---100 ms. Needs the C module zklock.core.
---
---Errors: `nil, err` if the client has no session or the expiry fails; raises without a client,
---without zklock.core, or if the hosts cannot be told.
---@param client zklock.Client
---@param hosts? string Default: `client.hosts`.
---@param timeout_ms? integer Default 5000.
---@return true? ok
---@return string? err
function testing.expire(client, hosts, timeout_ms) end

---Quote `s` for POSIX sh (`'...'`).
---@param s any
---@return string
function testing.shq(s) end

---Run `cmd` under sh (LD_PRELOAD unset) and return its standard output.
---
---Errors: raises if no shell can be started.
---@param cmd string
---@return string out
function testing.sh(cmd) end

---Run `cmd` under sh (LD_PRELOAD unset).
---@param cmd string
---@return boolean ok True if it exits with status 0.
function testing.execute(cmd) end

---Read a whole file.
---@param path string
---@return string? content nil if it cannot be opened.
function testing.read_file(path) end

---Write (or append to) a file.
---
---Errors: raises on failure.
---@param path string
---@param s string
---@param mode? "w"|"a" Default `"w"`.
function testing.write_file(path, s, mode) end

---Whether a file can be opened for reading.
---@param path string
---@return boolean
function testing.exists(path) end

---Sleep for a fractional number of seconds.
---@param seconds number
function testing.sleep(seconds) end

---Monotonic seconds, for measuring (10 ms resolution).
---@return number
function testing.now() end

---A process's state letter, start time and parent pid, from /proc/<pid>/stat.
---@param pid integer|string
---@return string? state nil if there is no such process.
---@return string? starttime
---@return string? ppid
function testing.proc_stat(pid) end

---Whether a process exists, is not a zombie and (if `starttime` is given) is the same process,
---not a reused pid.
---@param pid integer|string
---@param starttime? string
---@return boolean
function testing.pid_alive(pid, starttime) end

---Run a long-lived command that goes away with this process: a babysitter shell in its own
---session starts it and, once this process is gone, sends `stop` and then KILL after `grace`.
---
---Errors: `nil, err` if the shell or the command does not start.
---@param opts zklock.testing.SpawnOptions
---@return string? pid The command's pid.
---@return string? err
function testing.spawn(opts) end

---Options of `testing.spawn`.
---@class zklock.testing.SpawnOptions
---@field command string The sh command line.
---@field log string File receiving its output (appended).
---@field pidfile string File the command's pid is written to.
---@field cwd? string Working directory (default `/`).
---@field stop? string Signal sent when this process is gone (default `"TERM"`).
---@field grace? number Seconds before KILL follows (default 3).

---In a worker process: a coroutine of `client` checks every `period` seconds, while `busy()` is
---true (always if nil), that `parent_pid` still exists; once it does not, it calls `on_gone()`
---and exits the process with status 4. Does nothing without `parent_pid`.
---@param client zklock.Client
---@param parent_pid? integer|string
---@param period? number Default 0.5.
---@param busy? fun(): boolean
---@param on_gone? fun()
function testing.exit_with_parent(client, parent_pid, period, busy, on_gone) end

---`n` distinct loopback ports no socket uses now (from /proc/net/tcp*, in
---`config.port_min..port_max`).
---@param n integer
---@param avoid? integer[] Ports to avoid as well.
---@return integer[] ports
function testing.free_ports(n, avoid) end

---`testing.config`: one table shared by every zklock.testing module.
---@class zklock.testing.Config
---@field java string The java command (default `$ZKLOCK_JAVA` or `"java"`).
---@field zookeeper_jar string Default `/usr/share/java/zookeeper.jar`.
---@field conf_dir string Default `/etc/zookeeper/conf`.
---@field slf4j_jar string Added to the class path if present.
---@field jvm_opts string[] JVM options of every server.
---@field stop_timeout number Seconds of SIGTERM grace before SIGKILL (default 10).
---@field port_min integer Lowest port `free_ports` picks (default 20000).
---@field port_max integer Highest port `free_ports` picks (default 40000).
---@field python string The python3 command that runs the fault proxy of `testing.proxy` (default `$ZKLOCK_PYTHON` or `"python3"`).
---@field net_fault_max number Seconds after which a network fault heals by itself unless given its own bound (default 120).
testing.config = {}

---A server from `testing.server` (or a node of an ensemble).
---@class zklock.testing.Server
---@field hosts string `"127.0.0.1:PORT"`.
---@field port integer
---@field pid integer
---@field dir string Its temporary directory.
---@field data_dir string
---@field cfg string Its zoo.cfg.
---@field log string File holding its output.
local server = {}

---SIGTERM (SIGKILL after `config.stop_timeout`), wait, and remove its directory. Idempotent.
---Nodes of an ensemble keep their directory (the ensemble removes it).
---@param opts? zklock.testing.StopOptions
---@return true
function server:stop(opts) end

---Options of `server:stop`.
---@class zklock.testing.StopOptions
---@field keep_dir? boolean Keep the directory so that `restart()` works (default: false for a server, true for an ensemble node).

---SIGKILL and wait until gone; the directory is kept for `restart()`.
---
---Errors: raises if the process survives SIGKILL for 10 s.
---@return true
function server:kill() end

---SIGSTOP (a reliable connection loss for its clients).
---
---Errors: raises if the server is not running.
---@return true
function server:pause() end

---SIGCONT after `pause()`.
---
---Errors: raises if the server is not running.
---@return true
function server:resume() end

---Start again on the same port and data, and wait until it serves.
---
---Errors: raises if the directory was removed, the server still runs, or it does not come up.
---@param timeout? number Seconds (default the server's `timeout` option).
---@return zklock.testing.Server server
function server:restart(timeout) end

---Send a four-letter word (`ruok`, `mntr`, `srvr`, `stat`, `cons`, `dump`, `wchc`, ...).
---
---Errors: `nil, err` when there is no reply; raises if `cmd` is not a four-letter word.
---@param cmd string
---@param timeout? number Seconds (default 2).
---@return string? reply
---@return string? err
function server:four(cmd, timeout) end

---The `mntr` counters as a table (`zk_znode_count`, `zk_server_state`, ...).
---@param timeout? number
---@return table<string, number|string>? counters
---@return string? err
function server:mntr(timeout) end

---The server's mode, from `srvr`.
---@param timeout? number
---@return "standalone"|"leader"|"follower"|nil mode
---@return string? err
function server:mode(timeout) end

---Whether the JVM process exists and is not a zombie.
---@return boolean
function server:running() end

---The last lines of the server's output.
---@param n? integer Default 25.
---@return string
function server:log_tail(n) end

---An ensemble from `testing.ensemble`.
---@class zklock.testing.Ensemble
---@field hosts string `"127.0.0.1:p1,127.0.0.1:p2,..."`.
---@field nodes zklock.testing.Server[]
---@field dir string Its temporary directory.
---@field n integer Number of nodes.
---@field links? zklock.testing.Net[][] With `partitions = true`: `links[i][j]` is the proxy that carries what member `i` sends to member `j` (`links[i][j].ports` = its listeners: to j's quorum port, to j's election port).
---@field groups? integer[][] The partition in effect (each group sorted, the members named in no group last), nil when healed.
local ensemble = {}

---Index of the leader: exactly one node says leader and a quorum serves (paused and dead nodes
---are skipped); polls up to `timeout`.
---@param timeout? number Seconds (default 10).
---@return integer? i
---@return string? err
function ensemble:leader(timeout) end

---Like `leader()`, and also waits until every running, unpaused node serves.
---@param timeout? number Seconds (default 30).
---@return integer? i
---@return string? err
function ensemble:wait_quorum(timeout) end

---Whether any node is running.
---@return boolean
function ensemble:running() end

---Stop all nodes and every link between them (with `partitions = true`), and remove the
---directory. Idempotent.
---@return true
function ensemble:stop() end

---Part the members (needs `partitions = true`): members in different groups cannot talk, in
---either direction (the links between them are cut); members in one group, or together in no
---group, talk as before. `ens:partition({1}, {2, 3})`, or `ens:partition({1})`: the members named
---in no group form one more group. A link between members of one group that an earlier
---partition cut is healed. Each cut link heals by itself after `opts.seconds` even if this
---process is blocked. Returns once every link has applied it; the members notice in their own
---time (`ens:leader()` and `ens:wait_quorum()` poll).
---
---Errors: raises on an ensemble without links, a group that is not a non-empty list of member
---indexes, a member in two groups, or a bad option; nothing is applied then.
---@param ... integer[]|zklock.testing.PartitionOptions|number Groups of member indexes, then optionally the options (or the seconds).
---@return true
function ensemble:partition(...) end

---Cut member `i` from every other member: `partition({i})`.
---
---Errors: as `partition`, or if `i` is not a member index.
---@param i integer
---@param opts? zklock.testing.PartitionOptions|number
---@return true
function ensemble:isolate(i, opts) end

---Find the leader (polling up to `opts.timeout`, 30 s) and isolate it.
---@param opts? zklock.testing.PartitionOptions|number
---@return integer? i The isolated member's index.
---@return string? err Why no leader was found (nothing applied).
function ensemble:isolate_leader(opts) end

---Heal every link between members (the members rejoin in their own time: `wait_quorum()`).
---On an ensemble without links: nothing to do.
---@return true
function ensemble:heal() end

---Options of `ens:partition`, `ens:isolate` and `ens:isolate_leader` (a number stands for `seconds`).
---@class zklock.testing.PartitionOptions
---@field seconds? number Each cut link heals by itself after this long (default `testing.config.net_fault_max`, 120).
---@field how? "cut"|"blackhole" `"cut"` (default): connections between the groups are closed and new ones refused, the members notice at once; `"blackhole"`: nothing passes, nothing is closed, new connections are swallowed, the members notice by their own timeouts.
---@field timeout? number `isolate_leader` only: seconds to look for the leader (default 30).

---------------------------------------------------------------- the lock-test kit

---Start a fault proxy (a python3 program shipped with zklock.testing) on a free loopback port in
---front of one server; connect a client to `net.hosts` to be able to cut it off alone. The proxy
---exits with this process, after `opts.max_seconds`, and in `testing.stop_all()`.
---
---Errors: raises if `target` is not one loopback `HOST:PORT`, on a bad option, or if the proxy
---does not start (python3 missing).
---@param target string One server's `"127.0.0.1:PORT"` (such as `zk.hosts` or `ens.nodes[i].hosts`).
---@param opts? zklock.testing.ProxyOptions
---@return zklock.testing.Net net
function testing.proxy(target, opts) end

---Options of `testing.proxy`.
---@class zklock.testing.ProxyOptions
---@field max_seconds? number The proxy exits after this long in any case (default 900).
---@field start_timeout? number Seconds to wait for it to listen (default 30).
---@field port? integer Listen on this port (default: any free one).
---@field routes? table[] More listeners in the same process, sharing its faults: `{ { target = "127.0.0.1:PORT" [, port = n] [, hello = "127.0.0.1:PORT"] }, ... }`; `net.ports[k + 1]` is route k's port. `hello` rewrites the sender's address in a ZooKeeper election handshake (the ensemble's links use it).

---A seeded fault schedule over a run (see `zklock.testing.nemesis` for the faults and what each
---needs). The schedule is a pure function of the seed and the options.
---
---Errors: raises on a bad option, naming it (a fault without targets included).
---@param opts zklock.testing.NemesisOptions
---@return zklock.testing.Nemesis nemesis
function testing.nemesis(opts) end

---Options of `testing.nemesis`.
---@class zklock.testing.NemesisOptions
---@field seed number The seed: the same seed and options give the same schedule.
---@field server? zklock.testing.Server Target of `pause`, `kill`, `restart`.
---@field ensemble? zklock.testing.Ensemble Target of `pause`, `kill`, `restart` (a random node) and `kill_leader`; started with `partitions = true`, also of `partition` (a random minority of its members cut from the rest, drawn from the seed: the step's `groups`) and `isolate_leader` (whoever leads when the step starts).
---@field nets? zklock.testing.Net[] Targets of `cut`, `blackhole`, `drop_replies`, `delay`, `reset`, `blackhole_after_push` (armed for the step: the first watch notification through the proxy is forwarded, then silence until the step ends; the heal line of the log says whether a push came).
---@field clients? zklock.Client[] Targets of `expire`.
---@field workers? zklock.testing.Worker[] Targets of `pause_worker`.
---@field faults? string[]|table<string, number> The mix: names (equal weights) or `{ name = weight }`; default: every fault the given targets allow among pause, restart, kill_leader, partition, isolate_leader, reset, blackhole, expire.
---@field schedule? table[] A fixed schedule instead of a drawn one: `{ { at = s, fault = name, target = i, seconds = d [, groups = { {1}, {2, 3} }] }, ... }` (`groups`: a `partition` step's sides; default `{ { target } }`).
---@field gap? number|number[] Seconds between faults, or `{ min, max }` (default `{ 2, 5 }`).
---@field duration? number|number[] Seconds a fault lasts, or `{ min, max }` (default `{ 1, 2 }`).
---@field delay_ms? number|number[] The `delay` fault's milliseconds, or `{ min, max }` (default `{ 200, 1500 }`).
---@field quiet? number Seconds at the end of a run with no fault (default 2).
---@field sleep? fun(seconds: number) How to wait between steps (default `testing.sleep`; pass `function(s) client:sleep(s) end` to keep this process's clients running).
---@field clock? fun(): number Seconds, monotonic (default `testing.now`).
---@field log? string|fun(line: string) Where each step's line goes: a file (appended) or a function.
---@field recorder? zklock.testing.Recorder Also log each step as a `nemesis` event in a history.
---@field expire_hosts? string Where `expire` connects (default: the server's or ensemble's hosts).

---The nemesis's seeded generator (Park-Miller, exact in doubles: the same numbers under every
---Lua): `r()` in [0, 1), `r(lo, hi)` an integer in lo..hi.
---@param seed number
---@return fun(lo?: integer, hi?: integer): number r
function testing.rng(seed) end

---Start a Lua worker process: `opts.script` (or the source `opts.code`) run by this interpreter
---with this process's `package.path` and `package.cpath`, output to a file, killed once this
---process is gone, stopped by `testing.stop_all()` and by `with_server`/`with_ensemble`. In the
---worker, `os.getenv("ZKLOCK_TEST_PARENT")` is the test process's pid.
---
---Errors: raises on a bad option or if the worker cannot be started.
---@param opts zklock.testing.WorkerOptions
---@return zklock.testing.Worker worker
function testing.worker(opts) end

---Options of `testing.worker`.
---@class zklock.testing.WorkerOptions
---@field script? string The Lua file to run (exactly one of `script` and `code`).
---@field code? string Lua source to run.
---@field args? (string|number)[] The script's `...` and `arg[1..n]`.
---@field lua? string The interpreter (default: `luajit` or `lua5.X`, as this process).
---@field env? table<string, string|number> More environment variables.
---@field cwd? string Working directory (default: the current one).

---A fenced resource kept in one znode: it takes a write only with a fencing token at least as
---high as the highest it took, atomically (versioned set).
---
---Errors: raises on a bad argument.
---@param client zklock.Client The client that reads and writes the znode.
---@param path string The znode (created with its parents on the first write).
---@param opts? zklock.testing.FencedOptions
---@return zklock.testing.Fenced resource
function testing.fenced(client, path, opts) end

---Options of `testing.fenced`.
---@class zklock.testing.FencedOptions
---@field recorder? zklock.testing.Recorder Log every write as `accept` (with `token=`, `zxid=`) or `reject` (`token=`).
---@field timeout? number Seconds for each ZooKeeper call (default: the client's `op_timeout`).

---Call `fn` until it returns a true first value without raising, and return its results; after
---`timeout` seconds raise `"eventually: <what> not within N s: <fn's last error or values>"`.
---`opts` as a number is the interval. Its options: `interval` (seconds between calls, 0.05),
---`pump` (`fun(seconds)`: how to wait, such as `function(s) client:sleep(s) end`), `what`
---(described in the message).
---
---Errors: raises on timeout, or on a bad argument.
---@param fn fun(): any
---@param timeout? number Seconds (default 10).
---@param opts? number|table
---@return any ...
function testing.eventually(fn, timeout, opts) end

---Start a server, call `fn(server)`, then stop it and every server, ensemble, proxy and worker
---started meanwhile, whether `fn` returns or raises (then re-raises, with its traceback).
---@param opts? zklock.testing.ServerOptions May be left out: `with_server(fn)`.
---@param fn fun(server: zklock.testing.Server): any
---@return any ... `fn`'s results.
function testing.with_server(opts, fn) end

---`with_server` for an ensemble: `fn(ensemble)`, then everything started meanwhile is stopped.
---@param opts? zklock.testing.EnsembleOptions May be left out: `with_ensemble(fn)`.
---@param fn fun(ensemble: zklock.testing.Ensemble): any
---@return any ... `fn`'s results.
function testing.with_ensemble(opts, fn) end

---A fault proxy from `testing.proxy`. Each fault applies to the connections open now and those
---made later until `heal()`; its `seconds` bound it: the proxy heals by itself after that long
---(default `config.net_fault_max`), even if this process is blocked. Each call waits until the
---proxy has applied it (calling `net.pump` meanwhile, if set).
---@class zklock.testing.Net
---@field hosts string `"127.0.0.1:PORT"`: connect clients here.
---@field port integer
---@field target string The server it forwards to.
---@field pid integer The proxy process.
---@field pump? fun(seconds: number) Called while a command waits to be applied.
---@field ports integer[] Every listener's port: `port`, then each of `opts.routes`.
local net = {}

---Append a raw proxy command (see proxy.py) without waiting for it to be applied; `wait_ack` waits.
---Lets several proxies apply their commands together (the ensemble's links do).
---
---Errors: raises on a stopped proxy.
---@param cmd string
---@return integer seq Its sequence number.
function net:post(cmd) end

---Close every connection and refuse new ones: the client notices at once and cannot reconnect.
---@param seconds? number Bound (default `config.net_fault_max`).
---@return true
function net:cut(seconds) end

---Forward nothing either way and close nothing; new connections are accepted and swallowed. The
---client notices only through its own timeouts (two thirds of the session timeout).
---@param seconds? number Bound.
---@return true
function net:blackhole(seconds) end

---Requests still reach the server, replies never come back (the unknown-outcome case).
---@param seconds? number Bound.
---@return true
function net:drop_replies(seconds) end

---Forward as usual until the server pushes a watch notification to a client of this proxy
---(a frame with xid -1), forward that frame, then go silent at once: nothing either way, nothing
---closed (no reset), new connections swallowed, as `blackhole`; unlike `blackhole`, a close by
---the server (when it expires the session) is not passed on either: the client sees its
---connection close only when the fault heals. The silence heals by itself
---`seconds` after the push. The client hears the push and then nothing: it notices only by its
---own timeouts, and the server last heard from it before the push (the loss specs use this).
---`status().push_ms` is when it fired (`zklock.core.now()` milliseconds), `push_silenced` how
---many times; `heal()` disarms.
---
---Errors: raises on `seconds` that is not a positive finite number or `armed` that is not a
---positive number.
---@param seconds number How long the silence lasts.
---@param armed? number How long to wait for a push before disarming (default `config.net_fault_max`).
---@return true
function net:blackhole_after_push(seconds, armed) end

---Forward every byte `ms` milliseconds late, both ways, order kept.
---@param ms number 0..600000.
---@param seconds? number Bound.
---@return true
function net:delay(ms, seconds) end

---Forward every byte towards the client `ms` milliseconds late, order kept; requests reach the
---server at once. The client's link stays up while everything it hears is old: a client whose
---loss clock counts from answers sees its deadline pass on a link the ZooKeeper client still
---counts as up.
---
---Errors: raises on `ms` outside 0..600000 or `seconds` that is not a positive number.
---@param ms number 0..600000.
---@param seconds? number Bound.
---@return true
function net:delay_replies(ms, seconds) end

---Close every connection once; reconnects pass (nothing to heal).
---@return true
function net:reset() end

---End every fault: broken connections are closed (clients reconnect through a clean proxy), no delay.
---@return true
function net:heal() end

---The proxy's counters: `open`, `accepted`, `c2s`, `s2c`, `c2s_dropped`, `s2c_dropped`,
---`dropping`, `new` (`"pass"`, `"refuse"`, `"blackhole"`, `"drop"`), `delay`, `healing`, `applied`,
---`pushes` (watch notifications forwarded), `armed` (1 while `blackhole_after_push` waits),
---`push_silenced` (times it fired), `push_ms` (when it last fired, `zklock.core.now()` ms; -1 before),
---`closes_held` (server closes kept from a client silenced after a push).
---@return table<string, number|string>
function net:status() end

---Whether the proxy process runs.
---@return boolean
function net:alive() end

---Stop the proxy (SIGTERM, then SIGKILL) and remove its directory. Idempotent.
---@return boolean gone
function net:stop() end

---Send a raw proxy command (see lua/zklock/testing/proxy.py) and wait until it is applied.
---@param cmd string
---@param timeout? number Seconds (default 5).
---@param pump? fun(seconds: number)
---@return true
function net:send(cmd, timeout, pump) end

---Have a background shell send `cmd` after `delay` seconds (for when this process blocks).
---@param cmd string
---@param delay number Seconds.
---@return integer seq For `wait_ack`.
function net:send_later(cmd, delay) end

---Wait until the proxy has applied command `seq`.
---@param seq integer
---@param timeout? number Seconds (default 5).
---@param pump? fun(seconds: number)
---@return boolean applied
function net:wait_ack(seq, timeout, pump) end

---A seeded fault schedule from `testing.nemesis`.
---@class zklock.testing.Nemesis
---@field seed number
---@field history table[] Every logged step: `{ t, what, detail, line }`.
local nemesis = {}

---The schedule for a run of `seconds`: `{ { at, fault, target, seconds [, delay_ms] }, ... }`.
---@param seconds number
---@return table[] steps
function nemesis:plan(seconds) end

---Apply the schedule, one fault at a time at its offset, each undone after its duration, every
---step logged with its time; `heal()` at the end, also after an error (which is then raised).
---@param seconds number
---@return table report `{ seed, steps, counts = { fault = n }, faults, log = { line, ... }, summary }`.
function nemesis:run(seconds) end

---Undo every fault still in effect: resume paused servers and workers, restart killed servers,
---heal every proxy, wait for an ensemble's quorum.
---@return true? ok
---@return string? err
function nemesis:heal() end

---A worker process from `testing.worker`.
---@class zklock.testing.Worker
---@field pid integer
---@field out string The file with its output (stdout and stderr).
---@field dir string Its temporary directory.
local worker = {}

---Whether it is still running.
---@return boolean
function worker:alive() end

---Its exit status, once it has exited.
---@return integer? status
function worker:status() end

---Wait until it exits.
---@param timeout? number Seconds (default 60).
---@param pump? fun(seconds: number) Called between looks (default: sleep).
---@return integer? status
---@return string? err `"timeout"`.
function worker:wait(timeout, pump) end

---Its output so far.
---@return string
function worker:output() end

---Send a signal (`"TERM"`, `"USR1"`, ...) if it runs.
---@param sig string
function worker:signal(sig) end

---SIGSTOP (a process pause: a GC pause, a VM stall).
function worker:pause() end

---SIGCONT after `pause()`.
function worker:resume() end

---SIGKILL to it and its children, and wait. Idempotent; its output stays readable.
---@param opts? table `{ keep_dir = false }` also removes its directory.
---@return boolean gone
function worker:stop(opts) end

---A fenced resource from `testing.fenced`.
---@class zklock.testing.Fenced
---@field path string
local fenced = {}

---Write `value` with fencing token `token`.
---@param token number
---@param value? string
---@return true? ok
---@return string? err `"ESTALE: fencing token N is older than M, ..."` or a ZooKeeper error.
---@return string? code `"ESTALE"`, `"EBUSY"` or the ZooKeeper code.
function fenced:write(token, value) end

---The value and the token of the last accepted write (`nil, nil` if none).
---@return string? value
---@return number|string|nil token_or_err
---@return string? code
function fenced:read() end

---`zklock.testing.check`: a history of what processes did and checkers over it. Record format:
---one event a line, tab-separated, one file per process: `<time ms> <process> <event> <key>
---[name=value]...`. The checkers read `acquire`/`release` (`token=`, `seq=`, `mode=read|write`,
---`limit=`, `id=`, `interrupted=1`), `request`, `lead`/`unlead`, `accept`/`reject` (`token=`,
---`zxid=`), `enqueue`/`dequeue` (`item=`), and for `cache`: `cache`, `write`, `session`,
---`fault`/`heal`, `server`, `snapshot` (see `check.cache`). Each checker returns `true, n` (n: what it checked), or
---`nil, message, { first = hold|event, second = hold|event }`: the first violation with both
---events and where they were logged. Their `opts`: `ignore_interrupted` (skip holds whose
---release says `interrupted=1`), `limit` (semaphore), `complete` (queue; default true), `window`
---and `settle` (cache, ms).
---@class zklock.testing.check
---@field CHECKS string[] The checker names.
---@field Recorder table The recorder class.
local check = {}

---A recorder of one process's events: to the file `path` (appended, line-buffered), through an
---open file (its owner flushes and closes it), or only in memory (`rec.events`) when `path` is nil.
---@param path? string|file*
---@param process string|number The process's name in the history.
---@param clock? fun(): number Milliseconds on a clock all processes share (default `zklock.core.now`).
---@return zklock.testing.Recorder
function check.recorder(path, process, clock) end

---A history: the events of files, directories (their `*.log` files), recorders and event lists,
---in time order.
---@param ... string|zklock.testing.Recorder|table
---@return table history `{ events = { { t, p, ev, key, f = { name = value }, src }, ... } }`.
function check.load(...) end

---`h` as a history (`load(h)` unless it is one already).
---@param h any
---@return table history
function check.history(h) end

---One event as text: `"p1 acquire /l at 12.000 ms (token=5) [file:line]"`.
---@param ev table
---@return string
function check.describe(ev) end

---The hold intervals of a history: `{ key, p, start, finish, a, r, token, seq, mode, interrupted, open }`.
---@param h any A history or what `load` takes.
---@param open_ev? string Default `"acquire"`.
---@param close_ev? string Default `"release"`.
---@return table[]
function check.intervals(h, open_ev, close_ev) end

---Holds made from what processes did: per process, key and `token=`, one hold from its first to
---its last `event`; `opts.as = "lead"` makes lead/unlead events (for `leader`).
---@param h any
---@param event string Such as `"write"`.
---@param opts? table `{ as = "acquire"|"lead" }`.
---@return table history
function check.spans(h, event, opts) end

---The events of `h` for which `pred(event)` is true (say, those of one key), as a history.
---@param h any
---@param pred fun(event: table): boolean
---@return table history
function check.filter(h, pred) end

---A history from hold records kept as tables, one acquire/release pair each: `{ key =, owner =,
---start = ms, finish = ms [, token =] [, interrupted = true] [, mode =] }` (owner is the process).
---
---Errors: raises if a hold lacks numeric `start` and `finish`.
---@param list table[]
---@return table history
function check.from_holds(list) end

---Counts over every key's holds instead of the first violation (a soak's summary): `{ holds,
---clean, violations, interrupted_overlaps, token_violations, max_overlap = { [key] = n },
---examples = { text, ... } }`; `opts.limit` holders allowed at once (default 1).
---@param h any
---@param opts? table `{ limit = n }`.
---@return table counts
function check.stats(h, opts) end

---No two holds of one key overlap (touching is fine).
---@param h any
---@param opts? table
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.mutex(h, opts) end

---At most `opts.limit` (or the acquire's `limit=`) holds of a key at once.
---@param h any
---@param opts? table
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.semaphore(h, opts) end

---A `mode=write` hold overlaps no other hold of its key; reads may overlap reads.
---@param h any
---@param opts? table
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.rwlock(h, opts) end

---Per key, fencing tokens strictly rise in grant order.
---@param h any
---@param opts? table
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.tokens(h, opts) end

---A fenced resource never accepted a token below one it accepted before (in `zxid=` order when
---every accept has one, else in time order).
---@param h any
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.fenced(h) end

---Per key, grants in queue order: by the acquire's `seq=`, else by the process's last `request`.
---@param h any
---@param opts? table
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.fifo(h, opts) end

---At most one leader of a key at once (lead / unlead events).
---@param h any
---@param opts? table
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.leader(h, opts) end

---Every dequeued item was enqueued and is dequeued once; every enqueued item is dequeued unless
---`opts.complete == false`.
---@param h any
---@param opts? table
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.queue(h, opts) end

---A cache (`client:cache`) followed a tree that writers changed. Events: `cache <path> what=added|
---updated|removed|initialized czxid= mzxid= value=` (what the cache's handler got, as it got it;
---`check.record_cache` logs them), `write <path> op=set|create|delete value= sent=<ms>
---[unknown=1]` (a writer, after the answer; `unknown=1`: no answer, it only ends the value
---before it), `session - sid=` (the cache's client CONNECTED), `fault -` / `heal -`, `server
---<path> value= czxid= mzxid= snap=N` and `snapshot <root> snap=N` (`check.snapshot`). Checks,
---per cache process: never back in time (per path an update's mzxid rises, a duplicate is a
---violation, add only when absent, update and remove only when present, another czxid only as
---removed+added, a re-add has a higher czxid); after a new session an `initialized` before the
---next snapshot; at every snapshot the nodes its events describe are the server's (path,
---czxid, mzxid, value); a write whose value stayed on the server longer than `opts.window` ms
---(default 1000) appears in the events, unless that time touched a fault (from `fault` to
---`opts.settle` ms, default 5000, after its `heal`).
---@param h any
---@param opts? {window?: number, settle?: number}
---@return true? ok
---@return string|integer|nil msg_or_count
---@return table? pair
function check.cache(h, opts) end

---Set the cache's handler to log each event for `check.cache` (then call `fn` with the event,
---when given). Returns the cache.
---@param rec zklock.testing.Recorder
---@param cache zklock.Cache
---@param fn? fun(cache: zklock.Cache, event: string, path: string, stat?: zklock.Stat, data?: string|false)
---@return zklock.Cache
function check.record_cache(rec, cache, fn) end

---Read the server's tree below `root` through `client` (plain reads) and log a `server` event
---per node, then `snapshot root snap=`. Run it while nothing writes.
---@param rec zklock.testing.Recorder
---@param client zklock.Client
---@param root string
---@param snap integer|string The snapshot's name.
---@return integer|nil nodes
---@return string? msg
function check.snapshot(rec, client, root, snap) end

---Run the named checks (a list or `"mutex,tokens"`) and return the first failure and its name.
---
---Errors: raises on an unknown or empty list of names.
---@param h any
---@param names string|string[]
---@param opts? table
---@return true? ok
---@return string? msg
---@return table? pair
---@return string? name
function check.all(h, names, opts) end

---The command line: `lua -e 'require("zklock.testing.check").main(arg)' /dev/null CHECKS PATH...
---[--limit N] [--ignore-interrupted] [--partial]`: prints `ok: ...` lines or the first violation;
---exit status 0, 1 (a violation) or 2 (usage).
---@param argv string[]
---@param exit? fun(status: integer) Default `os.exit`.
---@param write? fun(...: string) Default `io.write`.
function check.main(argv, exit, write) end

---A recorder from `check.recorder`.
---@class zklock.testing.Recorder
---@field path? string
---@field process string
---@field events table[] Every event it logged.
local recorder = {}

---Log one event; `fields` values true become 1, false and nil are left out.
---@param event string A word.
---@param key any
---@param fields? table<string, any>
---@param t? number Milliseconds (default: its clock).
---@return table event
function recorder:log(event, key, fields, t) end

---`log("acquire", key, fields, t)`.
---@param key any
---@param fields? table<string, any>
---@param t? number
---@return table event
function recorder:acquire(key, fields, t) end

---`log("release", key, fields, t)`.
---@param key any
---@param fields? table<string, any>
---@param t? number
---@return table event
function recorder:release(key, fields, t) end

---Flush the file.
function recorder:flush() end

---Close the file.
function recorder:close() end

return testing
