-- wrk script: POSTs one Open Inference Protocol request in the binary-tensor form (a JSON
-- header, then the raw input) again and again. The body and its header length come from
-- the environment (scripts/serve_loadtest.sh writes them):
--   DSINFER_WRK_BODY   the body file
--   DSINFER_WRK_HEADER the JSON header's length in bytes
--   DSINFER_WRK_PATH   the route, e.g. /v2/models/mlp/infer
-- done() prints one JSON line with the status counts and latency percentiles.
local f = assert(io.open(os.getenv("DSINFER_WRK_BODY"), "rb"))
wrk.method = "POST"
wrk.path = os.getenv("DSINFER_WRK_PATH")
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Inference-Header-Content-Length"] = os.getenv("DSINFER_WRK_HEADER")

local counts = {}
local threads = {}
function setup(thread)
  table.insert(threads, thread)
end
function init(args)
  statuses = {}
end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  local by_status = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for k, v in pairs(s) do by_status[k] = (by_status[k] or 0) + v end
  end
  local parts = {}
  for k, v in pairs(by_status) do table.insert(parts, string.format('"%d":%d', k, v)) end
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"seconds":%.3f,"requests_per_s":%.1f,"p50_ms":%.3f,"p99_ms":%.3f,' ..
    '"p999_ms":%.3f,"max_ms":%.3f,"socket_errors":{"connect":%d,"read":%d,"write":%d,' ..
    '"timeout":%d},"non_2xx":%d,"by_status":{%s}}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency:percentile(99.9) / 1000,
    latency.max / 1000, e.connect, e.read, e.write, e.timeout, e.status,
    table.concat(parts, ",")))
end
