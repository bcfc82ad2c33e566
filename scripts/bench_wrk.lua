-- wrk script of scripts/bench.sh: the closed-loop runs with wrk as the load
-- generator (a C client costs a fraction of the CPU of a Go one, and every
-- system shares this machine's cores with it). It asks what `rlnode bench`
-- asks and writes the same JSON shape, so the report reads either.
--
-- Set by bench.sh through the environment (the main thread, which runs
-- setup and done, does not see wrk's script arguments):
--   BENCH_WRK_PATH   request path; every {key} becomes a 16-byte client id,
--                    "c" and 15 digits as in rlnode bench
--   BENCH_WRK_KEYS   number of distinct ids, drawn uniformly
--   BENCH_WRK_ZIPF   optional exponent s (e.g. 1.07): ids drawn by a Zipf
--                    law instead, id 0 the hottest (P(i) ~ (i+1)^-s)
--   BENCH_WRK_ADDRS  optional "host:port,host:port": thread i talks to
--                    address i mod n (followers round-robin); wrk spreads
--                    connections evenly over threads
--   BENCH_WRK_OUT    file the JSON result is written to
--   BENCH_WRK_CONNS  connections (for the JSON)

local path = os.getenv("BENCH_WRK_PATH") or "/check/{key}"
local keys = tonumber(os.getenv("BENCH_WRK_KEYS") or "1000")
local zipf_s = tonumber(os.getenv("BENCH_WRK_ZIPF") or "")
local cdf = nil

local threads = 0

function setup(thread)
	threads = threads + 1
	thread:set("id", threads)
	local addrs = os.getenv("BENCH_WRK_ADDRS") or ""
	local list = {}
	for a in string.gmatch(addrs, "[^,]+") do
		list[#list + 1] = a
	end
	if #list > 0 then
		local host, port = string.match(list[(threads - 1) % #list + 1], "^(.+):(%d+)$")
		thread.addr = wrk.lookup(host, port)[1]
	end
end

function init(args)
	-- Each thread its own sequence: seeding from the clock alone would give
	-- threads started in the same second the same keys.
	math.randomseed(os.time() * 1000 + id)
	if zipf_s then
		cdf = {}
		local sum = 0
		for i = 1, keys do
			sum = sum + i ^ -zipf_s
			cdf[i] = sum
		end
		for i = 1, keys do
			cdf[i] = cdf[i] / sum
		end
	end
end

-- pick is a key index: uniform, or by the Zipf law's cumulative weights
-- (binary search).
local function pick()
	if not cdf then
		return math.random(0, keys - 1)
	end
	local r, lo, hi = math.random(), 1, keys
	while lo < hi do
		local mid = math.floor((lo + hi) / 2)
		if cdf[mid] < r then lo = mid + 1 else hi = mid end
	end
	return lo - 1
end

function request()
	local p = string.gsub(path, "{key}", string.format("c%015d", pick()))
	return wrk.format("GET", p)
end

function done(summary, latency, requests)
	local e = summary.errors
	local errs = e.connect + e.read + e.write + e.timeout + e.status
	local secs = summary.duration / 1e6
	local ms = function(us) return us / 1000 end
	local out = io.open(os.getenv("BENCH_WRK_OUT"), "w")
	out:write(string.format([[{
  "client": "wrk",
  "mode": "closed",
  "concurrency": %d,
  "keys": %d,
  "zipf": %s,
  "path": %q,
  "durationMs": %d,
  "requests": %d,
  "ok": %d,
  "errors": %d,
  "errorKinds": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d},
  "throughputRps": %.1f,
  "latencyMs": {"p50": %.3f, "p90": %.3f, "p99": %.3f, "p999": %.3f, "max": %.3f, "mean": %.3f}
}
]], tonumber(os.getenv("BENCH_WRK_CONNS") or "0"), keys, tostring(zipf_s or "null"), path, math.floor(summary.duration / 1000),
		summary.requests, summary.requests - errs, errs,
		e.connect, e.read, e.write, e.timeout, e.status,
		summary.requests / secs,
		ms(latency:percentile(50)), ms(latency:percentile(90)), ms(latency:percentile(99)),
		ms(latency:percentile(99.9)), ms(latency.max), ms(latency.mean)))
	out:close()
end
