-- zklock.metrics: what the recipes report while they work, and two sinks that keep it.
--
-- A sink is any table with two methods (both optional):
--   sink:count(name, labels, n)        add n to a counter
--   sink:observe(name, labels, value)  add one observation (seconds) to a histogram
-- `labels` is a table of strings, reused from call to call for the same series (a sink may key
-- its series by the table; never change one after it was passed). Label values stay bounded:
-- the recipe, a name the user gives (the object option `metric`, or the client option
-- `metric_label`, a function of the path), an outcome or a state from a fixed list; never a raw
-- path unless the user maps paths to it.
--
-- Reported (see docs/api.md, "Metrics", for the full list and labels):
--   zklock_acquire_total{recipe,name,outcome}   every acquire that waited for the server
--   zklock_wait_seconds{recipe,name,outcome}    its wait, whatever the outcome
--   zklock_hold_seconds{recipe,name}            from grant to release (or loss, or drop)
--   zklock_contenders{recipe,name}              nodes ahead at an acquisition's first listing
--   zklock_revoke_total{recipe,name}            revocation requests delivered to a handler
--   zklock_loss_total{recipe,name,state}        SUSPENDED and LOST, per hold
--   zklock_requests_total{kind}                 ZooKeeper requests by kind (the core's counters)
--   zklock_session_total{event}                 connected, suspended, reconnected, expired
--
-- Lock events (granted, released, lost, revoked, timed out, failed) also go to the client's log function,
-- one line each with path, token and wait or hold time, at the client option `lock_events`
-- level (default "debug", so they are off under the default log_level "warn").
local check = require("zklock.internal.args")

local M = {}
-- the reporting half (what zklock.client and zklock.internal.hold call): zklock.internal.report
local I = require("zklock.internal.report")

-- Histogram buckets (upper bounds), shared by every sink built here: seconds for the names
-- ending in _seconds, counts for the others (zklock_contenders).
M.BUCKETS = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300 }
M.COUNT_BUCKETS = { 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384 }
local function buckets_of(name)
  return name:sub(-8) == "_seconds" and M.BUCKETS or M.COUNT_BUCKETS
end

---------------------------------------------------------------- the default sink

-- zklock.metrics(sink): the sink of every client connected after this call that has no
-- `metrics` option of its own (nil: none). Returns the previous one.
function M.set_default(sink) return I.set_default(sink) end
function M.default() return I.default() end

---------------------------------------------------------------- sinks

-- Prometheus text exposition of a label table, keys sorted.
local function label_text(labels, extra_k, extra_v)
  local keys = {}
  for k in pairs(labels) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = tostring(labels[k]):gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"')
    parts[#parts + 1] = ('%s="%s"'):format(k, v)
  end
  if extra_k then parts[#parts + 1] = ('%s="%s"'):format(extra_k, extra_v) end
  return #parts > 0 and ("{" .. table.concat(parts, ",") .. "}") or ""
end

local function fmt_num(v)
  if v == math.huge then return "+Inf" end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return ("%d"):format(v) end
  return ("%.9g"):format(v)
end

local HELP = {
  zklock_acquire_total = "Acquires that waited for the server, by outcome.",
  zklock_wait_seconds = "Time from the start of an acquire to its outcome.",
  zklock_hold_seconds = "Time from grant to release, drop or loss.",
  zklock_contenders = "Nodes ahead of an acquisition at its first listing.",
  zklock_revoke_total = "Revocation requests delivered to on_revoke handlers.",
  zklock_loss_total = "Holds told SUSPENDED or LOST.",
  zklock_requests_total = "ZooKeeper requests sent, by kind.",
  zklock_session_total = "Session state changes of the clients.",
}

-- The whole exposition from series: name -> { type =, series = { key -> { labels =, ... } } }.
local function render(families, prefix_help)
  local names = {}
  for name in pairs(families) do names[#names + 1] = name end
  table.sort(names)
  local out = {}
  for _, name in ipairs(names) do
    local fam = families[name]
    out[#out + 1] = ("# HELP %s %s"):format(name, prefix_help[name] or name)
    out[#out + 1] = ("# TYPE %s %s"):format(name, fam.type)
    local keys = {}
    for k in pairs(fam.series) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local s = fam.series[k]
      if fam.type == "counter" then
        out[#out + 1] = ("%s%s %s"):format(name, label_text(s.labels), fmt_num(s.value))
      else
        local cum = 0
        local bounds = buckets_of(name)
        for i, le in ipairs(bounds) do
          cum = cum + (s.buckets[i] or 0)
          out[#out + 1] = ("%s_bucket%s %s"):format(name, label_text(s.labels, "le", fmt_num(le)), fmt_num(cum))
        end
        cum = cum + (s.buckets[#bounds + 1] or 0)
        out[#out + 1] = ("%s_bucket%s %s"):format(name, label_text(s.labels, "le", "+Inf"), fmt_num(cum))
        out[#out + 1] = ("%s_sum%s %s"):format(name, label_text(s.labels), fmt_num(s.sum))
        out[#out + 1] = ("%s_count%s %s"):format(name, label_text(s.labels), fmt_num(s.count))
      end
    end
  end
  return table.concat(out, "\n") .. "\n"
end

local function series_key(labels)
  local keys = {}
  for k in pairs(labels) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(labels[k]) end
  return table.concat(parts, "\1")
end

-- index of the first bucket whose upper bound is >= v (#BUCKETS + 1: above them all)
local function bucket_index(v, b)
  local lo, hi = 1, #b + 1
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if v <= b[mid] then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- Argument checks of the sinks below (a sink method is also called by applications: their own
-- counters next to zklock's). Names and label tables are checked once each and remembered.
local METRIC_NAME = "^[a-zA-Z_:][a-zA-Z0-9_:]*$"
local LABEL_NAME = "^[a-zA-Z_][a-zA-Z0-9_]*$"
local good_names = {}
local good_labels = setmetatable({}, { __mode = "k" })

-- a method called with a dot (sink.count(...)): self is not the sink
local function check_self(self, mt, what, method)
  if getmetatable(self) ~= mt then
    check.raise(("zklock: %s sink:%s called with a dot or on something else (self is %s); call it as"
      .. " sink:%s(...)"):format(what, method, check.describe(self), method))
  end
end

local function check_name(fname, name)
  if good_names[name] then return end
  if type(name) ~= "string" or not name:match(METRIC_NAME) then
    check.argerror(fname, 1, ("name: expected a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), got %s")
      :format(check.describe(name)))
  end
  good_names[name] = true
end

local function check_labels(fname, labels, histogram)
  if type(labels) ~= "table" then
    check.argerror(fname, 2, "labels: expected a table of label name -> value, got " .. check.describe(labels))
  end
  local seen = good_labels[labels]
  if seen == true or (seen == "counter" and not histogram) then return end
  for k, v in pairs(labels) do
    if type(k) ~= "string" or not k:match(LABEL_NAME) or k:sub(1, 2) == "__" then
      check.argerror(fname, 2, ("labels: label name %s is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*,"
        .. " not starting with __)"):format(check.describe(k)))
    end
    if histogram and k == "le" then
      check.argerror(fname, 2, "labels: label name \"le\" is reserved for a histogram's buckets")
    end
    if type(v) ~= "string" and type(v) ~= "number" then
      check.argerror(fname, 2, ("labels: the value of label %s: expected a string or a number, got %s")
        :format(k, check.describe(v)))
    end
    if type(v) == "string" and v:find("[\1\2]") then
      check.argerror(fname, 2, ("labels: the value of label %s contains a byte \\1 or \\2 (reserved)"):format(k))
    end
  end
  good_labels[labels] = histogram and true or "counter"
end

local function check_value(fname, v, counter)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    check.argerror(fname, 3, ("%s: expected a finite number, got %s"):format(counter and "n" or "value",
      check.describe(v)))
  end
  if counter and v < 0 then
    check.argerror(fname, 3, ("n: a counter only goes up: expected a number >= 0, got %s"):format(check.describe(v)))
  end
end

-- a name is one family of one type: a counter cannot become a histogram
local function check_type(fname, families_type, name, typ)
  if families_type and families_type ~= typ then
    check.argerror(fname, 1, ("name: %s is a %s already, not a %s"):format(name, families_type, typ))
  end
end

-- metrics.prometheus() -> a sink kept in this Lua state, with sink:render() -> the Prometheus
-- text exposition format (version 0.0.4), and sink:get(name, labels) -> a counter's value or a
-- histogram's { count =, sum = } (nil if never reported).
local Prom = {}
Prom.__index = Prom

function M.prometheus()
  return setmetatable({ _families = {} }, Prom)
end

-- the series key of a label table, cached by the table (the reporters reuse their label tables)
local key_cache = setmetatable({}, { __mode = "k" })
local function cached_key(labels)
  local k = key_cache[labels]
  if not k then
    k = series_key(labels)
    key_cache[labels] = k
  end
  return k
end

local function family(self, name, typ)
  local fam = self._families[name]
  if not fam then
    fam = { type = typ, series = {}, by_table = setmetatable({}, { __mode = "k" }) }
    self._families[name] = fam
  end
  return fam
end

-- The series of (name, labels) once checked: fam.by_table[labels] (the reporters reuse their
-- label tables, so the argument checks run once per series, not once per call).
function Prom:count(name, labels, n)
  if getmetatable(self) ~= Prom then check_self(self, Prom, "prometheus", "count") end
  local fam = self._families[name]
  local s = fam and fam.type == "counter" and fam.by_table[labels]
  if not s then
    check_name("count", name)
    check_labels("count", labels, false)
    check_type("count", fam and fam.type, name, "counter")
    fam = family(self, name, "counter")
    local k = cached_key(labels)
    s = fam.series[k]
    if not s then
      s = { labels = labels, value = 0 }
      fam.series[k] = s
    end
    fam.by_table[labels] = s
  end
  if type(n) ~= "number" or not (n >= 0 and n < math.huge) then check_value("count", n, true) end
  s.value = s.value + n
end

function Prom:observe(name, labels, v)
  if getmetatable(self) ~= Prom then check_self(self, Prom, "prometheus", "observe") end
  local fam = self._families[name]
  local s = fam and fam.type == "histogram" and fam.by_table[labels]
  if not s then
    check_name("observe", name)
    check_labels("observe", labels, true)
    check_type("observe", fam and fam.type, name, "histogram")
    fam = family(self, name, "histogram")
    local k = cached_key(labels)
    s = fam.series[k]
    if not s then
      s = { labels = labels, buckets = {}, sum = 0, count = 0 }
      fam.series[k] = s
    end
    fam.by_table[labels] = s
  end
  if type(v) ~= "number" or not (v > -math.huge and v < math.huge) then check_value("observe", v, false) end
  local i = bucket_index(v, buckets_of(name))
  s.buckets[i] = (s.buckets[i] or 0) + 1
  s.sum = s.sum + v
  s.count = s.count + 1
end

function Prom:get(name, labels)
  check_self(self, Prom, "prometheus", "get")
  local fam = self._families[name]
  local s = fam and fam.series[series_key(labels or {})]
  if not s then return nil end
  if fam.type == "counter" then return s.value end
  return { count = s.count, sum = s.sum }
end

function Prom:render()
  check_self(self, Prom, "prometheus", "render")
  return render(self._families, HELP)
end

-- metrics.shared_dict(dict) -> a sink over an OpenResty lua_shared_dict, so every nginx worker
-- adds to one set of numbers; sink:render() (from any worker) gives the exposition of all of
-- them. Keys are "<type>\2<name>\2<series>\2<field>"; values are numbers (dict:incr with init 0).
local Shared = {}
Shared.__index = Shared

function M.shared_dict(dict)
  if type(dict) ~= "table" and type(dict) ~= "userdata" then
    check.argerror("shared_dict", 1, "dict: expected an ngx.shared dictionary, got " .. check.describe(dict))
  end
  return setmetatable({ dict = dict, _types = {} }, Shared)
end

local SEP = "\2"

local function label_pack(labels)
  return cached_key(labels)
end

local function label_unpack(s)
  local labels = {}
  for part in (s .. "\1"):gmatch("([^\1]*)\1") do
    local k, v = part:match("^([^=]+)=(.*)$")
    if k then labels[k] = v end
  end
  return labels
end

function Shared:count(name, labels, n)
  check_self(self, Shared, "shared_dict", "count")
  check_name("count", name)
  check_labels("count", labels, false)
  check_value("count", n, true)
  check_type("count", self._types[name], name, "counter") -- (what this worker saw)
  self._types[name] = "counter"
  self.dict:incr(table.concat({ "c", name, label_pack(labels), "v" }, SEP), n, 0)
end

function Shared:observe(name, labels, v)
  check_self(self, Shared, "shared_dict", "observe")
  check_name("observe", name)
  check_labels("observe", labels, true)
  check_value("observe", v, false)
  check_type("observe", self._types[name], name, "histogram")
  self._types[name] = "histogram"
  local base = table.concat({ "h", name, label_pack(labels) }, SEP) .. SEP
  local d = self.dict
  d:incr(base .. bucket_index(v, buckets_of(name)), 1, 0)
  d:incr(base .. "sum", v, 0)
  d:incr(base .. "count", 1, 0)
end

function Shared:render()
  check_self(self, Shared, "shared_dict", "render")
  local families = {}
  for _, key in ipairs(self.dict:get_keys(0)) do
    local typ, name, series, field = key:match("^([ch])\2([^\2]*)\2([^\2]*)\2([^\2]*)$")
    if typ then
      local v = self.dict:get(key) or 0
      local fam = families[name]
      if not fam then
        fam = { type = typ == "c" and "counter" or "histogram", series = {} }
        families[name] = fam
      end
      local s = fam.series[series]
      if not s then
        s = { labels = label_unpack(series), value = 0, buckets = {}, sum = 0, count = 0 }
        fam.series[series] = s
      end
      if typ == "c" then s.value = v
      elseif field == "sum" then s.sum = v
      elseif field == "count" then s.count = v
      else s.buckets[tonumber(field)] = v end
    end
  end
  return render(families, HELP)
end

return M
