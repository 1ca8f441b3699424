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
import { answerLine, errorCode } from "./accepted-k6.js";

const BASE_URL = __ENV.BASE_URL || "http://traefik:8000";
// How long one user may be retried before the iteration gives it up (and fails its check).
const GIVE_UP_MS = Number(__ENV.GIVE_UP_MS || 60000);
const EXCUSE_CUT = __ENV.EXCUSE_CUT === "1";
/** The codes of the 503s docs/delivery.md's table names, each one a client retries. */
const CONTRACT_503 = ["queue_full", "queue_unavailable", "unconfirmed", "no_replica_ready"];
/** k6's error code for its own timeout: a hang, which no fault excuses. */
const TIMEOUT = 1050;

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
  const sentAt = Date.now();
  const res = http.post(`${BASE_URL}/users`, JSON.stringify({ name }), {
    headers: { "Content-Type": "application/json", "Idempotency-Key": key },
    tags: { name: "POST /users" },
    // Every non-202 is retried below; none of them counts as a failed request.
    responseCallback: http.expectedStatuses(202, 503),
    timeout: "5s",
  });
  // LOG_KEYS=1: every try too, in accepted-k6.js's lines, for a test to hold to its fault windows.
  if (__ENV.LOG_KEYS === "1") console.log(JSON.stringify(answerLine(name, sentAt, res)));
  check(res, {
    "every answer is a 202 or a 503 the contract names": (r) =>
      r.status === 202 || (r.status === 503 && CONTRACT_503.includes(errorCode(r))) ||
      (EXCUSE_CUT && r.error_code !== TIMEOUT && [0, 502, 504].includes(r.status)),
  });
  return res;
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
