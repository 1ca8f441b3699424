// The dashboard test's load: tests/k6/accepted-k6.js's requests and lines, with a VU ready for every
// request that may be in flight. At RATE requests a second, answers may take up to
// REDIS_TIMEOUT_MS (1 s, docs/delivery.md, "Every answer is prompt"), so RATE VUs are made before the load
// starts. With fewer, every request that comes due while all VUs wait is dropped, never sent (k6
// makes more VUs mid-run, but slowly), and a brief slowdown well inside the contract would fail
// the test, which holds every request of the load to a 202.
//   k6 run --log-format=json -e PREFIX=run1 -e RATE=300 -e DURATION=8s tests/k6/dashboard-k6.js
export { default } from "./accepted-k6.js";

const RATE = Number(__ENV.RATE || 200);

export const options = {
  scenarios: {
    posts: {
      executor: "constant-arrival-rate",
      rate: RATE,
      timeUnit: "1s",
      duration: __ENV.DURATION || "20s",
      preAllocatedVUs: RATE,
      maxVUs: RATE,
    },
  },
};
