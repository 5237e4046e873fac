-- dns_watchlist.lua: a host looks up (DNS) or connects to (TLS SNI, HTTP host) a name in one
-- of the WATCHLIST domains or below them ("evil.test" matches "evil.test" and "a.b.evil.test").
--
--   sonde --script examples/lua/dns_watchlist.lua ...
--
-- Alert: script.dns_watchlist, entity = the client; refreshed while it keeps asking, released
-- HOLD_SECONDS after its last lookup.

local WATCHLIST = {
  "evil.test",
  "malware.example",
  "tracker.example.net",
}
local HOLD_SECONDS = 600
local SEVERITY = "error"

local listed = {}
for _, d in ipairs(WATCHLIST) do listed[d:lower()] = true end

local last_hit = {}   -- client .. " " .. domain -> { time, client, domain }

-- the listed domain that `name` is or is below, if any
local function match(name)
  while name ~= "" do
    if listed[name] then return name end
    local dot = name:find(".", 1, true)
    if not dot then return nil end
    name = name:sub(dot + 1)
  end
  return nil
end

function on_flow(f)
  local asked = f.dns_query or f.server_name
  if not asked then return end
  local name = asked:lower():gsub("%.$", "")
  local domain = match(name)
  if not domain then return end
  last_hit[f.client .. " " .. domain] = { sonde.now(), f.client, domain }
  sonde.alert{
    type = "dns_watchlist", entity = f.client, severity = SEVERITY,
    summary = f.client .. " asked for " .. name .. " (watchlist: " .. domain .. ")",
    evidence = { name = asked, domain = domain, server = f.server, app = f.app,
                 dns_query = f.dns_query, server_name = f.server_name },
  }
end

function every_minute(now)
  local keys = {}
  for k in pairs(last_hit) do keys[#keys + 1] = k end
  table.sort(keys)  -- releases in a stable order
  for _, k in ipairs(keys) do
    local hit = last_hit[k]
    if now - hit[1] >= HOLD_SECONDS then
      last_hit[k] = nil
      sonde.release{ type = "dns_watchlist", entity = hit[2] }
    end
  end
end
