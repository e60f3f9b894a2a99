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
---@field container_check_ms? integer `-Dznode.container.checkIntervalMs` (default 100).
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

---Stop all nodes and remove the directory. Idempotent.
---@return true
function ensemble:stop() end

return testing
