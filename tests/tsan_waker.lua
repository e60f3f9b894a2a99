-- tests/tsan_waker.lua: core.waker's thread (csrc/lua/l_waker.c, the OpenResty pump's wake-up)
-- next to the Lua thread that drives the client it watches and kicks it, for a ThreadSanitizer
-- build of the module. The waker's reader (the role nginx's pump plays) is a python3 child with
-- LD_PRELOAD unset, so only this process runs under TSan; the server comes from outside:
--   lua5.4 tests/with_zk.lua env LD_PRELOAD=$(gcc -print-file-name=libtsan.so) \
--     TSAN_OPTIONS=halt_on_error=1:exitcode=66 lua5.4 tests/tsan_waker.lua build-tsan
-- Exits 0 after "ok"; a data race makes TSan end the process with status 66.
local build = arg[1] or "build-tsan"
package.cpath = build .. "/?.so;" .. package.cpath
local core = require("zklock.core")
local hosts = assert(os.getenv("ZK_HOSTS"), "ZK_HOSTS not set (run under tests/with_zk.lua)")

local WAITS = 1500
local pid = core.proc.getpid()

-- a waker nobody connects to: started and stopped in its accept phase
local idle = assert(core.waker(0, ("/tmp/zklock-tsan-waker-%d-idle.sock"):format(pid)))
idle:kick()
idle:close()

local c = assert(core.new(hosts, 4000, "tsan-waker", 0, false))
local path = ("/tmp/zklock-tsan-waker-%d.sock"):format(pid)
local w = assert(core.waker(c:fd(), path))

-- the reader: WAITS waits of 0-4 ms each; prints how each ended
local reader = [[
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
counts = {}
for i in range(int(sys.argv[2])):
    s.sendall(b"%d\n" % (i % 5))
    b = s.recv(1).decode()
    if not b:
        sys.exit("waker closed the connection")
    counts[b] = counts.get(b, 0) + 1
print(" ".join("%s=%d" % kv for kv in sorted(counts.items())))
]]
local script, result = path .. ".py", path .. ".out"
local f = assert(io.open(script, "w"))
f:write(reader)
f:close()
-- fork + exec from this process (no shell: a shell under the preloaded libtsan crashes); an
-- empty LD_PRELOAD keeps TSan out of python
local child = assert(core.proc.spawn({ "sh", "-c", 'exec python3 "$0" "$1" "$2" >"$3"', script, path,
  tostring(WAITS), result }, { LD_PRELOAD = "" }))

-- meanwhile drive the client (consuming the fd's readiness) and kick the waker now and then,
-- until the reader is done (at most 60 s)
local t_end = core.now() + 60000
local kicks, rounds, how, code = 0, 0, nil, nil
while core.now() < t_end do
  -- drive the client one round in 8: between, what it has to read stays readable ("w" ends)
  if rounds % 8 == 0 then c:wait(0) end
  core.poll({}, 1)
  rounds = rounds + 1
  if rounds % 3 == 0 then
    w:kick()
    kicks = kicks + 1
  end
  how, code = core.proc.wait(child)
  if how then break end
end
if not how then core.proc.kill(child, "KILL") end
local out = ""
local rf = io.open(result, "r")
if rf then out = rf:read("a") rf:close() end
os.remove(script)
os.remove(result)
w:close()
c:close()
c:free()
assert(how == "exited" and code == 0, ("the reader ended %s %s: %s"):format(tostring(how), tostring(code), out))
local total = 0
for _, n in out:gmatch("(%a)=(%d+)") do total = total + tonumber(n) end
assert(total == WAITS, "the reader did not finish its waits: " .. out)
print(("ok: %d waits (%s), %d kicks"):format(WAITS, out:gsub("%s+$", ""), kicks))
