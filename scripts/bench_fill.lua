-- wrk script of scripts/bench.sh's snapshot run: makes BENCH_FILL_KEYS live
-- windows of policy BENCH_FILL_POLICY, fast, with POST /v1/check carrying
-- 64 hits each (ids "c" and 15 digits, as rlnode bench draws them). Thread
-- t of n sends blocks t-1, t-1+n, ..., then its first again; after that it asks
-- GET /livez, until bench.sh sees every window live and interrupts wrk
-- (wrk itself always runs its whole -d).

local keys = tonumber(os.getenv("BENCH_FILL_KEYS") or "1000000")
local policy = os.getenv("BENCH_FILL_POLICY") or "snap"
local per = 64
local threads = {}

function setup(thread)
	table.insert(threads, thread)
	thread:set("tid", #threads)
	thread:set("nthreads", tonumber(os.getenv("BENCH_FILL_THREADS") or "2"))
end

function init(args)
	nextBlock = tid - 1
	-- wrk may build a thread's first request without sending it (seen with
	-- wrk 4.1: block 0 never arrived), so each thread sends its first
	-- block again after its last; a second hit on those keys is harmless.
	again = true
	failed = 0
	lastFailure = ""
end

function request()
	local b = nextBlock
	if b * per >= keys then
		if not again then
			return wrk.format("GET", "/livez")
		end
		again = false
		b = tid - 1
	else
		nextBlock = nextBlock + nthreads
	end
	local hits = {}
	for k = b * per, math.min(keys, (b + 1) * per) - 1 do
		hits[#hits + 1] = string.format('{"policy":"%s","client":"c%015d"}', policy, k)
	end
	return wrk.format("POST", "/v1/check", {["Content-Type"] = "application/json"},
		'{"hits":[' .. table.concat(hits, ",") .. ']}')
end

function response(status, headers, body)
	if status ~= 200 then
		failed = failed + 1
		lastFailure = status .. " " .. string.sub(body or "", 1, 300)
	end
end

function done(summary, latency, requests)
	for _, t in ipairs(threads) do
		if t:get("failed") > 0 then
			print(string.format("fill: thread %d: %d answers were not 200; the last: %s", t:get("tid"), t:get("failed"), t:get("lastFailure")))
		end
	end
end
