-- The fast tier (no ZooKeeper server): the table of "outcome unknown" codes
-- (zklock.outcome_unknown, ZKL_OUTCOME_UNKNOWN_MAP in zklock.h) and the argument checks of the
-- metrics sinks (Prometheus names, labels and values; negative counter increments; dot calls).
--   busted --lua=lua5.4 spec/fast/outcome_metrics_spec.lua
--   busted --lua=luajit --run=luajit spec/fast/outcome_metrics_spec.lua
local zklock = require("zklock")
local core = require("zklock.core")
local util = require("support.util")

local function assert_raises(words, fn, ...)
  return util.assert_words(util.error_of(fn, ...), words)
end

describe("outcome unknown #fast", function()
  it("lists only known error codes, each once, and says true for each by name and number", function()
    local list = core.OUTCOME_UNKNOWN
    assert.is_true(#list > 0)
    local seen = {}
    for _, name in ipairs(list) do
      assert.is_nil(seen[name], "listed twice: " .. name)
      seen[name] = true
      local code = zklock.errno[name]
      assert.is_number(code, name .. " is not in zklock.errno")
      assert.are.equal(name, core.errname(code))
      assert.is_true(zklock.outcome_unknown(name), name)
      assert.is_true(zklock.outcome_unknown(code), name)
    end
    -- nothing else in zklock.errno says true
    for name, code in pairs(zklock.errno) do
      assert.are.equal(seen[name] == true, zklock.outcome_unknown(code), name)
    end
  end)

  it("has every code the ZooKeeper client gives a request in flight without an answer, and the core's own", function()
    -- zookeeper.c 3.8: handle_socket_error_msg/handle_error (connection loss, receive timeout,
    -- out-of-order reply, auth failed, socket() failure, TLS),
    -- zookeeper_close (ZCLOSING); zklock's core: a call's timeout, a lost session, close
    for _, name in ipairs({ "ZCONNECTIONLOSS", "ZOPERATIONTIMEOUT", "ZRUNTIMEINCONSISTENCY",
                            "ZAUTHFAILED", "ZCLOSING", "ZSYSTEMERROR", "ZSSLCONNECTIONERROR",
                            "ETIMEDOUT", "ESESSION", "ECLOSED" }) do
      assert.is_true(zklock.outcome_unknown(name), name)
    end
    -- the one made-up failure left out: ZSESSIONEXPIRED goes only to requests queued after the
    -- last connection broke, when the reconnect finds the session expired (zklock.h says why)
    assert.is_false(zklock.outcome_unknown("ZSESSIONEXPIRED"))
  end)

  it("says false for the server's answers, refusals before sending, success and no code", function()
    for _, name in ipairs({ "OK", "ZNONODE", "ZNODEEXISTS", "ZBADVERSION", "ZNOAUTH", "ZNOTEMPTY", "ZINVALIDACL",
                            "ZSESSIONMOVED", "ZINVALIDSTATE", "ZBADARGUMENTS", "ZTHROTTLEDOP", "ELOST",
                            "ECANCELED", "EINVAL", "ENOMEM" }) do
      assert.is_false(zklock.outcome_unknown(name), name)
    end
    assert.is_false(zklock.outcome_unknown(nil))
    assert.is_false(zklock.outcome_unknown(0))
    assert.is_false(zklock.outcome_unknown(-424242))
  end)

  it("rejects what is not an error code, naming the argument", function()
    assert_raises({ "bad argument #1 to 'outcome_unknown'", "code", "ZNOPE", "zklock.errno" },
      zklock.outcome_unknown, "ZNOPE")
    assert_raises({ "bad argument #1 to 'outcome_unknown'", "code", "table" }, zklock.outcome_unknown, {})
    assert_raises({ "bad argument #1 to 'outcome_unknown'", "code", "1.5" }, zklock.outcome_unknown, 1.5)
  end)
end)

-- A strict reading of the text exposition (0.0.4): comment lines, then samples
-- name{label="value",...} number, names and label names valid, values escaped.
local function assert_exposition(text)
  assert.are.equal("\n", text:sub(-1))
  for line in text:gmatch("([^\n]*)\n") do
    if line:sub(1, 1) == "#" then
      assert.is_truthy(line:match("^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .+$") or
        line:match("^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* [a-z]+$"), line)
    else
      local name, rest = line:match("^([a-zA-Z_:][a-zA-Z0-9_:]*)(.*)$")
      assert.is_truthy(name, line)
      local labels, value = rest:match("^{(.*)} (%S+)$")
      if not labels then value = rest:match("^ (%S+)$") end
      assert.is_truthy(value, line)
      assert.is_truthy(tonumber(value) or value == "+Inf", line)
      if labels then
        -- label="value" pairs; in a value only \\, \" and \n escapes, no raw quote or newline
        local pos = 1
        while pos <= #labels do
          local k, after = labels:match('^([a-zA-Z_][a-zA-Z0-9_]*)="()', pos)
          assert.is_truthy(k, ("bad label name at %d in %s"):format(pos, line))
          assert.is_falsy(k:match("^__"), line)
          pos = after
          while true do
            local ch = labels:sub(pos, pos)
            assert.is_true(ch ~= "" and ch ~= "\n", "unterminated value in " .. line)
            if ch == '"' then break end
            if ch == "\\" then
              assert.is_truthy(labels:sub(pos + 1, pos + 1):match('^[\\"n]$'), "bad escape in " .. line)
              pos = pos + 1
            end
            pos = pos + 1
          end
          pos = pos + 1
          if pos <= #labels then
            assert.are.equal(",", labels:sub(pos, pos), line)
            pos = pos + 1
          end
        end
      end
    end
  end
end

describe("metrics sink arguments #fast", function()
  local M = zklock.metrics

  -- a stand-in for an ngx.shared dictionary
  local function fake_dict()
    local d = { v = {} }
    function d:incr(k, n, init) self.v[k] = (self.v[k] or init) + n return self.v[k] end
    function d:get(k) return self.v[k] end
    function d:get_keys() local out = {} for k in pairs(self.v) do out[#out + 1] = k end return out end
    return d
  end

  for _, kind in ipairs({ "prometheus", "shared_dict" }) do
    local function new() if kind == "prometheus" then return M.prometheus() end return M.shared_dict(fake_dict()) end

    describe(kind, function()
      it("refuses invalid metric names, naming the argument", function()
        local s = new()
        for _, bad in ipairs({ "", "1abc", "a-b", "a b", "é", "a.b" }) do
          assert_raises({ "bad argument #1 to 'count'", "name", "Prometheus metric name", ("%q"):format(bad) },
            s.count, s, bad, {}, 1)
          assert_raises({ "bad argument #1 to 'observe'", "name" }, s.observe, s, bad, {}, 1)
        end
        assert_raises({ "bad argument #1 to 'count'", "name", "nil" }, s.count, s, nil, {}, 1)
        s:count("ok:name_1", {}, 1) -- colons and underscores are fine
      end)

      it("refuses invalid label names, reserved ones and bad values, naming the argument", function()
        local s = new()
        for _, bad in ipairs({ "1a", "a-b", "", "__x", "a:b" }) do
          assert_raises({ "bad argument #2 to 'count'", "labels", "label name", ("%q"):format(bad) },
            s.count, s, "m_total", { [bad] = "v" }, 1)
        end
        assert_raises({ "bad argument #2 to 'count'", "labels", "table" }, s.count, s, "m_total", "x=1", 1)
        assert_raises({ "bad argument #2 to 'count'", "labels", "label k", "boolean" },
          s.count, s, "m_total", { k = true }, 1)
        assert_raises({ "bad argument #2 to 'observe'", "labels", "le", "reserved" },
          s.observe, s, "m_seconds", { le = "1" }, 1)
        -- a label table good for a counter is checked again for a histogram
        local l = { le = "x" }
        s:count("m2_total", l, 1)
        assert_raises({ "bad argument #2 to 'observe'", "le" }, s.observe, s, "m2_seconds", l, 1)
      end)

      it("refuses negative, NaN and infinite counter increments and non-finite observations", function()
        local s = new()
        for _, bad in ipairs({ -1, -0.5, 0 / 0, math.huge, -math.huge, "1" }) do
          assert_raises({ "bad argument #3 to 'count'", "n" }, s.count, s, "m_total", {}, bad)
        end
        util.assert_words(util.error_of(s.count, s, "m_total", {}, -1), { "counter only goes up", ">= 0" })
        for _, bad in ipairs({ 0 / 0, math.huge, "1", nil }) do
          assert_raises({ "bad argument #3 to 'observe'", "value" }, s.observe, s, "m_seconds", {}, bad)
        end
        s:count("m_total", {}, 0)
        s:observe("m_seconds", {}, 0)
      end)

      it("refuses one name as both a counter and a histogram", function()
        local s = new()
        s:count("both", {}, 1)
        assert_raises({ "bad argument #1 to 'observe'", "both", "counter already" }, s.observe, s, "both", {}, 1)
      end)

      it("says so when a method is called with a dot", function()
        local s = new()
        assert_raises({ "sink:count", "dot", "sink:count(...)" }, s.count, "m_total", {}, 1)
        assert_raises({ "sink:observe", "dot" }, s.observe, "m_seconds", {}, 1)
        assert_raises({ "sink:render", "dot" }, s.render)
      end)

      it("renders a valid exposition, label values escaped", function()
        local s = new()
        s:count("zklock_x_total", { name = 'q"uo\\te\nnl', recipe = "mutex" }, 2)
        s:count("zklock_x_total", { name = "plain", recipe = "mutex" }, 1.5)
        s:observe("zklock_y_seconds", { name = "a" }, 0.02)
        s:count("bare_total", {}, 3)
        local text = s:render()
        assert_exposition(text)
        assert.is_truthy(text:find('name="q\\"uo\\\\te\\nnl"', 1, true), text)
      end)
    end)
  end

  it("keeps the reporters working: a sink that raises is logged, not raised", function()
    -- the library's own calls pass names and labels that the checks accept
    local s = M.prometheus()
    local I = require("zklock.internal.report")
    local rep = I.reporter(s, nil, "none", function(_, msg) error("logged: " .. msg) end)
    local labels = I.labels(rep, "mutex", "/a", "orders")
    I.acquire_done(rep, labels, "mutex /a", 0.01, true, 0, 1, 0)
    I.acquire_done(rep, labels, "mutex /a", 0.02, false, zklock.errno.ETIMEDOUT, nil, nil)
    I.hold_done(rep, labels, "mutex /a", 0.5, 1, "released")
    I.hold_state(rep, labels, "mutex /a", "LOST", 1, 0.5)
    I.session(rep, "SUSPENDED", "CONNECTED")
    I.requests(rep, { creates = 2, ops = 1 })
    assert_exposition(s:render())
    assert.are.equal(1, s:get("zklock_acquire_total", { recipe = "mutex", name = "orders", outcome = "acquired" }))
  end)
end)
