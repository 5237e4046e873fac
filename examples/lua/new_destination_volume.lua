-- new_destination_volume.lua: a host sends more than LIMIT_MB in a minute to a network
-- (/24 for IPv4, /48 for IPv6) it had never talked to until NEW_FOR_MINUTES ago.
--
--   sonde --script examples/lua/new_destination_volume.lua ...
--
-- Alert: script.new_destination_volume, entity = the sending host, released at the first
-- minute the host sends less than the limit to that network (or the network is no longer new).

local LIMIT_MB = 50           -- per minute, to one new network
local NEW_FOR_MINUTES = 5     -- a network stays "new" this long after the host's first contact
local MAX_KNOWN = 200000      -- (host, network) pairs remembered; past that, start afresh

local LIMIT = LIMIT_MB * 1000 * 1000

local first_contact = {}      -- host .. " " .. network -> minute of first contact
local known_count = 0
local last_bytes = {}         -- flow key -> { c2s, s2c } at the last look
local sent = {}               -- host .. " " .. network -> bytes this minute
local engaged = {}            -- host .. " " .. network -> true

-- "203.0.113.0/24", "2001:db8:1::/48"
local function network(ip)
  local a, b, c = ip:match("^(%d+)%.(%d+)%.(%d+)%.%d+$")
  if a then return a .. "." .. b .. "." .. c .. ".0/24" end
  if not ip:find(":", 1, true) then return nil end
  local head, tail = ip:match("^(.-)::(.*)$")
  local groups = {}
  local function add(part)
    for g in part:gmatch("[^:]+") do groups[#groups + 1] = g end
  end
  if head then
    add(head)
    local tail_groups = 0
    for _ in tail:gmatch("[^:]+") do tail_groups = tail_groups + 1 end
    for _ = 1, 8 - #groups - tail_groups do groups[#groups + 1] = "0" end
    add(tail)
  else
    add(ip)
  end
  local h = {}
  for i = 1, 3 do h[i] = string.format("%x", tonumber(groups[i] or "0", 16) or 0) end
  return table.concat(h, ":") .. "::/48"
end

-- the keys of t, sorted (pairs' order changes from run to run)
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local function key_of(f)
  return f.proto .. " " .. f.client .. " " .. f.client_port .. " " .. f.server .. " " ..
         f.server_port .. " " .. f.vlan
end

local function add_sent(host, peer, bytes)
  local net = network(peer)
  if not net or bytes <= 0 then return end
  local k = host .. " " .. net
  sent[k] = (sent[k] or 0) + bytes
end

-- what a flow sent since we last looked at it, both ways
local function account(f, key)
  local last = last_bytes[key] or { 0, 0 }
  add_sent(f.client, f.server, f.bytes[1] - last[1])
  add_sent(f.server, f.client, f.bytes[2] - last[2])
end

function on_flow(f)
  -- an ended flow: count its last bytes, forget it
  local key = key_of(f)
  account(f, key)
  last_bytes[key] = nil
end

function every_minute(now)
  local minute = now // 60
  local seen = {}
  for _, f in ipairs(sonde.flows()) do
    local key = key_of(f)
    account(f, key)
    seen[key] = { f.bytes[1], f.bytes[2] }
  end
  last_bytes = seen

  for _, k in ipairs(sorted_keys(sent)) do
    local bytes = sent[k]
    local first = first_contact[k]
    if not first then
      if known_count >= MAX_KNOWN then
        first_contact, known_count = {}, 0
      end
      first = minute
      first_contact[k] = first
      known_count = known_count + 1
    end
    local host, net = k:match("^(%S+) (%S+)$")
    if bytes > LIMIT and minute - first < NEW_FOR_MINUTES then
      engaged[k] = true
      sonde.alert{
        type = "new_destination_volume", entity = host, severity = "warning",
        summary = string.format("%s sent %.1f MB in a minute to %s, a network it first talked to %d min ago",
                                host, bytes / 1e6, net, minute - first),
        evidence = { network = net, bytes = bytes, limit_bytes = LIMIT, first_contact = first * 60 },
      }
    end
  end
  for _, k in ipairs(sorted_keys(engaged)) do
    local bytes = sent[k] or 0
    if bytes <= LIMIT or minute - first_contact[k] >= NEW_FOR_MINUTES then
      engaged[k] = nil
      sonde.release{ type = "new_destination_volume", entity = k:match("^(%S+)") }
    end
  end
  sent = {}
end
