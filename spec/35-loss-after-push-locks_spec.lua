-- Issue 21, part 1: a holder must learn that its hold is lost before a waiter is granted, also
-- when the last thing it heard was a watch notification the server pushed unasked (the server's
-- session clock runs from what it last received from the client, not from what it sent).
-- Families here: mutex, read-write lock (write side vs a writer; a reader vs a writer). The
-- rounds and their rules (pump order, paused rounds): spec/support/loss.lua.
--   busted --lua=lua5.4 spec/35-loss-after-push-locks_spec.lua
--   ZKLOCK_LOSS_SESSION=10 ZKLOCK_LOSS_ROUNDS=5 busted ... (the closing note's run)
local util = require("support.util")
local fixture = require("support.fixture")
local loss = require("support.loss")

describe("loss after a server push #faults #slow", function()
  local zk, obs, nets = nil, nil, {}
  fixture.server(loss.SERVER, { own = "a 200 ms tick: the server expires sessions within 200 ms of their "
    .. "deadline, so the rounds are strict" }, function(s) zk = s end)
  setup(function() obs = util.connect(zk.hosts, { session_timeout = 10, identity = "setter" }) end)
  teardown(function() for _, n in ipairs(nets) do pcall(n.stop, n) end end)

  for i, name in ipairs({ "mutex", "rwlock_write", "rwlock_read" }) do
    local fam = loss.families[name]
    it(fam.name .. ": the holder learns of the loss before the waiter is granted", function()
      local res = loss.run{ zk = zk, obs = obs, fam_key = name, tag = name, seed = 3500 + i, nets = nets }
      loss.assert_safe(res, fam)
    end)
  end
end)
