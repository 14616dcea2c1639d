-- The lifecycle table of worker.contract.check_transition, for scripts (Lua cannot call Python).
-- A test compares allowed(a, b) with check_transition(a, b) for every pair of statuses.
local ALLOWED = {
  queued = {running = true, canceled = true, failed = true},
  running = {succeeded = true, failed = true, canceled = true, queued = true},
  succeeded = {},
  failed = {},
  canceled = {},
}

local function allowed(current, new)
  local row = ALLOWED[current]
  return row ~= nil and row[new] == true
end
