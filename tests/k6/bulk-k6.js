// Many users a request: each iteration sends one POST /users/batch of BATCH users (100 by
// default) and checks its answer against the contract (docs/api.md, "POST /users/batch"): a 202
// with an id per user in order, or a 207/503 whose every item has an id and, when refused, a code
// a refused POST /users would carry. `users_accepted` counts users, so its rate is users/s.
// KEYED=1 sends each batch with an Idempotency-Key, retries it until a 202, then sends it once
// more and checks that the same ids come back.
//   docker compose run --rm --entrypoint=k6 k6-tests run /tests/bulk-k6.js
//   ./stack k6 bulk-k6.js -e BATCH=1000 -e VUS=4
import http from "k6/http";
import { check, sleep } from "k6";
import { Counter } from "k6/metrics";
import { errorCode } from "./accepted-k6.js";

const BASE_URL = __ENV.BASE_URL || "http://traefik:8000";
const BATCH = Number(__ENV.BATCH || 100);
const KEYED = __ENV.KEYED === "1";
// How long a keyed batch may be retried before the iteration gives it up (and fails its check).
const GIVE_UP_MS = Number(__ENV.GIVE_UP_MS || 60000);
/** The codes a refused item may carry (docs/delivery.md's table). */
const ITEM_503 = ["queue_full", "queue_unavailable", "unconfirmed"];

const accepted = new Counter("users_accepted");
const refused = new Counter("users_refused");

export const options = {
  vus: Number(__ENV.VUS || 4),
  duration: __ENV.DURATION || "15s",
  thresholds: {
    checks: ["rate==1"],
    users_accepted: ["count>0"],
  },
};

// Names this run's users and keys apart from other runs' (each VU reads it once, at its start).
const RUN = __ENV.RUN_ID || String(Date.now());

function post(body, key) {
  const headers = { "Content-Type": "application/json" };
  if (key !== undefined) headers["Idempotency-Key"] = key;
  return http.post(`${BASE_URL}/users/batch`, body, {
    headers,
    tags: { name: "POST /users/batch" },
    // A 207 or a 503 is an answer of the contract, checked below, not a failed request.
    responseCallback: http.expectedStatuses(202, 207, 503),
    timeout: "10s",
  });
}

/** Whether every item of a 207 or a 503 has an id and, if refused, a code of the contract. */
function settleable(res) {
  const items = res.json("items");
  return Array.isArray(items) && items.length === BATCH &&
    items.every((item) =>
      typeof item.id === "string" &&
      (item.status === 202 || (item.status === 503 && ITEM_503.includes(item.code)))
    );
}

function count(res) {
  if (res.status === 202) {
    accepted.add(BATCH);
  } else if (res.status === 207 || res.status === 503) {
    const items = res.json("items") || [];
    const queued = items.filter((item) => item.status === 202).length;
    accepted.add(queued);
    refused.add(items.length - queued);
  }
}

export default function () {
  const names = Array.from({ length: BATCH }, (_, i) => ({ name: `bulk ${RUN} ${__VU}-${__ITER}-${i}` }));
  const body = JSON.stringify(names);
  if (!KEYED) {
    const res = post(body);
    count(res);
    check(res, {
      "a 202 with an id per user, or a 207/503 with an id and outcome per user": (r) =>
        (r.status === 202 && r.json("items").length === BATCH) ||
        ((r.status === 207 || (r.status === 503 && ITEM_503.includes(errorCode(r)))) &&
          settleable(r)),
    });
    if (res.status !== 202) sleep(Number(res.headers["Retry-After"] || "0.2"));
    return;
  }
  const key = `k6-bulk-${RUN}-${__VU}-${__ITER}`;
  const start = Date.now();
  let res = post(body, key);
  while (res.status !== 202 && res.status !== 422 && Date.now() - start < GIVE_UP_MS) {
    sleep(Number(res.headers["Retry-After"] || "0.2"));
    res = post(body, key);
  }
  if (!check(res, { "a keyed batch ends 202": (r) => r.status === 202 })) return;
  accepted.add(BATCH);
  const again = post(body, key);
  check(again, {
    "the same key again answers the same ids": (r) =>
      r.status === 202 && JSON.stringify(r.json("items")) === JSON.stringify(res.json("items")),
    "and says it is a replay": (r) => r.headers["Idempotent-Replayed"] === "true",
  });
}
