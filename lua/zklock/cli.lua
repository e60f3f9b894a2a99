-- zklock.cli: the `zklock` command (bin/zklock), written on the library.
--
--   zklock run PATH [options] -- CMD ARGS...   run CMD while holding the lock at PATH
--   zklock run PATH [options] -c 'shell command'
--   zklock elect PATH [options] -- CMD ARGS...  run CMD only while leader (Curator LeaderSelector)
--   zklock ls PATH                              holders and waiters of the lock(s) at PATH
--   zklock reap PATH [--yes]                    nodes no recipe will ever delete (dry run by default)
--
-- Exit status (docs in docs/cli.md): the child's (128+N when signal N killed it);
-- the conflict code (-E, default 1) when the lock was not taken; 64 usage; 69 no connection or the
-- session ended while waiting; 70 internal error; 71 the child's tree could not be confirmed dead
-- before the lock could no longer be guaranteed; 75 the lock was lost while the child ran; 77 no
-- permission (ACL, auth); 126/127 the command could not be executed / was not found; 128+N when
-- signal N interrupted the wait for the lock.
--
-- M.main(args) -> exit status; never calls os.exit itself (bin/zklock does).
local zklock = require("zklock")
local core = require("zklock.core")

local proc = core.proc
local M = {}

-- parser -> its sub-command parsers by name (for the usage line of a failed parse)
local COMMANDS = setmetatable({}, { __mode = "k" })

M.EXIT = {
  OK = 0, CONFLICT = 1, USAGE = 64, UNAVAILABLE = 69, SOFTWARE = 70, TREE = 71, LOST = 75, NOPERM = 77,
  NOEXEC = 126, NOTFOUND = 127,
}
local EXIT = M.EXIT
local FORWARDED = { "INT", "TERM", "HUP", "QUIT", "USR1", "USR2" }

local function now_s() return core.now() / 1000 end

local function errf(fmt, ...)
  io.stderr:write("zklock: ", fmt:format(...), "\n")
  io.stderr:flush()
end

---------------------------------------------------------------- options

local function number_in(lo, hi, what, integer, opt)
  return function(s)
    local n = tonumber(s)
    if not n or n ~= n or (integer and math.floor(n) ~= n) or n < lo then
      return nil, ("%s: expected %s, got '%s'"):format(opt, what, s)
    end
    if n > hi then -- a number the message would otherwise seem to allow ("> 0, got '1e9'")
      return nil, ("%s: %s is out of range: expected %s, at most %g"):format(opt, s, what, hi)
    end
    return integer and math.floor(n) or n
  end
end

-- Seconds for -w/--timeout: "inf" (or any number too large to wait out, 1e300) means forever,
-- as in the library. -> seconds, math.huge for forever
local FOREVER_S = 1e9
local function seconds_or_forever(opt)
  return function(s)
    local l = s:lower()
    if l == "inf" or l == "+inf" or l == "infinity" or l == "forever" then return math.huge end
    local n = tonumber(s)
    if not n or n ~= n then
      return nil, ("%s: expected a number of seconds >= 0 (inf: forever), got '%s'"):format(opt, s)
    end
    if n < 0 then
      return nil, ("%s: %s is out of range: expected a number of seconds >= 0 (inf: forever)"):format(opt, s)
    end
    return n >= FOREVER_S and math.huge or n
  end
end

-- Options that take a value which may look like a negative number ("-w -1"): joined with it
-- before parsing ("-w-1", "--timeout=-1"), so that the converter, not the parser, judges it.
local VALUE_OPTS = {
  ["-w"] = true, ["--timeout"] = true, ["-E"] = true, ["--conflict-exit-code"] = true,
  ["--kill-grace"] = true, ["--semaphore"] = true, ["--session-timeout"] = true,
  ["--connect-timeout"] = true, ["--min-age"] = true, ["--max-hold"] = true,
}
local function join_negative_values(args)
  local out, i = {}, 1
  while i <= #args do
    local a, v = args[i], args[i + 1]
    if a == "--" then
      for j = i, #args do out[#out + 1] = args[j] end
      break
    end
    if VALUE_OPTS[a] and v and v:match("^%-[%d%.]") then
      out[#out + 1] = a:sub(1, 2) == "--" and (a .. "=" .. v) or (a .. v)
      i = i + 2
    else
      out[#out + 1] = a
      i = i + 1
    end
  end
  return out
end
M.join_negative_values = join_negative_values

-- The options every subcommand takes (see common below): accepted before the subcommand too
-- ("zklock --hosts H ls /x"), by moving them after it before parsing. true: takes a value.
local COMMON_OPTS = {
  ["--hosts"] = true, ["--session-timeout"] = true, ["--connect-timeout"] = true, ["--auth-file"] = true,
  ["--auth-env"] = true, ["-v"] = false, ["--verbose"] = false,
}
local function hoist_common(args)
  local lead, i = {}, 1
  while i <= #args do
    local a = args[i]
    local name = a:match("^(%-%-[%w-]+)=") or a
    local takes = COMMON_OPTS[name]
    -- stop at the subcommand, or at what the parser is to judge (an option missing its value)
    if takes == nil or (takes and name == a and args[i + 1] == nil) then break end
    lead[#lead + 1] = a
    if takes and name == a then
      lead[#lead + 1] = args[i + 1]
      i = i + 1
    end
    i = i + 1
  end
  if #lead == 0 then return args end
  if args[i] == nil then return {} end -- no command: the parser says so
  local out = {}
  if args[i]:sub(1, 1) == "-" then
    -- another option before the command (--help, a typo): the parser judges it, without the
    -- common options ahead of it (they would be reported as unknown first)
    for j = i, #args do out[#out + 1] = args[j] end
    return out
  end
  out[1] = args[i]
  for _, v in ipairs(lead) do out[#out + 1] = v end
  for j = i + 1, #args do out[#out + 1] = args[j] end
  return out
end
M.hoist_common = hoist_common

local function common(cmd)
  cmd:option("--hosts", "ZooKeeper hosts, host:port[,host:port...][/chroot] (default $ZKLOCK_HOSTS, "
    .. "else 127.0.0.1:2181)")
  cmd:option("--session-timeout", "session timeout in seconds (default 10)")
    :convert(number_in(0.001, 1e6, "a number of seconds > 0", false, "--session-timeout"))
  cmd:option("--connect-timeout", "seconds to wait for the first connection (default: the session timeout)")
    :convert(number_in(0.001, 1e6, "a number of seconds > 0", false, "--connect-timeout"))
  cmd:option("--auth-file", "digest credentials user:password from this file (first line)")
  cmd:option("--auth-env", "digest credentials user:password from this environment variable (default: "
    .. "ZKLOCK_AUTH if set)")
  cmd:flag("-v --verbose", "log the library's and the ZooKeeper client's info lines to stderr")
end

local function build_parser()
  local argparse = require("argparse")
  local p = argparse("zklock", "Run commands under ZooKeeper locks (Curator and Kazoo compatible), "
    .. "and inspect or repair lock state.")
  p:command_target("subcommand")
  p:help_max_width(100)
  p:epilog("The common options (--hosts, --session-timeout, --connect-timeout, --auth-file, --auth-env, -v) "
    .. "go before or after the command. Exit status: see `zklock run --help`. Docs: docs/cli.md.")

  local run = p:command("run", "Run a command while holding a lock (mutex, read lock or semaphore lease).")
  run:argument("path", "lock path, e.g. /locks/nightly-backup")
  run:argument("cmd", "command and arguments (after --)"):args("*")
  run:option("-c --command", "run this shell command with /bin/sh -c instead of CMD"):argname("<cmd>")
  run:option("-w --timeout", "give up after this many seconds (fractions allowed; default and inf: wait forever)")
    :argname("<s>")
    :convert(seconds_or_forever("--timeout"))
  run:flag("-n --nonblock", "try once; fail at once if the lock is held")
  run:option("-E --conflict-exit-code", "exit status when the lock was not taken"):argname("<n>")
    :convert(number_in(0, 255, "an integer 0..255", true, "--conflict-exit-code")):default("1")
  run:flag("-s --shared", "take the read side of a read-write lock (Curator InterProcessReadWriteLock)")
  run:flag("-x --exclusive", "take the write side of that read-write lock (excludes -s and -x holders; "
    .. "the default, a mutex, is a recipe of its own)")
  run:option("--semaphore", "take one of N leases (Curator InterProcessSemaphoreV2); all holders must agree on N")
    :convert(number_in(1, 2147483647, "an integer >= 1", true, "--semaphore"))
  run:option("--identity", "data stored in the lock node (default HOST:PID)")
  run:option("--kill-grace", "seconds between SIGTERM and SIGKILL when the lock may be lost (default: 5, "
    .. "or less if the session timeout leaves less; see below)")
    :convert(number_in(0, 1e6, "a number of seconds >= 0", false, "--kill-grace"))
  run:option("--max-hold", "hold at most this many seconds: then SIGTERM the command's tree, SIGKILL it "
    .. "--kill-grace later if it is still there, and release (exit 75)")
    :convert(number_in(0, 1e6, "a number of seconds >= 0", false, "--max-hold"))
  run:flag("--keep-running", "on lock loss, warn but leave the child running (etcdctl's behaviour)")
  run:flag("-q --quiet", "no warnings about the lock's state on stderr")
  common(run)
  run:epilog([[
Exit status: the child's (128+N when signal N killed it); the conflict code (-E, default 1) when
the lock was not taken (-n, -w); 64 bad usage; 69 no connection, or the session ended while
waiting; 70 internal error; 71 the child's process tree could not be confirmed dead before the
lock could no longer be guaranteed; 75 the lock was lost, or could no longer be guaranteed, or was
held for --max-hold, while the child ran (its process tree was stopped); 77 no permission; 126 the
command cannot be executed; 127 not found; 128+N when signal N (INT, TERM, HUP, QUIT, USR1, USR2)
cancelled the wait.
The child gets ZKLOCK_PATH, ZKLOCK_NODE (the lock node) and ZKLOCK_TOKEN (the fencing token).
It runs in a process group of its own under a keeper process; signals sent to zklock go to that
group. Guaranteed: while zklock runs, the child's whole process tree is killed (SIGKILL) before
the server can expire the session, hence before anyone else gets the lock; SIGTERM comes
--kill-grace earlier once the connection is in doubt (SUSPENDED), cut to what the session
leaves (a third of it less a margin); if zklock is killed, even with kill -9, the keeper kills
the tree at once. Not guaranteed: a paused or SIGSTOPped zklock, zklock and its keeper killed
together, a session the server ended while connected: pass $ZKLOCK_TOKEN to what the child
writes (fencing) for those.]])

  local el = p:command("elect", "Run a command only while this process is the leader (Curator LeaderSelector).")
  el:argument("path", "election path, e.g. /elections/report-mailer")
  el:argument("cmd", "command and arguments (after --)"):args("*")
  el:option("-c --command", "run this shell command with /bin/sh -c instead of CMD"):argname("<cmd>")
  el:option("--id", "participant id, the node data Curator's LeaderSelector shows (default HOST:PID)")
    :convert(function(v)
      if v == "" then return nil, "--id: expected a non-empty participant id (default HOST:PID), got ''" end
      return v
    end)
  el:option("-w --timeout", "give up when not elected within this many seconds (default and inf: wait forever)")
    :argname("<s>")
    :convert(seconds_or_forever("--timeout"))
  el:option("-E --conflict-exit-code", "exit status when not elected within --timeout"):argname("<n>")
    :convert(number_in(0, 255, "an integer 0..255", true, "--conflict-exit-code")):default("1")
  el:option("--kill-grace", "seconds between SIGTERM and SIGKILL when leadership may be lost (default as for run)")
    :convert(number_in(0, 1e6, "a number of seconds >= 0", false, "--kill-grace"))
  el:flag("--keep-running", "on loss of leadership, warn but leave the child running")
  el:flag("-q --quiet", "no warnings on stderr")
  common(el)
  el:epilog("Exit status as for run (75: leadership lost while the child ran). The child gets ZKLOCK_PATH, "
    .. "ZKLOCK_ID and ZKLOCK_TOKEN (the fencing token of this term). Its process tree is stopped as for run "
    .. "(see `zklock run --help`): dead before the server can expire the session, and with zklock.")

  local ls = p:command("ls", "List holders and waiters of the mutex, read-write lock, semaphore or latch at PATH.")
  ls:argument("path", "lock path")
  common(ls)

  local reap = p:command("reap", "Find (and with --yes delete) nodes under PATH that no recipe will ever delete.")
  reap:argument("path", "lock path or a parent of many")
  reap:flag("--dry-run", "only list what would be deleted (the default)")
  reap:flag("--yes", "delete them")
  reap:option("--min-age", "leave empty parents younger than this many seconds alone")
    :convert(number_in(0, 1e9, "a number of seconds >= 0", false, "--min-age")):default("60")
  reap:option("--session", "also delete the nodes under PATH owned by this live session (hex, from `zklock ls`)"
    .. ": for leases its process lost track of")
  common(reap)
  COMMANDS[p] = { run = run, elect = el, ls = ls, reap = reap }
  return p
end

---------------------------------------------------------------- connecting

local function read_auth(o, env)
  if o.auth_file then
    local f, err = io.open(o.auth_file, "r")
    if not f then return nil, "cannot read --auth-file: " .. tostring(err) end
    local line = f:read("*l") or ""
    f:close()
    line = line:gsub("%s+$", "")
    if not line:find(":", 1, true) then return nil, "--auth-file: expected user:password on the first line" end
    return line
  end
  local name = o.auth_env or "ZKLOCK_AUTH"
  local v = env(name)
  if v == nil or v == "" then
    if o.auth_env then return nil, "--auth-env: the environment variable " .. name .. " is not set" end
    return false
  end
  if not v:find(":", 1, true) then return nil, name .. ": expected user:password" end
  return v
end

-- -> client | nil, exit status (the message was printed)
local function connect(o, env, identity, on_signal)
  local hosts = o.hosts or env("ZKLOCK_HOSTS") or "127.0.0.1:2181"
  local hosts_from = o.hosts and "--hosts" or env("ZKLOCK_HOSTS") and "$ZKLOCK_HOSTS" or "hosts"
  local auth, aerr = read_auth(o, env)
  if auth == nil then
    errf("%s", aerr)
    return nil, EXIT.USAGE
  end
  local ok, client, msg = pcall(zklock.connect, hosts, {
    session_timeout = o.session_timeout or 10, identity = identity, wait = false,
    log_level = o.verbose and "info" or nil, -- without it only the library's own warnings (stderr)
  })
  if not ok then -- bad hosts string and such: the library raised
    local why = tostring(client):match("%(hosts: (.*)%)$")
    if why then -- name where the string came from, not the library's argument
      errf("%s: %s", hosts_from, why)
    else
      errf("%s", tostring(client):gsub("^.-bad argument", "bad argument"))
    end
    return nil, EXIT.USAGE
  end
  if not client then
    errf("%s", msg)
    return nil, EXIT.UNAVAILABLE
  end
  if auth then client:add_auth("digest", auth) end
  local limit = o.connect_timeout or o.session_timeout or 10
  local deadline = now_s() + limit
  local fds = { client:fd(), on_signal and on_signal.fd or nil }
  while client.state ~= "CONNECTED" do
    if client.state == "AUTH_FAILED" then
      errf("authentication failed at %s", hosts)
      client:close()
      return nil, EXIT.NOPERM
    end
    local left = deadline - now_s()
    if left <= 0 then
      errf("could not connect to %s within %g s", hosts, limit)
      client:close()
      return nil, EXIT.UNAVAILABLE
    end
    local t = client:next_timeout_ms()
    local wait = math.ceil(math.min(left * 1000, t >= 0 and t or 1000, 1000))
    core.poll(fds, wait)
    client:process()
    if on_signal then
      local sig = on_signal.check()
      if sig then
        client:close()
        return nil, 128 + sig
      end
    end
  end
  return client
end

local function exit_of_code(code)
  if code == "ETIMEDOUT" then return nil end -- the caller's conflict code
  if code == "ZNOAUTH" or code == "ZAUTHFAILED" then return EXIT.NOPERM end
  if code == "ESESSION" or code == "ECLOSED" or code == "ELOST" or code == "ZCONNECTIONLOSS"
     or code == "ZSESSIONEXPIRED" or code == "ZOPERATIONTIMEOUT" then
    return EXIT.UNAVAILABLE
  end
  return EXIT.SOFTWARE
end

---------------------------------------------------------------- run

-- The command to run: -c 'shell command' or CMD ARGS... -> argv | nil (message printed)
local function command_argv(o, name)
  if o.command then
    if #o.cmd > 0 then
      errf("%s: give either -c 'shell command' or -- CMD ARGS..., not both", name)
      return nil
    end
    return { "/bin/sh", "-c", o.command }
  end
  if #o.cmd == 0 then
    errf("%s: no command: give -- CMD ARGS... or -c 'shell command'", name)
    return nil
  end
  return o.cmd
end

-- Catch the forwarded signals (and SIGCHLD) on a self-pipe; connect while watching it.
-- -> session { client, sigfd, pending, read_sigs, pump, finish } | nil, exit status
local function open_session(o, env, identity)
  proc.keep_fds() -- what the child inherits: the fds open now, nothing zklock opens later
  local sigfd = assert(proc.signals(FORWARDED))
  local S = { sigfd = sigfd, pending = {} }
  function S.read_sigs()
    for _, sg in ipairs(proc.read_signals()) do
      if sg.name ~= "CHLD" then S.pending[#S.pending + 1] = sg end
    end
  end
  local client, status = connect(o, env, identity, {
    fd = sigfd,
    check = function()
      S.read_sigs()
      local sg = table.remove(S.pending, 1)
      return sg and sg.sig
    end,
  })
  if not client then
    proc.restore()
    return nil, status
  end
  S.client = client
  local fds = { client:fd(), sigfd }
  S.fds = fds
  function S.pump(max_ms)
    local t = client:next_timeout_ms()
    local wait = max_ms
    if t >= 0 and t < wait then wait = t end
    if wait > 0 then core.poll(fds, math.ceil(wait)) end
    client:process()
    S.read_sigs()
  end
  -- the end: let the holding coroutine give the lock back (a deleted node, not a session
  -- timeout, frees it), close the session (a queued node goes with it), default dispositions
  function S.finish(code, before)
    if before then before() end
    if client.state ~= "CLOSED" then
      pcall(client.run, client, 5)
      client:close()
    end
    proc.restore()
    return code
  end
  -- testing aid (spec/65-cli_spec.lua, zklock.testing's session expiry): the session id and
  -- password, hex, in the file ZKLOCK_SESSION_FILE names
  local sfile = env("ZKLOCK_SESSION_FILE")
  if sfile and sfile ~= "" then
    local sid, pw = client:session()
    local f = sid and io.open(sfile .. ".tmp", "w")
    if f then
      f:write(sid, " ", (pw:gsub(".", function(ch) return ("%02x"):format(ch:byte()) end)), "\n")
      f:close()
      os.rename(sfile .. ".tmp", sfile)
    end
  end
  return S
end

-- The kill schedule, planned backwards from the moment the core declares LOST (a margin before the
-- earliest moment the server can expire the session, so before anyone else can be granted):
--   SIGKILL to the whole tree at that moment, less KILL_EARLY;
--   SIGTERM `grace` seconds before it, but only once ownership is uncertain (SUSPENDED): at
--   max(SUSPENDED, LOST - grace); a RECONNECTED before that cancels it.
-- On a silent network SUSPENDED comes after 2T/3 without an answer and LOST at T - margin, so
-- only T/3 - margin may be left for the grace (`grace_window`).
local KILL_EARLY = 0.05 -- s: SIGKILL this much before LOST (a poll that wakes late stays early)
local function loss_margin(T) return math.min(T / 10, 1) end
local function grace_window(T) return math.max(0, T / 3 - loss_margin(T) - KILL_EARLY) end
M.grace_window = grace_window

-- Seconds until the core declares LOST if the server answers nothing more (nil: no session).
-- Without client:loss_deadline (an older core): while SUSPENDED, counted from the moment it was
-- seen as on a silent network (the shortest case); while connected, no deadline yet.
local function seconds_to_lost(client, st)
  if client.loss_deadline then
    local ok, left = pcall(client.loss_deadline, client)
    if ok then return left end
    return nil -- closed
  end
  if client.state == "SUSPENDED" then
    local T = client:session_timeout()
    return (st.suspended_at or now_s()) + T / 3 - loss_margin(T) - now_s()
  end
  if client.state == "CONNECTED" then return math.huge end
  return nil
end

-- The --kill-grace in effect: the default 5 s shortened silently to what the session leaves; a
-- configured one that cannot fit is shortened with one warning.
local function effective_grace(o, client)
  local window = grace_window(client:session_timeout())
  if not o.kill_grace then return math.min(5, window) end
  if o.kill_grace > window and not o.keep_running then
    errf("warning: --kill-grace %g does not fit a %g s session: on a silent network only %.3g s "
      .. "pass between SUSPENDED and the moment the child must be dead; SIGTERM may come that "
      .. "little before SIGKILL", o.kill_grace, client:session_timeout(), window)
  end
  return o.kill_grace
end

-- Run argv while holding, its whole process tree under a keeper (core.proc's tree); forward
-- signals; on possible loss stop it on the schedule above.
--   is_lost() -> true once the hold is gone. -> exit status (before S.finish)
local function supervise(S, o, argv, childenv, what, is_lost, warn)
  local client = S.client
  local grace = effective_grace(o, client)
  local tty = proc.foreground_tty()
  -- should the keeper itself be killed, the tree is re-parented here, not to init
  proc.subreaper()
  local keeper, pid, ctl, stfd = proc.tree(argv, childenv, tty)
  if not keeper then
    errf("%s", pid)
    return ctl == 2 and EXIT.NOTFOUND or EXIT.NOEXEC
  end
  S.fds[#S.fds + 1] = stfd
  local st = {}
  client:on_session(function(state)
    if state == "SUSPENDED" then st.suspended_at = st.suspended_at or now_s()
    elseif state == "CONNECTED" then st.suspended_at = nil end
  end)
  local how, value, termed, killed, lost_seen, kdone, kval
  -- --max-hold: SIGTERM to the tree when it passes, SIGKILL of the tree `grace` later; the
  -- release comes after the tree is gone (the caller releases once this returns)
  local max_hold_at = o.max_hold and (o.held_at or now_s()) + o.max_hold
  local mh_term_at
  while true do
    if not how then how, value = proc.tree_status(stfd) end
    kdone, kval = proc.wait(keeper)
    if kdone or kval then break end -- the keeper exits once nothing of the tree is left
    for _, sg in ipairs(S.pending) do
      -- with the child's group in the terminal's foreground a signal the kernel sent (^C, a
      -- hangup) reached that group already; anything else is passed on to the group
      if sg.user or not tty then proc.tree_send(ctl, sg.sig) end
    end
    S.pending = {}
    local next_at = math.huge
    if not killed and not how then
      local lost = is_lost()
      if lost and not lost_seen then
        lost_seen = true
        if o.keep_running then
          warn("warning: %s was lost (the session ended); the command keeps running (--keep-running)", what)
        end
      end
      if not o.keep_running then
        local left = not lost and seconds_to_lost(client, st) or nil
        local t = now_s()
        if left == nil or left <= KILL_EARLY then
          errf("%s %s; sending SIGKILL to the command's process tree (pid %d)", what,
               lost and "was lost" or "can no longer be guaranteed", pid)
          proc.tree_send(ctl, "KILL_TREE")
          killed, lost_seen = true, true
        else
          local kill_at = t + left - KILL_EARLY
          next_at = kill_at
          if client.state == "SUSPENDED" and not termed then
            local term_at = kill_at - grace
            if t >= term_at then
              errf("%s may be lost (no answer from ZooKeeper); sending SIGTERM to the command "
                .. "(pid %d): SIGKILL in %.3g s unless ZooKeeper answers", what, pid, kill_at - t)
              proc.tree_send(ctl, "TERM")
              termed, lost_seen = true, true
            else
              next_at = term_at
            end
          end
        end
      end
    end
    if max_hold_at and not killed then
      local t = now_s()
      if not mh_term_at and t >= max_hold_at then
        errf("%s held for --max-hold %g s; sending SIGTERM to the command's process tree (pid %d): "
          .. "SIGKILL in %.3g s if it is still there", what, o.max_hold, pid, grace)
        proc.tree_send(ctl, "TERM")
        mh_term_at, lost_seen = t, true
      elseif mh_term_at and t >= mh_term_at + grace then
        errf("%s: the command's process tree outlived --kill-grace after --max-hold; sending SIGKILL (pid %d)",
             what, pid)
        proc.tree_send(ctl, "KILL_TREE")
        killed = true
      end
      if not killed then next_at = math.min(next_at, mh_term_at and mh_term_at + grace or max_hold_at) end
    end
    local max_ms = 250 -- a lost SIGCHLD record (full pipe) costs at most this long
    if next_at < math.huge then max_ms = math.max(0, math.min(max_ms, (next_at - now_s()) * 1000)) end
    S.pump(max_ms)
  end
  if not how then how, value = proc.tree_status(stfd) end
  table.remove(S.fds)
  proc.close(ctl)
  proc.close(stfd)
  if tty then proc.take_tty(tty) end
  if not (kdone == "exited" and kval == 0) then
    -- the keeper exits 0 only once nothing of the tree is left. Anything else (it was killed,
    -- before or after the command exited, while a leftover such as a setsid'd daemon still ran):
    -- the tree was re-parented here (zklock is a subreaper too); kill and reap it the way the
    -- keeper would have, while the lock is still ours, and give the lock back only once nothing
    -- of it is left. No group is signalled: the command may be reaped and its pid reused.
    errf("the keeper of the command's process tree ended unexpectedly (%s %s); killing the tree",
         tostring(kdone), tostring(kval))
    local dead = false
    while true do
      proc.reap()
      if proc.kill_tree() == 0 then dead = true break end
      local left = not is_lost() and seconds_to_lost(client, st) or nil
      if left == nil or left <= KILL_EARLY then break end
      S.pump(10)
    end
    if not dead then
      errf("the command's process tree could not be confirmed dead (a process in uninterruptible "
        .. "sleep?) before %s could no longer be guaranteed", what)
      return EXIT.TREE
    end
    if not how then return EXIT.SOFTWARE end
  end
  if mh_term_at or (lost_seen and not o.keep_running) then return EXIT.LOST end
  return how == "exited" and value or 128 + value
end

local function hostname() return core.hostname() end -- the one source (zkl_host_name)

local function check_path_arg(name, path)
  local why = core.path_error(path)
  if why then
    errf("%s: PATH: %s", name, why)
    return false
  end
  return true
end

local function run(o, env)
  local argv = command_argv(o, "run")
  if not argv then return EXIT.USAGE end
  if (o.shared or o.exclusive) and o.semaphore then
    errf("run: --%s and --semaphore cannot be combined (a read-write lock is not a semaphore)",
         o.shared and "shared" or "exclusive")
    return EXIT.USAGE
  end
  if o.shared and o.exclusive then
    errf("run: --shared and --exclusive cannot be combined")
    return EXIT.USAGE
  end
  local path = o.path
  if not check_path_arg("run", path) then return EXIT.USAGE end
  local quiet = o.quiet
  local function warn(fmt, ...) if not quiet then errf(fmt, ...) end end

  local S, status = open_session(o, env, o.identity or (hostname() .. ":" .. proc.getpid()))
  if not S then return status end
  local client = S.client

  local lockobj, kind
  if o.semaphore then
    lockobj, kind = client:semaphore(path, o.semaphore), "semaphore"
  elseif o.shared then
    lockobj, kind = client:rwlock(path).read, "read lock"
  elseif o.exclusive then
    lockobj, kind = client:rwlock(path).write, "write lock"
  else
    lockobj, kind = client:mutex(path), "mutex"
  end
  local what = ("the %s %s"):format(kind, path)
  local lost = false
  lockobj:on_lost(function(state)
    if state == "SUSPENDED" then
      warn("warning: connection to ZooKeeper lost; %s may no longer be held", what)
    elseif state == "RECONNECTED" then
      warn("reconnected; %s is still held", what)
    elseif state == "LOST" then
      lost = true
    end
  end)

  local timeout = o.nonblock and 0 or o.timeout
  if timeout == math.huge then timeout = nil end
  local result, held_node, held_token
  local want_release = false
  client:spawn(function() -- holds belong to coroutines: this one takes, keeps and gives back
    local ok, msg, code = lockobj:acquire(timeout)
    result = { ok = ok, msg = msg, code = code }
    if not ok then return end
    held_node, held_token, o.held_at = ok:node(), ok:token(), now_s()
    while not want_release do client:sleep(0.05) end -- the release waits at most this long
    pcall(ok.release, ok) -- after a loss: ELOST, and the hold is forgotten
  end)
  local function release() want_release = true end

  -- waiting for the lock: a signal cancels the wait (the queue node goes with the session)
  while not result do
    S.pump(1000)
    local sg = table.remove(S.pending, 1)
    if sg then
      lockobj:cancel()
      warn("SIG%s while waiting for %s; gave up", sg.name, what)
      return S.finish(128 + sg.sig, release)
    end
  end
  if not result.ok then
    local code = exit_of_code(result.code)
    if not code then
      warn("%s is held by another process (%s)", what,
           timeout == 0 and "tried once" or ("waited %g s"):format(timeout))
      return S.finish(o.conflict_exit_code, release)
    end
    errf("%s", tostring(result.msg))
    return S.finish(code, release)
  end
  local rc = supervise(S, o, argv, {
    ZKLOCK_PATH = path, ZKLOCK_NODE = held_node or "",
    ZKLOCK_TOKEN = held_token and ("%d"):format(held_token) or "",
  }, what, function() return lost end, warn)
  return S.finish(rc, release)
end

---------------------------------------------------------------- elect

-- zklock elect PATH -- CMD: join the election (Curator LeaderSelector's protocol: a mutex whose
-- node data is the participant id); run CMD once leader; give leadership back when it exits.
local function elect(o, env)
  local argv = command_argv(o, "elect")
  if not argv then return EXIT.USAGE end
  local path = o.path
  if not check_path_arg("elect", path) then return EXIT.USAGE end
  local quiet = o.quiet
  local function warn(fmt, ...) if not quiet then errf(fmt, ...) end end
  local id = o.id or (hostname() .. ":" .. proc.getpid())
  local S, status = open_session(o, env, id)
  if not S then return status end
  local client = S.client
  local what = "leadership of " .. path
  local st = { leading = false, ended = false, done = false }
  local leader = client:leader(path, function(L)
    st.token, st.leading = L:token(), true
    while not st.done and L:sleep(0.2) do end
    st.leading, st.ended = false, true
  end, { id = id })
  leader:on_lost(function(state)
    if state == "SUSPENDED" then
      warn("warning: connection to ZooKeeper lost; %s may be gone", what)
    elseif state == "RECONNECTED" then
      warn("reconnected; %s is kept", what)
    end
  end)
  local timeout = o.timeout ~= math.huge and o.timeout or nil
  local deadline = timeout and now_s() + timeout
  local function stop() st.done = true; leader:close() end
  while not st.leading do
    S.pump(deadline and math.max(0, math.min(1000, (deadline - now_s()) * 1000)) or 1000)
    local sg = table.remove(S.pending, 1)
    if sg then
      warn("SIG%s while waiting for %s; gave up", sg.name, what)
      return S.finish(128 + sg.sig, stop)
    end
    if st.leading then break end
    if client.state == "CLOSED" then
      errf("the session was closed while waiting for %s", what)
      return S.finish(EXIT.UNAVAILABLE, stop)
    end
    if deadline and now_s() >= deadline then
      warn("not elected within %g s (leader: %s)", timeout, tostring(leader:leader()))
      return S.finish(o.conflict_exit_code, stop)
    end
  end
  local rc = supervise(S, o, argv, {
    ZKLOCK_PATH = path, ZKLOCK_ID = id, ZKLOCK_TOKEN = st.token and ("%d"):format(st.token) or "",
  }, what, function() return st.ended end, warn)
  return S.finish(rc, stop)
end

---------------------------------------------------------------- ls

-- The contender kinds, by node name: pattern (sequence captured), kind, flavour.
local NAMES = {
  { "__READ__(%d+)$", "read", "curator" },
  { "__WRIT__(%d+)$", "write", "curator" },
  { "%-latch%-(%d+)$", "latch", "curator" },
  { "%-lease%-(%d+)$", "lease", "curator" },
  { "lock%-(%d+)$", "mutex", "curator" },
  { "__lock__(%-?%d+)$", "lock", "kazoo" },
  { "__rlock__(%-?%d+)$", "rlock", "kazoo" },
}
M.NAMES = NAMES

local function classify(name)
  for _, n in ipairs(NAMES) do
    local seq = name:match(n[1])
    if seq then return n[2], n[3], tonumber(seq) end
  end
  return nil
end
M.classify = classify

local function node_info(client, full)
  local data, st = client:get(full)
  if not data then return nil end
  return { path = full, name = full:match("[^/]+$"), data = data, stat = st }
end

local function age(st)
  if not st or not st.ctime or st.ctime == 0 then return "?" end
  local s = os.time() - st.ctime / 1000
  if s < 0 then s = 0 end
  if s < 120 then return ("%.0fs"):format(s) end
  if s < 7200 then return ("%.0fm"):format(s / 60) end
  if s < 172800 then return ("%.1fh"):format(s / 3600) end
  return ("%.1fd"):format(s / 86400)
end

local function printable(s)
  s = (s or ""):gsub("[%c\128-\255]", "?")
  if #s > 60 then s = s:sub(1, 57) .. "..." end
  return s == "" and "-" or s
end

-- Contenders of one queue directory, sorted by sequence, with the role each has.
local function queue(client, dir)
  local names, msg, code = client:children(dir)
  if not names then return nil, msg, code end
  local items = {}
  for _, name in ipairs(names) do
    local kind, flavour, seq = classify(name)
    local info = node_info(client, dir .. "/" .. name)
    if info then
      info.kind, info.flavour, info.seq = kind or "other", flavour or "-", seq
      items[#items + 1] = info
    end
  end
  table.sort(items, function(a, b)
    if a.seq and b.seq and a.seq ~= b.seq then return a.seq < b.seq end
    if (a.seq ~= nil) ~= (b.seq ~= nil) then return a.seq ~= nil end
    return a.name < b.name
  end)
  -- roles: Curator's rules for mutex/rwlock/latch, Kazoo's for its lock and read lock
  local writer_before, kwriter_before, first_any = false, false, nil
  for _, it in ipairs(items) do
    local k = it.kind
    if k == "write" or k == "mutex" then
      it.role = (first_any == nil) and "holder" or "waiter"
      writer_before = true
    elseif k == "read" then
      it.role = writer_before and "waiter" or "holder"
    elseif k == "latch" then
      it.role = (first_any == nil) and "leader" or "waiter"
    elseif k == "lock" then
      it.role = (first_any == nil) and "holder" or "waiter"
      kwriter_before = true
    elseif k == "rlock" then
      it.role = kwriter_before and "waiter" or "holder"
    elseif k == "lease" then
      it.role = "holder"
    else
      it.role = "-"
    end
    if it.seq and first_any == nil then first_any = it end
  end
  return items
end

local function session_of(st)
  local o = st.ephemeral_owner
  if not o or o == "0000000000000000" then return "persistent" end
  return "0x" .. o:gsub("^0+", "")
end

local PERSISTENT_OWNER = "0000000000000000"

local function print_rows(out, rows)
  local header = { "ROLE", "KIND", "SEQ", "TOKEN", "SESSION", "AGE", "IDENTITY", "NODE" }
  local lines = { header }
  for _, it in ipairs(rows) do
    local st = it.stat or {}
    lines[#lines + 1] = {
      it.role or "-", (it.flavour and it.flavour ~= "-" and (it.flavour .. " ") or "") .. (it.kind or "-"),
      it.seq and tostring(it.seq) or "-", st.czxid and ("%d"):format(st.czxid) or "-",
      session_of(st),
      age(st), printable(it.data), it.path,
    }
  end
  local widths = {}
  for _, l in ipairs(lines) do
    for i, v in ipairs(l) do widths[i] = math.max(widths[i] or 0, #v) end
  end
  for _, l in ipairs(lines) do
    local parts = {}
    for i, v in ipairs(l) do
      parts[i] = i < #l and (v .. string.rep(" ", widths[i] - #v)) or v
    end
    out:write(table.concat(parts, "  "), "\n")
  end
end

local function ls(o, env, out)
  local path = o.path
  local why = core.path_error(path)
  if why then
    errf("ls: PATH: %s", why)
    return EXIT.USAGE
  end
  local client, status = connect(o, env, nil, nil)
  if not client then return status end
  local function done(code) client:close(); return code end
  local st, msg, code = client:exists(path)
  if st == false then
    errf("ls: %s: no such node", path)
    return done(1)
  elseif not st then
    errf("ls: %s", msg)
    return done(exit_of_code(code) or EXIT.UNAVAILABLE)
  end
  local names = client:children(path) or {}
  local has = {}
  for _, n in ipairs(names) do has[n] = true end
  local rows, layout = {}, "no lock nodes"
  if has.leases or has.locks then
    -- Curator InterProcessSemaphoreV2 / zklock semaphore: leases are held, the internal mutex's
    -- queue under locks/ are the waiters (its head is the one waiting for a free lease)
    layout = "semaphore (Curator InterProcessSemaphoreV2 layout: locks/ + leases/)"
    local q = has.locks and queue(client, path .. "/locks") or {}
    -- the head of locks/ holds the internal lock while it makes its lease node and waits for
    -- the count to fall to the limit: a lease its session made after that lock node (a later
    -- czxid; the leases it holds already are older) is still waiting. The limit itself is known
    -- only to the clients.
    local hst = q[1] and q[1].stat
    local head = hst and hst.ephemeral_owner ~= PERSISTENT_OWNER and hst or nil
    if has.leases then
      local leases = queue(client, path .. "/leases") or {}
      for _, it in ipairs(leases) do
        local lst = it.stat
        local waiting = head and lst and lst.ephemeral_owner == head.ephemeral_owner
          and (lst.czxid or 0) > (head.czxid or 0)
        it.role = waiting and "waiter" or "holder"
        it.kind = "lease"
        rows[#rows + 1] = it
      end
    end
    if has.locks then
      for i, it in ipairs(q) do
        it.role = i == 1 and "next" or "waiter"
        it.kind = "lease wait"
        rows[#rows + 1] = it
      end
    end
  else
    local data = client:get(path)
    local kazoo_sem = tonumber(data or "") ~= nil and #names > 0
    for _, n in ipairs(names) do
      if classify(n) or not n:match("^%x+$") or #n ~= 32 then kazoo_sem = false end
    end
    if kazoo_sem then
      layout = ("semaphore (Kazoo layout: leases as children, max %s, lock at %s-__lock__)"):format(data, path)
      for _, n in ipairs(names) do
        local it = node_info(client, path .. "/" .. n)
        if it then it.role, it.kind, it.flavour = "holder", "lease", "kazoo"; rows[#rows + 1] = it end
      end
      local q = queue(client, path .. "-__lock__") or {}
      for i, it in ipairs(q) do
        it.role = i == 1 and "next" or "waiter"
        it.kind = "lease wait"
        rows[#rows + 1] = it
      end
    else
      rows = queue(client, path) or {}
      local kinds = {}
      for _, it in ipairs(rows) do kinds[it.kind] = true end
      if kinds.read or kinds.write then layout = "read-write lock (Curator InterProcessReadWriteLock)"
      elseif kinds.latch then layout = "leader latch (Curator LeaderLatch)"
      elseif kinds.lock or kinds.rlock then layout = "lock (Kazoo Lock / ReadLock / WriteLock)"
      elseif kinds.mutex then layout = "mutex (Curator InterProcessMutex; LeaderSelector elections too)"
      end
    end
  end
  out:write(path, ": ", layout, "\n")
  if #rows > 0 then print_rows(out, rows) end
  return done(0)
end

---------------------------------------------------------------- reap

local INTERNAL = { locks = true, leases = true }
local PERSISTENT = "0000000000000000" -- the ephemeralOwner of persistent nodes and containers

-- Walk `root` (bounded) and collect { path, version, reason } for nodes no recipe will delete.
local function find_orphans(client, root, o)
  local found, seen = {}, 0
  local min_age_ms = (o.min_age or 60) * 1000
  local session = o.session and o.session:lower():gsub("^0x", "")
  local function walk(path, depth)
    seen = seen + 1
    if seen > 100000 or depth > 32 then return end
    local data, st = client:get(path)
    if not data then return end
    local names = client:children(path) or {}
    for _, n in ipairs(names) do
      walk((path == "/" and "" or path) .. "/" .. n, depth + 1)
    end
    local name = path:match("[^/]+$") or ""
    local owner = st.ephemeral_owner or PERSISTENT
    local persistent = owner == PERSISTENT -- a container's stat says 0 too
    local old = min_age_ms <= 0 or (st.ctime and st.ctime > 0 and (os.time() * 1000 - st.ctime) >= min_age_ms)
    local kind = classify(name)
    local empty = #names == 0 and st.num_children == 0
    local function add(reason) found[#found + 1] = { path = path, version = st.version, reason = reason } end
    if session and not persistent and owner:gsub("^0+", "") == session:gsub("^0+", "") then
      add("owned by session 0x" .. session:gsub("^0+", "") .. " (named with --session)")
    elseif kind and persistent and empty then
      add(("persistent %s node: no session owns it, so nothing ever deletes it and every later "
        .. "contender queues behind it"):format(kind))
    elseif persistent and empty and not kind and data == "" and old and path ~= root then
      if st.cversion == 0 then
        add("empty lock parent that never had a child (not even a container is reaped then)")
      else
        add(("empty %s left behind (no recipe deletes its parents)"):format(
          INTERNAL[name] and ("semaphore parent " .. name .. "/")
          or name:match("%-__lock__$") and "Kazoo semaphore lock parent" or "lock parent"))
      end
    end
  end
  walk(root, 0)
  return found
end
M.find_orphans = find_orphans

local function reap(o, env, out)
  local path = o.path
  local why = core.path_error(path)
  if why then
    errf("reap: PATH: %s", why)
    return EXIT.USAGE
  end
  if o.yes and o.dry_run then
    errf("reap: --yes and --dry-run contradict each other")
    return EXIT.USAGE
  end
  if o.session and not o.session:lower():match("^0?x?%x+$") then
    errf("reap: --session: expected a session id in hex (as `zklock ls` shows it), got '%s'", o.session)
    return EXIT.USAGE
  end
  local client, status = connect(o, env, nil, nil)
  if not client then return status end
  local st = client:exists(path)
  if not st then
    errf("reap: %s: no such node", path)
    client:close()
    return 1
  end
  local found = find_orphans(client, path, o)
  local failed = 0
  for _, f in ipairs(found) do
    if o.yes then
      local ok, msg, code = client:delete(f.path, f.version)
      if ok or code == "ZNONODE" then -- gone already: the server reaped the container meanwhile
        out:write("deleted ", f.path, "  (", f.reason, ")\n")
      else
        failed = failed + 1
        out:write("kept ", f.path, ": ", tostring(msg), "\n")
      end
    else
      out:write("would delete ", f.path, "  (", f.reason, ")\n")
    end
  end
  if #found == 0 then out:write("nothing to reap under ", path, "\n")
  elseif not o.yes then out:write(#found, " node(s); run again with --yes to delete them\n") end
  client:close()
  return failed == 0 and 0 or 1
end

---------------------------------------------------------------- main

-- M.main(args [, env [, out]]) -> exit status. env(name) -> value (default os.getenv).
function M.main(args, env, out)
  env = env or os.getenv
  out = out or io.stdout
  local parser = build_parser()
  args = hoist_common(join_negative_values(args))
  local ok, o = parser:pparse(args)
  if not ok then
    local sub = COMMANDS[parser] and COMMANDS[parser][args[1]]
    io.stderr:write((sub or parser):get_usage(), "\n\nzklock: error: ", tostring(o), "\n")
    return EXIT.USAGE
  end
  local cmds = { run = run, elect = elect, ls = ls, reap = reap }
  local fn = cmds[o.subcommand]
  local okc, res = xpcall(fn, debug.traceback, o, env, out)
  if not okc then
    errf("internal error: %s", tostring(res))
    pcall(proc.restore)
    return EXIT.SOFTWARE
  end
  out:flush()
  return res
end

return M
