-- busted output handler: TAP, plus a line "# time <seconds> <spec file>" after each spec file, so
-- that .ci/run can list the slowest files of a suite (busted -o spec/support/tap_timed.lua).
return function(options)
  local busted = require("busted")
  local handler = require("busted.outputHandlers.TAP")(options)
  local started = {}
  local clock = require("system").gettime -- luasystem (a busted dependency): wall-clock seconds
  busted.subscribe({ "file", "start" }, function(file)
    started[file.name] = clock()
    return nil, true
  end)
  busted.subscribe({ "file", "end" }, function(file)
    local t0 = started[file.name]
    if t0 then io.write(("# time %.1f %s\n"):format(clock() - t0, file.name)) end
    io.flush()
    return nil, true
  end)
  return handler
end
