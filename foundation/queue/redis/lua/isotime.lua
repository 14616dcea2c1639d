-- A server clock reading (TIME's seconds and microseconds) in ISO 8601 as Python writes it, for
-- scripts that write a record or an event themselves (Lua has no date library in Redis):
-- zulu: pydantic's JSON form ('2026-11-26T14:43:25.837966Z'), else datetime.isoformat()
-- ('2026-11-26T14:43:25.837966+00:00'); whole seconds drop the fraction, as both do.
-- A test compares it with Python over leap days, month and year ends and whole seconds.
local function isotime(sec, usec, zulu)
  local days = math.floor(sec / 86400)
  local rem = sec - days * 86400
  -- civil_from_days (H. Hinnant): days since 1970-01-01 → year, month, day (proleptic Gregorian)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  local text = string.format('%04d-%02d-%02dT%02d:%02d:%02d', year, month, day,
                             math.floor(rem / 3600), math.floor(rem / 60) % 60, rem % 60)
  if usec > 0 then text = text .. string.format('.%06d', usec) end
  return text .. (zulu and 'Z' or '+00:00')
end
