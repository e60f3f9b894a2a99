-- zklock.testing.nemesis: a seeded fault schedule over a run. The schedule is drawn from the
-- seed alone (the same seed and options give the same schedule), then applied one fault at a time
-- at its planned offset; each fault is undone after its duration, every step is logged with its
-- time, and heal() runs at the end whatever happens (an error inside run() still heals first).
--
--   local nem = testing.nemesis{ seed = 42, server = zk, nets = { net1, net2 }, clients = { c1 },
--                                faults = { "pause", "reset", "blackhole", "restart", "expire" } }
--   local report = nem:run(30)          -- blocks for about 30 s (opts.sleep keeps clients going)
--   print(report.summary)               -- seed=42 faults=9 pause=2 reset=3 ...
--
-- Faults (the targets each needs):
--   pause         server, or a random ensemble node: SIGSTOP for the duration, then SIGCONT
--   kill          server / a random ensemble node: SIGKILL, down for the duration, restart
--   restart       server / a random ensemble node: SIGKILL and restart at once
--   kill_leader   ensemble: the leader killed, down for the duration, restarted
--   expire        clients: a random client's session expired at the server
--   cut, blackhole, drop_replies, reset, delay   nets: that fault on a random proxy for the
--                 duration (delay: opts.delay_ms, default 200..1500 ms drawn per step), then heal
--   blackhole_after_push  nets: a random proxy armed for the duration: the first watch
--                 notification the server pushes through it is forwarded, then silence both
--                 ways (no reset) until the step ends (net:blackhole_after_push; the heal line
--                 says whether a push came)
--   pause_worker  workers: a random worker process (testing.worker) stopped for the duration
--   partition     ensemble started with partitions = true: a random minority of its members (the
--                 step's groups, drawn from the seed) cut from the rest for the duration, then
--                 ens:heal() and a wait for the quorum
--   isolate_leader  the same ensemble: the member that leads when the step starts is isolated
--                 for the duration, then healed
-- (A client cut off from the servers is the nets' cut/blackhole.)
-- opts.schedule = { { at = s, fault = name, target = i, seconds = d }, ... } replaces the draw.
local shell = require("zklock.testing.shell")

local M = {}

-- Park-Miller minimal standard generator in doubles (exact: 16807 * 2^31 < 2^53), so the same
-- seed gives the same numbers under every Lua version. r() in [0, 1); r(lo, hi) an integer.
function M.rng(seed)
  if type(seed) ~= "number" or seed ~= seed then
    error("zklock.testing.rng: bad argument #1: expected a number (the seed), got " .. tostring(seed), 2)
  end
  local s = math.floor(seed) % 2147483646 + 1
  for _ = 1, 5 do s = (s * 16807) % 2147483647 end
  return function(lo, hi)
    s = (s * 16807) % 2147483647
    local u = (s - 1) / 2147483646
    if lo then return lo + math.floor(u * (hi - lo + 1)) end
    return u
  end
end

local NEEDS = {
  pause = "servers", kill = "servers", restart = "servers", kill_leader = "ensemble",
  expire = "clients", cut = "nets", blackhole = "nets", drop_replies = "nets",
  reset = "nets", delay = "nets", blackhole_after_push = "nets", pause_worker = "workers",
  partition = "partitions", isolate_leader = "partitions",
}
M.FAULTS = {}
for k in pairs(NEEDS) do M.FAULTS[#M.FAULTS + 1] = k end
table.sort(M.FAULTS)

local Nemesis = {}
Nemesis.__index = Nemesis
M.Nemesis = Nemesis

local function bad(n, what, got)
  error(("zklock.testing.nemesis: bad option %s: expected %s, got %s"):format(n, what, tostring(got)), 3)
end

local function range(name, v, default)
  if v == nil then return default end
  if type(v) == "number" and v >= 0 then return { v, v } end
  if type(v) == "table" and type(v[1]) == "number" and type(v[2]) == "number" and v[1] >= 0 and v[2] >= v[1] then
    return { v[1], v[2] }
  end
  bad(name, "seconds, or { min, max } with 0 <= min <= max", v)
end

-- testing.nemesis(opts) -> nemesis. See the top of this file for opts.
function M.new(opts)
  if type(opts) ~= "table" then bad("table", "an options table", opts) end
  local self = setmetatable({}, Nemesis)
  self.seed = opts.seed
  if type(self.seed) ~= "number" or self.seed ~= self.seed then bad("seed", "a number", opts.seed) end
  self.server, self.ensemble = opts.server, opts.ensemble
  if self.server ~= nil and type(self.server) ~= "table" then bad("server", "a testing.server()", self.server) end
  if self.ensemble ~= nil and type(self.ensemble) ~= "table" then
    bad("ensemble", "a testing.ensemble()", self.ensemble)
  end
  local lists = { nets = opts.nets, clients = opts.clients, workers = opts.workers }
  for _, k in ipairs({ "nets", "clients", "workers" }) do
    if lists[k] ~= nil and type(lists[k]) ~= "table" then bad(k, "a list", lists[k]) end
    self[k] = lists[k] or {}
  end
  self.gap = range("gap", opts.gap, { 2, 5 })
  self.duration = range("duration", opts.duration, { 1, 2 })
  self.delay_ms = range("delay_ms", opts.delay_ms, { 200, 1500 })
  self.quiet = opts.quiet or 2
  if type(self.quiet) ~= "number" or self.quiet < 0 then bad("quiet", "seconds >= 0", opts.quiet) end
  self.sleep = opts.sleep or shell.sleep
  if type(self.sleep) ~= "function" then bad("sleep", "a function(seconds)", opts.sleep) end
  self.clock = opts.clock or shell.now
  self.recorder = opts.recorder
  if opts.log ~= nil and type(opts.log) ~= "function" and type(opts.log) ~= "string" then
    bad("log", "a function(line) or a file path", opts.log)
  end
  self.log_to = opts.log
  self.expire_hosts = opts.expire_hosts
  -- the fault mix: a list of names (equal weights) or { name = weight }
  local mix = {}
  local faults = opts.faults
  if faults == nil and opts.schedule == nil then
    faults = {}
    if self.server or self.ensemble then faults[#faults + 1] = "pause"; faults[#faults + 1] = "restart" end
    if self.ensemble then faults[#faults + 1] = "kill_leader" end
    if self.ensemble and self.ensemble.links then
      faults[#faults + 1] = "partition"; faults[#faults + 1] = "isolate_leader"
    end
    if #self.nets > 0 then faults[#faults + 1] = "reset"; faults[#faults + 1] = "blackhole" end
    if #self.clients > 0 then faults[#faults + 1] = "expire" end
  end
  if faults ~= nil then
    if type(faults) ~= "table" then bad("faults", "a list of fault names or { name = weight }", faults) end
    local names = {}
    if #faults > 0 then
      for _, n in ipairs(faults) do names[#names + 1] = { n, 1 } end
    else
      for n, w in pairs(faults) do names[#names + 1] = { n, w } end
      table.sort(names, function(a, b) return a[1] < b[1] end)
    end
    for _, nw in ipairs(names) do
      local n, w = nw[1], nw[2]
      if not NEEDS[n] then bad("faults", "fault names among " .. table.concat(M.FAULTS, ", "), n) end
      if type(w) ~= "number" or w <= 0 then bad("faults." .. n, "a positive weight", w) end
      if self:_targets(n) == 0 then
        bad("faults", ("targets for %q (it needs %s)"):format(n, NEEDS[n] == "partitions"
          and "an ensemble started with partitions = true" or NEEDS[n]), "none")
      end
      mix[#mix + 1] = { name = n, weight = w }
    end
    if #mix == 0 then bad("faults", "at least one fault", "an empty list") end
  end
  self.mix = mix
  if opts.schedule ~= nil then
    if type(opts.schedule) ~= "table" then bad("schedule", "a list of steps", opts.schedule) end
    for i, st in ipairs(opts.schedule) do
      if type(st) ~= "table" or not NEEDS[st.fault] or type(st.at or 0) ~= "number" then
        bad("schedule[" .. i .. "]", "{ at = s, fault = name [, target = i] [, seconds = d] }", st)
      end
      if self:_targets(st.fault) == 0 then bad("schedule[" .. i .. "]", "a fault with targets", st.fault) end
    end
    self.fixed = opts.schedule
  end
  self.history, self.counts = {}, {}
  self.down = {}                      -- killed or paused servers/workers to bring back in heal()
  return self
end

function Nemesis:_nodes()
  if self.ensemble then return self.ensemble.nodes or {} end
  if self.server then return { self.server } end
  return {}
end

function Nemesis:_targets(fault)
  local need = NEEDS[fault]
  if need == "servers" then return #self:_nodes() end
  if need == "ensemble" then return self.ensemble and #(self.ensemble.nodes or {}) or 0 end
  if need == "partitions" then
    return self.ensemble and self.ensemble.links and #(self.ensemble.nodes or {}) or 0
  end
  return #self[need]
end

-- nem:plan(seconds) -> the schedule for a run of that many seconds: { { at, fault, target,
-- seconds [, delay_ms] }, ... }. A pure function of the seed and the options.
function Nemesis:plan(seconds)
  if type(seconds) ~= "number" or seconds <= 0 then
    error("zklock.testing.nemesis: plan(): bad argument #1: expected a positive number of seconds", 2)
  end
  if self.fixed then
    local out = {}
    for i, st in ipairs(self.fixed) do
      out[i] = { at = st.at or 0, fault = st.fault, target = st.target or 1,
                 seconds = st.seconds or self.duration[1], delay_ms = st.delay_ms, groups = st.groups }
    end
    return out
  end
  local r = M.rng(self.seed)
  local total = 0
  for _, m in ipairs(self.mix) do total = total + m.weight end
  local function between(rg) return rg[1] + r() * (rg[2] - rg[1]) end
  local steps, at = {}, 0
  for _ = 1, 10000 do
    at = at + between(self.gap)
    local pick, acc, fault = r() * total, 0, self.mix[#self.mix].name
    for _, m in ipairs(self.mix) do
      acc = acc + m.weight
      if pick < acc then fault = m.name break end
    end
    local target = r(1, self:_targets(fault))
    local d = between(self.duration)
    local delay_ms = math.floor(between(self.delay_ms) + 0.5)
    if at + d > seconds - self.quiet then break end
    local st = { at = math.floor(at * 1000 + 0.5) / 1000, fault = fault, target = target,
                 seconds = math.floor(d * 1000 + 0.5) / 1000 }
    if fault == "delay" then st.delay_ms = delay_ms end
    if fault == "partition" then
      -- a minority side: the target and up to floor((n - 1) / 2) - 1 more members, drawn here
      -- (only for this fault, so the schedules of the other faults stay as they were)
      local n = self:_targets(fault)
      local size = r(1, math.max(1, math.floor((n - 1) / 2)))
      local pool = {}
      for i = 1, n do if i ~= target then pool[#pool + 1] = i end end
      local side = { target }
      for _ = 2, size do
        local k = r(1, #pool)
        side[#side + 1] = table.remove(pool, k)
      end
      table.sort(side)
      st.groups = { side, pool }
    end
    steps[#steps + 1] = st
    if fault == "restart" or fault == "expire" or fault == "reset" then at = at + 0.5 else at = at + d end
  end
  return steps
end

function Nemesis:_log(t, what, detail)
  local line = ("%8.3f s  %s%s"):format(t, what, detail and ("  " .. detail) or "")
  self.history[#self.history + 1] = { t = t, what = what, detail = detail, line = line }
  local to = self.log_to
  if type(to) == "function" then pcall(to, line)
  elseif type(to) == "string" then pcall(shell._write_file, to, line .. "\n", "a") end
  if self.recorder then pcall(self.recorder.log, self.recorder, "nemesis", what, { detail = detail }) end
end

local function leader_index(ens)
  local i = ens:leader(10)
  return i
end

-- Apply one step; returns the undo function (or nil) and a detail string.
function Nemesis:_apply(st)
  local f = st.fault
  local nodes = self:_nodes()
  if f == "pause" then
    local n = nodes[st.target]
    n:pause()
    self.down[n] = "paused"
    return function() n:resume() self.down[n] = nil end, ("node %d for %.3f s"):format(st.target, st.seconds)
  elseif f == "kill" then
    local n = nodes[st.target]
    n:kill()
    self.down[n] = "killed"
    return function() n:restart() self.down[n] = nil end, ("node %d, down %.3f s"):format(st.target, st.seconds)
  elseif f == "restart" then
    local n = nodes[st.target]
    n:kill()
    self.down[n] = "killed"
    n:restart()
    self.down[n] = nil
    return nil, ("node %d"):format(st.target)
  elseif f == "kill_leader" then
    local i = leader_index(self.ensemble) or st.target
    local n = nodes[i]
    n:kill()
    self.down[n] = "killed"
    return function()
      n:restart()
      self.down[n] = nil
      self.ensemble:wait_quorum(30)
    end, ("leader node %d, down %.3f s"):format(i, st.seconds)
  elseif f == "partition" or f == "isolate_leader" then
    local ens = self.ensemble
    local bound = { seconds = st.seconds + 30 }
    local detail
    if f == "partition" then
      local groups = st.groups or { { st.target } }
      ens:_partition("partition", groups, bound)
      local shown = {}
      for g, group in ipairs(ens.groups or groups) do shown[g] = "{" .. table.concat(group, ",") .. "}" end
      detail = ("%s for %.3f s"):format(table.concat(shown, " | "), st.seconds)
    else
      local i = leader_index(ens) or st.target
      ens:isolate(i, bound)
      detail = ("leader node %d for %.3f s"):format(i, st.seconds)
    end
    self.down[ens] = "partitioned"
    return function()
      ens:heal()
      self.down[ens] = nil
      ens:wait_quorum(30)
    end, detail
  elseif f == "expire" then
    local c = self.clients[st.target]
    local hosts = self.expire_hosts or (self.ensemble or self.server or {}).hosts
    local ok, res, err = pcall(require("zklock.testing.faults").expire, c, hosts)
    return nil, ("client %d: %s"):format(st.target, ok and (res and "expired" or tostring(err)) or tostring(res))
  elseif f == "pause_worker" then
    local w = self.workers[st.target]
    w:pause()
    self.down[w] = "paused"
    return function() w:resume() self.down[w] = nil end, ("worker %d for %.3f s"):format(st.target, st.seconds)
  else -- network faults on a proxy
    local net = self.nets[st.target]
    local bound = st.seconds + 30
    if f == "reset" then
      net:reset()
      return nil, ("net %d"):format(st.target)
    elseif f == "delay" then
      net:delay(st.delay_ms or 500, bound)
    elseif f == "blackhole_after_push" then
      local before = net:status().push_silenced or 0
      net:blackhole_after_push(bound, bound)
      self.down[net] = "faulty"
      return function()
        local fired = (net:status().push_silenced or 0) > before
        net:heal()
        self.down[net] = nil
        return fired and "(a push came: silenced)" or "(no push came)"
      end, ("net %d armed for %.3f s"):format(st.target, st.seconds)
    else
      net[f](net, bound)
    end
    self.down[net] = "faulty"
    return function() net:heal() self.down[net] = nil end, ("net %d for %.3f s%s"):format(st.target, st.seconds,
      f == "delay" and (" (%d ms)"):format(st.delay_ms or 500) or "")
  end
end

-- nem:heal(): undo every fault still in effect (resume paused, restart killed, heal proxies).
function Nemesis:heal()
  local errs = {}
  for obj, state in pairs(self.down) do
    local ok, err
    if state == "paused" then ok, err = pcall(obj.resume, obj)
    elseif state == "killed" then ok, err = pcall(obj.restart, obj)
    else ok, err = pcall(obj.heal, obj) end
    if not ok then errs[#errs + 1] = tostring(err) end
  end
  self.down = {}
  for _, net in ipairs(self.nets) do pcall(net.heal, net) end
  if self.ensemble then pcall(self.ensemble.wait_quorum, self.ensemble, 30) end
  if #errs > 0 then return nil, table.concat(errs, "; ") end
  return true
end

-- nem:run(seconds) -> report { seed, steps (as applied, with t), counts, faults (number), summary,
-- log (the lines) }. Faults run one at a time at their planned offsets (later if the previous one
-- ran over; steps that would then reach into the quiet end are dropped, and logged as a skip);
-- heal() runs at the end, also when a step raises (the error is raised after healing).
function Nemesis:run(seconds)
  local steps = self:plan(seconds)
  local t0 = self.clock()
  local applied = {}
  self:_log(0, "start", ("seed=%s seconds=%s steps=%d"):format(tostring(self.seed), tostring(seconds), #steps))
  local ok, err = pcall(function()
    for _, st in ipairs(steps) do
      local wait = st.at - (self.clock() - t0)
      if wait > 0 then self.sleep(wait) end
      local t = self.clock() - t0
      if t + st.seconds > seconds - self.quiet then
        -- an earlier step ran over (a slow restart): keep the quiet end, drop the rest
        self:_log(t, "skip", ("%d step(s) from %s at %.3f s: the run is late"):format(#steps - #applied,
          st.fault, st.at))
        break
      end
      local undo, detail = self:_apply(st)
      self.counts[st.fault] = (self.counts[st.fault] or 0) + 1
      self:_log(t, st.fault, detail)
      applied[#applied + 1] = { t = t, fault = st.fault, target = st.target, seconds = st.seconds, detail = detail }
      if undo then
        self.sleep(st.seconds)
        local said = undo()
        self:_log(self.clock() - t0, "heal", st.fault .. (type(said) == "string" and (" " .. said) or ""))
      end
    end
    local left = seconds - (self.clock() - t0)
    if left > 0 then self.sleep(left) end
  end)
  local hok, herr = self:heal()
  self:_log(self.clock() - t0, "end", hok and "healed" or ("heal: " .. tostring(herr)))
  if not ok then error(err, 0) end
  local names = {}
  for k in pairs(self.counts) do names[#names + 1] = k end
  table.sort(names)
  local parts = {}
  for _, k in ipairs(names) do parts[#parts + 1] = k .. "=" .. self.counts[k] end
  local lines = {}
  for i, h in ipairs(self.history) do lines[i] = h.line end
  return { seed = self.seed, steps = applied, counts = self.counts, faults = #applied, log = lines,
           summary = ("seed=%s faults=%d %s"):format(tostring(self.seed), #applied, table.concat(parts, " ")) }
end

return M
