-- wrk script of bench/run.py: POSTs one body file as a chat request and prints
-- one machine-readable line at the end.
--   BENCH_BODY      path of the JSON body (required)
--   BENCH_PATH      request path (default /v1/chat/completions)
--   BENCH_STATUSES  set: count responses by status (costs a little per request)
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.path = os.getenv("BENCH_PATH") or "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

if os.getenv("BENCH_STATUSES") then
  function init(args)
    statuses = {}
  end
  function response(status, headers, body)
    statuses[status] = (statuses[status] or 0) + 1
  end
end

function done(summary, latency, requests)
  local counts = {}
  if os.getenv("BENCH_STATUSES") then
    for _, t in ipairs(threads) do
      local s = t:get("statuses")
      if s then
        for code, n in pairs(s) do
          counts[#counts + 1] = string.format('[%d,%d]', code, n)
        end
      end
    end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
    '"statuses":[%s]}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout,
    table.concat(counts, ",")))
end
