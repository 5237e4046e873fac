-- walk_hosts.lua: every second, walk every host and find the largest sender (the benchmark in
-- BENCHMARKS.md §17b: what a per-second script over all hosts costs).
function every_second(now)
  local total, top, top_bytes = 0, nil, -1
  for _, h in ipairs(sonde.hosts()) do
    total = total + h.sent_bytes
    if h.sent_bytes > top_bytes then top, top_bytes = h.ip, h.sent_bytes end
  end
  if top and total > 0 and top_bytes * 2 > total then
    sonde.alert{type = "half_of_traffic", entity = top, summary = top .. " sends half the bytes",
                evidence = {bytes = top_bytes, total = total}}
  end
end
