-- top_talker_share.lua: one host's traffic (sent + received) is more than SHARE_PERCENT of
-- the interface's bytes over a minute.
--
--   sonde --script examples/lua/top_talker_share.lua ...
--
-- Alert: script.top_talker_share, entity = the host, released at the first minute it is below.

local SHARE_PERCENT = 50
local MIN_INTERFACE_MB = 10   -- quieter minutes are not judged

local last_interface = nil    -- interface bytes at the previous minute
local last_host = {}          -- ip@vlan -> sent + rcvd at the previous minute
local engaged = {}            -- ip -> true

function every_minute(now)
  local total = sonde.interface().bytes or 0
  local hosts = sonde.hosts()
  local seen = {}
  local delta_total = last_interface and total - last_interface
  last_interface = total

  local above = {}
  for _, h in ipairs(hosts) do
    local key = h.ip .. "@" .. h.vlan
    local bytes = h.sent_bytes + h.rcvd_bytes
    local before = last_host[key]
    seen[key] = bytes
    if before and delta_total and delta_total >= MIN_INTERFACE_MB * 1e6 then
      local share = (bytes - before) * 100 / delta_total
      if share > SHARE_PERCENT then
        above[h.ip] = true
        engaged[h.ip] = true
        sonde.alert{
          type = "top_talker_share", entity = h.ip,
          summary = string.format("%s made %.0f%% of the interface's traffic in the last minute",
                                  h.ip, share),
          evidence = { share_percent = share, host_bytes = bytes - before,
                       interface_bytes = delta_total, limit_percent = SHARE_PERCENT },
        }
      end
    end
  end
  last_host = seen
  local ips = {}
  for ip in pairs(engaged) do ips[#ips + 1] = ip end
  table.sort(ips)  -- releases in a stable order
  for _, ip in ipairs(ips) do
    if not above[ip] then
      engaged[ip] = nil
      sonde.release{ type = "top_talker_share", entity = ip }
    end
  end
end
