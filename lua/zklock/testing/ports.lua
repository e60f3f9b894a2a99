-- zklock.testing.ports: free loopback TCP ports (from /proc/net/tcp*, in
-- config.port_min..port_max) and which process listens on one.
--   free_ports(n [, avoid]), owns_listener(pid, port)
local config = require("zklock.testing.config")
local shell = require("zklock.testing.shell")
local processes = require("zklock.testing.processes")

local read_file, readcmd, now = shell.read_file, shell.readcmd, shell.now

local M = {}
---------------------------------------------------------------- ports

-- Park-Miller generator of our own, so that we neither depend on nor disturb math.random
-- (LuaJIT seeds it identically in every process).
local rng_state
local function rand_int(lo, hi)
  if not rng_state then
    local up = math.floor(now() * 100)
    rng_state = ((processes.pid or 1) * 7919 + up + os.time()) % 2147483646 + 1
    for _ = 1, 3 do rng_state = (rng_state * 16807) % 2147483647 end
  end
  rng_state = (rng_state * 16807) % 2147483647
  return lo + rng_state % (hi - lo + 1)
end

-- every local TCP port that appears in /proc/net/tcp{,6} (listening or not)
local function used_ports()
  local used = {}
  for _, file in ipairs({ "/proc/net/tcp", "/proc/net/tcp6" }) do
    local s = read_file(file)
    if s then
      for hex in s:gmatch("\n%s*%d+:%s+%x+:(%x+)%s") do
        used[tonumber(hex, 16)] = true
      end
    end
  end
  return used
end

-- distinct free ports; `taken` lists ports to avoid as well
local function pick_ports(count, taken)
  local used = used_ports()
  for _, p in ipairs(taken or {}) do used[p] = true end
  local ports = {}
  local tries = 0
  while #ports < count do
    tries = tries + 1
    if tries > 1000 then error("zklock.testing: no free TCP port found in the range", 3) end
    local p = rand_int(config.port_min, config.port_max)
    if not used[p] then
      used[p] = true
      ports[#ports + 1] = p
    end
  end
  return ports
end
M.free_ports = pick_ports

-- inodes of the sockets listening on TCP `port` (any address), from /proc/net/tcp{,6}
local function listen_inodes(port)
  local hex = ("%04X"):format(port)
  local inodes = {}
  for _, file in ipairs({ "/proc/net/tcp", "/proc/net/tcp6" }) do
    local s = read_file(file)
    if s then
      for line in s:gmatch("[^\n]+") do
        local f = {}
        for w in line:gmatch("%S+") do f[#f + 1] = w end
        -- f[2] = local address, f[4] = state (0A = LISTEN), f[10] = inode
        if f[4] == "0A" and f[2] and f[2]:match(":(%x+)$") == hex then inodes[#inodes + 1] = f[10] end
      end
    end
  end
  return inodes
end

-- true if process `pid` holds the socket listening on `port`
local function owns_listener(pid, port)
  local inodes = listen_inodes(port)
  if #inodes == 0 then return false end
  local fds = readcmd("ls -l /proc/" .. pid .. "/fd 2>/dev/null") or ""
  for _, ino in ipairs(inodes) do
    if fds:find("socket:[" .. ino .. "]", 1, true) then return true end
  end
  return false
end
M.owns_listener = owns_listener

return M
