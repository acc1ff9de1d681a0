-- wrk script: POST one AdmissionReview body (BODY env var: path of the JSON file) on every request,
-- and print the result as one JSON line (prefixed "WRKJSON ") for bench/server.py to parse.
local path = os.getenv("BODY")
local f = assert(io.open(path, "rb"), "BODY must name a readable file")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json"

local non200 = 0
function response(status, headers, body)
  if status ~= 200 then non200 = non200 + 1 end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect_errors": %d, "read_errors": %d, ' ..
    '"write_errors": %d, "status_errors": %d, "timeouts": %d, "mean_ms": %.3f, "stdev_ms": %.3f, ' ..
    '"p50_ms": %.3f, "p90_ms": %.3f, "p99_ms": %.3f, "p999_ms": %.3f, "max_ms": %.3f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean / 1000, latency.stdev / 1000, latency:percentile(50) / 1000, latency:percentile(90) / 1000,
    latency:percentile(99) / 1000, latency:percentile(99.9) / 1000, latency.max / 1000))
end
