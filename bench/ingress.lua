-- wrk script for bench/ingress.py:
--   wrk -t2 -c16 -d<S+3>s -s bench/ingress.lua http://127.0.0.1:8653 -- <path> <body-file> <S> [keyed]
--
-- For <S> seconds every request is POST <path> with the body of <body-file>
-- (Content-Type: application/json). After that, connections only send
-- GET /healthz until wrk stops, so every ingress request that was started
-- gets its answer and is counted: the queue depth must equal the 202s.
-- With "keyed", every POST carries an Idempotency-Key of its own (thread
-- number, a random run prefix, a counter): no two are duplicates, so the
-- depth must still equal the 202s (bench/ingress_idempotency.py).
--
-- Counts 202 answers ("ok"), /healthz answers ("idle", ignored) and anything
-- else ("bad", with a sample). Times come from CLOCK_MONOTONIC (LuaJIT FFI).
-- done() prints one line "BENCH key=value ..." for the Python driver.

local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec_t;
int clock_gettime(int clk_id, bench_timespec_t *tp);
]]
local ts = ffi.new("bench_timespec_t")
local function now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

-- Per-thread globals (read by done() through thread:get).
ok, bad, idle = 0, 0, 0
started, last_ok = 0, 0
bad_sample = ""

local post_req, idle_req, deadline
local keyed, key_prefix, key_count, post_path, post_body = false, "", 0, nil, nil

function init(args)
  local path, body_file, seconds = args[1], args[2], tonumber(args[3])
  local f = assert(io.open(body_file, "rb"))
  local body = f:read("*a")
  f:close()
  post_req = wrk.format("POST", path, { ["Content-Type"] = "application/json" }, body)
  keyed = args[4] == "keyed"
  if keyed then
    math.randomseed(os.time() + (thread_no or 0))
    key_prefix = string.format("bench-%d-%d-%d-", os.time(), thread_no or 0, math.random(1, 1000000000))
    post_path, post_body = path, body
  end
  idle_req = wrk.format("GET", "/healthz", {}, nil)
  started = now()
  deadline = started + seconds
end

function request()
  if now() < deadline then
    if keyed then
      key_count = key_count + 1
      local headers = { ["Content-Type"] = "application/json", ["Idempotency-Key"] = key_prefix .. key_count }
      return wrk.format("POST", post_path, headers, post_body)
    end
    return post_req
  end
  return idle_req
end

function response(status, headers, body)
  if status == 202 then
    ok = ok + 1
    last_ok = now()
  elseif status == 200 and body ~= nil and string.find(body, '"status"', 1, true) then
    idle = idle + 1
  else
    bad = bad + 1
    if bad_sample == "" then
      bad_sample = tostring(status) .. " " .. string.sub(body or "", 1, 200):gsub("%s+", " ")
    end
  end
end

function done(summary, latency, requests)
  local tok, tbad, tidle, t0, t1 = 0, 0, 0, nil, 0
  local sample = ""
  for _, thread in ipairs(threads) do
    tok = tok + thread:get("ok")
    tbad = tbad + thread:get("bad")
    tidle = tidle + thread:get("idle")
    local s = thread:get("started")
    if t0 == nil or s < t0 then t0 = s end
    local l = thread:get("last_ok")
    if l > t1 then t1 = l end
    if sample == "" then sample = thread:get("bad_sample") end
  end
  local e = summary.errors
  io.write(string.format(
    "BENCH ok=%d bad=%d idle=%d start=%.6f last_ok=%.6f connect=%d read=%d write=%d timeout=%d status=%d " ..
    "p50_ms=%.3f p99_ms=%.3f bad_sample=%s\n",
    tok, tbad, tidle, t0 or 0, t1, e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, (sample:gsub("%s", "_"))))
end
