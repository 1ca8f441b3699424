// Load for the benchmark: POST /users, by default as an open model at a constant arrival rate,
// whatever the latency (k6's constant-arrival-rate executor starts iterations on schedule; one
// that finds no free VU is counted in dropped_iterations). VUS=n instead runs a closed model of n
// looping VUs, to compare k6 with wrk. Run by tools/bench/k6.ts, which reads the summary this
// writes. Any answer other than 202 or 503 (or no answer) crosses a threshold: k6 exits 99 and the
// benchmark fails.
//   k6 run -e BASE_URL=… -e RATE=1000 -e DURATION=60s -e SUMMARY=out.json post_users_k6.js
import http from "k6/http";
import { Counter } from "k6/metrics";

const BASE_URL = __ENV.BASE_URL || "http://127.0.0.1:8000";
const RATE = Number(__ENV.RATE || 100);
const DURATION = __ENV.DURATION || "10s";

const accepted = new Counter("users_accepted");
const rejected = new Counter("users_rejected_503");
const failed = new Counter("users_failed");

export const options = {
  discardResponseBodies: true,
  thresholds: {
    users_failed: ["count==0"],
    // 503 is expected (see PARAMS), so this counts transport failures and other statuses.
    http_req_failed: ["rate==0"],
  },
  summaryTrendStats: ["avg", "med", "p(90)", "p(99)", "max"],
  scenarios: {
    load: __ENV.VUS ? { executor: "constant-vus", vus: Number(__ENV.VUS), duration: DURATION } : {
      executor: "constant-arrival-rate",
      rate: RATE,
      timeUnit: "1s",
      duration: DURATION,
      preAllocatedVUs: Number(__ENV.PRE_VUS || 50),
      maxVUs: Number(__ENV.MAX_VUS || 500),
    },
  },
};

const BODY = JSON.stringify({ name: "Queueing" });
const PARAMS = {
  headers: { "Content-Type": "application/json" },
  // 503 is an answer we count, not a transport failure.
  responseCallback: http.expectedStatuses(202, 503),
  timeout: "10s",
};

export default function () {
  const res = http.post(`${BASE_URL}/users`, BODY, PARAMS);
  if (res.status === 202) accepted.add(1);
  else if (res.status === 503) rejected.add(1);
  else failed.add(1);
}

export function handleSummary(data) {
  return { [__ENV.SUMMARY || "k6-summary.json"]: JSON.stringify(data) };
}
