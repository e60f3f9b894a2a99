-- spec/support/loss_waiters.lua: the waiters of one batch of loss rounds (spec/support/loss.lua),
-- in a process of their own, so that nothing the holders' process does (a pump that blocks, a
-- scheduler that does not run it) delays a grant being seen. A testing.worker script:
--   args: family, hosts, out file, seconds (how long at most), then one queue path per round
--         as "k=path"
-- Writes to the out file, one line each: "Q k" when its waiter was started, "G k <ms> <rq ms>"
-- when it was granted (zklock.core.now(); rq: how long this process waited for a CPU in the pump
-- iteration that saw the grant and the one before: the grant may have come that much earlier),
-- "E k <message>" on a failure, "END" when done. Stops when every waiter was granted, at the
-- deadline, or when the out file's ".stop" sibling exists.
local zklock = require("zklock")
local core = require("zklock.core")
local loss = require("support.loss")

local fam_name, hosts, out, seconds = ...
local fam = loss.families[fam_name]
assert(fam, "unknown family " .. tostring(fam_name))
local f = assert(io.open(out, "a"))
f:setvbuf("line")
local function say(...) f:write(table.concat({ ... }, " "), "\n") end

local rounds, cur_rq, prev_rq = {}, 0, 0
for i = 5, select("#", ...) do
  local k, path = select(i, ...):match("^(%d+)=(.+)$")
  local r = { k = k, path = path }
  r.c = assert(zklock.connect(hosts, { session_timeout = 10, identity = "waiter-" .. k, log_level = "none" }))
  r.w = fam.contend(r.c, path, {
    granted = function()
      if r.granted then return end
      r.granted = true
      say("G", k, ("%.3f"):format(core.now()), ("%.0f"):format(cur_rq + prev_rq))
    end,
    released = function() end,
  })
  rounds[#rounds + 1] = r
  say("Q", k)
end

local deadline = core.now() + tonumber(seconds) * 1000
local last = loss.run_delay_ms()
local errs = {}
while core.now() < deadline do
  local rq = loss.run_delay_ms()
  prev_rq, cur_rq, last = cur_rq, rq - last, rq
  local left = 0
  for _, r in ipairs(rounds) do
    r.c:process()
    if r.w.err and not errs[r] then errs[r] = true say("E", r.k, (tostring(r.w.err):gsub("%s", "_"))) end
    if not r.granted and not errs[r] then left = left + 1 end
  end
  if left == 0 then break end
  local stop = io.open(out .. ".stop")
  if stop then stop:close() break end
  rounds[1].c:sleep(0.005)
end
-- let the granted waiters release (their coroutines do it right after the grant)
for _ = 1, 20 do
  for _, r in ipairs(rounds) do r.c:process() end
  rounds[1].c:sleep(0.01)
end
for _, r in ipairs(rounds) do
  if r.w.close then pcall(r.w.close) end
  pcall(r.c.close, r.c)
end
say("END")
f:close()
