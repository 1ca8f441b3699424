// Exactly once from the client's side: each iteration creates one user with an Idempotency-Key
// of its own, retries every answer other than 202 with the same key (after Retry-After) until
// the 202 comes, then sends the same request once more, as a client that never saw the first
// answer would, and must get the same id back without a second user. Run it while you restart
// Redis or kill a replica: the checks still hold.
//   docker compose run --rm --entrypoint=k6 k6-tests run /tests/keyed-k6.js
//   ./stack k6 keyed-k6.js
import http from "k6/http";
import { check, sleep } from "k6";
import { Counter } from "k6/metrics";

const BASE_URL = __ENV.BASE_URL || "http://traefik:8000";
// How long one user may be retried before the iteration gives it up (and fails its check).
const GIVE_UP_MS = Number(__ENV.GIVE_UP_MS || 60000);

const created = new Counter("users_created");
const retries = new Counter("retries");

export const options = {
  vus: Number(__ENV.VUS || 10),
  duration: __ENV.DURATION || "15s",
  thresholds: {
    checks: ["rate==1"],
    users_created: ["count>0"],
  },
};

function post(key, name) {
  return http.post(`${BASE_URL}/users`, JSON.stringify({ name }), {
    headers: { "Content-Type": "application/json", "Idempotency-Key": key },
    tags: { name: "POST /users" },
    // Every non-202 is retried below; none of them counts as a failed request.
    responseCallback: http.expectedStatuses(202, 503),
    timeout: "5s",
  });
}

// Names this run's users and keys apart from other runs' (each VU reads it once, at its start).
const RUN = __ENV.RUN_ID || String(Date.now());

/** Posts until the API answers 202 (every other answer retried with the same key), or gives up. */
function untilAccepted(key, name) {
  const start = Date.now();
  let res = post(key, name);
  let tries = 1;
  while (res.status !== 202 && Date.now() - start < GIVE_UP_MS) {
    retries.add(1);
    sleep(Number(res.headers["Retry-After"] || "0.2"));
    res = post(key, name);
    tries++;
  }
  return { res, tries };
}

export default function () {
  // Unique per run, VU and iteration; a client would use a UUID of its own.
  const key = `k6-${RUN}-${__VU}-${__ITER}`;
  const name = `keyed ${RUN} ${__VU}-${__ITER}`;
  const { res, tries } = untilAccepted(key, name);
  if (!check(res, { "POST /users with a key ends 202": (r) => r.status === 202 })) return;
  created.add(1);
  const { id } = res.json();
  // LOG_KEYS=1: one line per user for a test to hold the table to (the key, its name, its id).
  if (__ENV.LOG_KEYS === "1") console.log(JSON.stringify({ key, name, id, tries }));
  // The same request again, as a client that never saw the answer sends it (retried the same way).
  const again = untilAccepted(key, name).res;
  if (__ENV.LOG_KEYS === "1" && again.status === 202 && again.json("id") !== id) {
    console.warn(`replay of ${key} answered ${again.json("id")}, not ${id}`);
  }
  check(again, {
    "the same key again answers the same id": (r) => r.status === 202 && r.json("id") === id,
    "and says it is a replay": (r) => r.headers["Idempotent-Replayed"] === "true",
  });
}
