-- zklock.testing.shell: shell commands, files, a clock and temporary directories; the base of
-- every other zklock.testing module (no dependencies). Pure Lua, 5.1-5.4 and LuaJIT.
--   shq, sh, execute, readcmd, read_file, write_file, exists, sleep, now, tail, mktemp, remove_tree
local M = {}

local function shq(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.shq = shq

-- Helper commands run without a sanitizer preload: with libasan preloaded (the ASan test
-- run), tools such as pgrep can deadlock at start-up.
local function clean(cmd)
  if os.getenv("LD_PRELOAD") then return "unset LD_PRELOAD; " .. cmd end
  return cmd
end

-- os.execute that returns true/false under both 5.1/LuaJIT (number) and 5.2+ (boolean)
local function execute(cmd)
  local a = os.execute(clean(cmd))
  return a == true or a == 0
end
M.execute = execute

local function readcmd(cmd)
  local f = io.popen(clean(cmd), "r")
  if not f then return nil end
  local out = f:read("*a")
  f:close()
  return out
end

function M.sh(cmd)
  local out = readcmd(cmd)
  if not out then error("zklock.testing: cannot run a shell for: " .. tostring(cmd), 2) end
  return out
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end
M.read_file = read_file

local function write_file(path, s, mode)
  local f, err = io.open(path, mode or "w")
  if not f then error("zklock.testing: cannot write " .. path .. ": " .. tostring(err), 3) end
  f:write(s)
  f:close()
end
function M.write_file(path, s, mode) write_file(path, s, mode) end

local function file_exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end
M.exists = file_exists

function M.sleep(seconds)
  if seconds and seconds > 0 then
    execute(("sleep %.3f"):format(seconds))
  end
end

-- Monotonic seconds from /proc/uptime (10 ms resolution); os.time() as a fallback.
function M.now()
  local f = io.open("/proc/uptime", "r")
  if f then
    local t = f:read("*n")
    f:close()
    if t then return t end
  end
  return os.time()
end

local function tail(s, n)
  if not s or s == "" then return "(empty)" end
  local lines = {}
  for line in (s .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  while #lines > 0 and lines[#lines] == "" do lines[#lines] = nil end
  local first = #lines - n + 1
  if first < 1 then first = 1 end
  local out = {}
  for i = first, #lines do out[#out + 1] = "  | " .. lines[i] end
  return table.concat(out, "\n")
end

local function mktemp(prefix)
  local dir = readcmd("mktemp -d -t " .. prefix .. ".XXXXXXXX 2>/dev/null")
  dir = dir and dir:match("^%s*(.-)%s*$")
  if not dir or dir == "" or not dir:match("^/") then
    error("zklock.testing: mktemp -d failed (is $TMPDIR writable?)", 3)
  end
  return dir
end

local function remove_tree(dir)
  -- only ever remove what mktemp made for us
  if dir and dir:match("/zklock%-zk[%w%-]*%.[%w]+$") then
    execute("rm -rf -- " .. shq(dir))
  end
end
M.readcmd, M.tail, M.mktemp, M.remove_tree, M._write_file = readcmd, tail, mktemp, remove_tree, write_file

return M
