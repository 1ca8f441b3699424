// Posts users with unique names at a steady rate and logs what became of each one as a JSON line,
// so a test can hold every 202 to exactly one row while it crashes and restarts things.
//   docker compose run --rm --no-deps --entrypoint=k6 k6-tests run --log-format=json \
//     -e PREFIX=run1 -e RATE=200 -e DURATION=30s /tests/accepted-k6.js
// Answers other than 202 are expected while a test injects faults, so k6 fails none of them: the
// test reads the lines and decides. k6 fails only a load it did not send in full.
import http from "k6/http";

const BASE_URL = __ENV.BASE_URL || "http://traefik:8000";
const PREFIX = __ENV.PREFIX || "accepted";

export const options = {
  scenarios: {
    posts: {
      executor: "constant-arrival-rate",
      rate: Number(__ENV.RATE || 200),
      timeUnit: "1s",
      duration: __ENV.DURATION || "20s",
      // One VU per request that may be in flight: answers take up to REDIS_TIMEOUT_MS (1 s), so
      // RATE of them, made before the load starts. With fewer, a request that comes due while every
      // VU waits is never sent, and a load would quietly send less than it says.
      preAllocatedVUs: Number(__ENV.RATE || 200),
      maxVUs: Number(__ENV.RATE || 200),
    },
  },
  // A request that came due while every VU waited was never sent: the load was smaller than it
  // says, and the answers that held the VUs were slower than the contract lets them be.
  thresholds: { dropped_iterations: ["count==0"] },
};

export default function () {
  const name = `${PREFIX} ${__VU}-${__ITER}`;
  // When it was sent and how long its answer took, so a test can hold each answer to the fault
  // window that explains it and to the promised answer time.
  const sentAt = Date.now();
  const res = http.post(`${BASE_URL}/users`, JSON.stringify({ name }), {
    headers: { "Content-Type": "application/json" },
    timeout: "10s",
    responseCallback: http.expectedStatuses(202),
  });
  console.log(JSON.stringify(answerLine(name, sentAt, res)));
}

/** What a test reads of one request: when it was sent, how long it took, and what answered. */
export function answerLine(name, sentAt, res) {
  return {
    name,
    sent_at: sentAt,
    ms: Date.now() - sentAt,
    status: res.status,
    id: res.status === 202 ? idOf(res) : null,
    retry_after: res.headers["Retry-After"] || null,
    // Why a non-202 was refused, for the test to branch on: the API's `code`, or the X-Error-Code
    // of Traefik's own 503, whose body is plain text.
    code: res.status === 202 ? null : errorCode(res),
    error: res.error || null,
    // k6's number for a failed request: 1050 is its own timeout (a hang), not a cut connection.
    error_code: res.error_code || null,
    // Whose refusal a non-202 was: the API's message, or Traefik's own "no available server".
    body: res.status === 202 || !res.body ? null : String(res.body).slice(0, 200),
  };
}

function idOf(res) {
  try {
    return res.json("id");
  } catch (_) {
    return null;
  }
}

/** The API's `code` of a refusal, or the X-Error-Code of Traefik's own 503; null for neither. */
export function errorCode(res) {
  try {
    const code = res.json("code");
    if (typeof code === "string") return code;
  } catch (_) {
    // Not JSON: an answer of Traefik's, or no answer at all.
  }
  return res.headers["X-Error-Code"] || null;
}
