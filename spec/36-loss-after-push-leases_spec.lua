-- Issue 21, part 1: a holder must learn that its hold is lost before a waiter is granted, also
-- when the last thing it heard was a watch notification the server pushed unasked (the server's
-- session clock runs from what it last received from the client, not from what it sent).
-- Families here: semaphore (lease), zookeeper_lock. The rounds and their rules (pump order,
-- paused rounds): spec/support/loss.lua.
--   busted --lua=lua5.4 spec/36-loss-after-push-leases_spec.lua
--   ZKLOCK_LOSS_SESSION=10 ZKLOCK_LOSS_ROUNDS=5 busted ... (the closing note's run)
require("support.loss").describe_families({ "semaphore", "zookeeper_lock" }, 3600)
