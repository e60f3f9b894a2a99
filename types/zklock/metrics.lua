---@meta zklock.metrics

---What the lock recipes report while they work, and two sinks that keep it
---(`require("zklock").metrics`, or `require("zklock.metrics")`).
---
---A sink is any table with `count(name, labels, n)` and/or `observe(name, labels, seconds)`
---methods; give it to a client with the `metrics` option of `zklock.connect`, or to every client
---connected later with `set_default`. Reported, with bounded labels (the recipe, the object's
---`metric` name or the client's `metric_label` of its path, an outcome or a state; never a raw
---path by default):
---
---| name | type | labels |
---| --- | --- | --- |
---| `zklock_acquire_total` | counter | recipe, name, outcome (`acquired`, `timeout`, `canceled`, `closed`, `session`, `error`) |
---| `zklock_wait_seconds` | histogram | recipe, name, outcome |
---| `zklock_hold_seconds` | histogram | recipe, name (grant to release, drop, loss or close) |
---| `zklock_contenders` | histogram | recipe, name: nodes ahead of an acquisition at its first listing (buckets `COUNT_BUCKETS`) |
---| `zklock_loss_total` | counter | recipe, name, state (`SUSPENDED`, `LOST`), per hold |
---| `zklock_revoke_total` | counter | recipe, name: revocation requests delivered to an `on_revoke` handler |
---| `zklock_requests_total` | counter | kind (`create`, `delete`, `list`, `get`, `exists`, `plain`) |
---| `zklock_session_total` | counter | event (`connected`, `suspended`, `reconnected`, `expired`) |
---
---Recipes: `mutex`, `read`, `write`, `semaphore` (also a semaphore mutex's leases), `multilock`.
---A sink that raises is logged once per method and otherwise ignored.
---@class zklock.metrics
---@field BUCKETS number[] Histogram bucket upper bounds in seconds (names ending in `_seconds`), shared by the sinks built here.
---@field COUNT_BUCKETS number[] Histogram bucket upper bounds of the other histograms (counts: `zklock_contenders`).
local metrics = {}

---A sink: any table with one or both of these methods. `labels` tables are reused for the same
---series; never change one after it was passed.
---@class zklock.MetricsSink
---@field count? fun(self: zklock.MetricsSink, name: string, labels: table<string, string>, n: number)
---@field observe? fun(self: zklock.MetricsSink, name: string, labels: table<string, string>, seconds: number)

---A sink kept in this Lua state, with the Prometheus text exposition of everything it received.
---@return zklock.metrics.Prometheus sink
function metrics.prometheus() end

---A sink over an OpenResty `lua_shared_dict`, so every nginx worker adds to one set of numbers
---and a scrape answered by any worker shows them all (see examples/openresty).
---
---Errors: raises if `dict` is not a table or userdata.
---@param dict table `ngx.shared.<name>`.
---@return zklock.metrics.SharedDict sink
function metrics.shared_dict(dict) end

---Make `sink` the metrics sink of every client connected after this call without a `metrics`
---option of its own (nil: none).
---
---Errors: raises if `sink` is not a sink.
---@param sink? zklock.MetricsSink
---@return zklock.MetricsSink? previous The sink set before.
function metrics.set_default(sink) end

---The sink set by `set_default`, or nil.
---@return zklock.MetricsSink? sink
function metrics.default() end

---The sink `zklock.metrics.prometheus()` makes.
---Its `count(name, labels, n)` and `observe(name, labels, value)` (also
---`zklock.metrics.SharedDict`'s) raise on a metric name that is not `[a-zA-Z_:][a-zA-Z0-9_:]*`
---(#1), labels that are not a table of names `[a-zA-Z_][a-zA-Z0-9_]*` not starting with `__`
---(`le` is reserved for histograms) to string or number values without the bytes 1 or 2 (#2),
---an `n` or `value` that is not a finite number, a negative counter increment (#3), a name used
---as both a counter and a histogram, and a call with a dot (`sink.count(...)`) instead of a
---colon. Label values are escaped in the exposition (`\\`, `\"`, `\n`).
---@class zklock.metrics.Prometheus: zklock.MetricsSink
local Prometheus = {}

---Prometheus text exposition (format 0.0.4) of every series received: `# HELP` and `# TYPE`
---lines, counters, and histograms with cumulative `_bucket`, `_sum` and `_count`.
---@return string text
function Prometheus:render() end

---A counter's value, or a histogram's `{ count =, sum = }`, for exactly these labels; nil if
---never reported.
---@param name string
---@param labels? table<string, string>
---@return number|{count: number, sum: number}|nil value
function Prometheus:get(name, labels) end

---@class zklock.metrics.SharedDict: zklock.MetricsSink
local SharedDict = {}

---Prometheus text exposition of every worker's numbers in the dictionary.
---@return string text
function SharedDict:render() end
