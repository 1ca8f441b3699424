// End to end: every user the API accepts must reach the database. Each
// iteration posts a user, then polls GET /users/{id} (served from the users
// table) until the row is there, and records how long that took.
//   docker compose run --rm --entrypoint=k6 k6-tests run /tests/e2e-k6.js
//   ./stack k6 e2e-k6.js
import http from "k6/http";
import { check, sleep } from "k6";
import { Counter, Trend } from "k6/metrics";

const BASE_URL = __ENV.BASE_URL || "http://traefik:8000";
// How long an accepted user may take to be stored before the test fails.
const STORE_DEADLINE_MS = Number(__ENV.STORE_DEADLINE_MS || 15000);

const accepted = new Counter("users_accepted");
const stored = new Counter("users_stored");
const acceptedToStored = new Trend("accepted_to_stored", true);

export const options = {
  vus: Number(__ENV.VUS || 10),
  duration: __ENV.DURATION || "15s",
  thresholds: {
    checks: ["rate==1"],
    // Every accepted user was found in the table.
    users_stored: ["count>0"],
  },
};

export default function () {
  const res = http.post(
    `${BASE_URL}/users`,
    JSON.stringify({ name: `e2e ${__VU}-${__ITER}` }),
    { headers: { "Content-Type": "application/json" }, tags: { name: "POST /users" } },
  );
  if (!check(res, { "POST /users is 202": (r) => r.status === 202 })) return;
  accepted.add(1);
  const { id } = res.json();
  const start = Date.now();
  let found = false;
  while (!found && Date.now() - start < STORE_DEADLINE_MS) {
    const lookup = http.get(`${BASE_URL}/users/${id}`, {
      tags: { name: "GET /users/:id" },
      responseCallback: http.expectedStatuses(200, 404),
    });
    // 200 says queued, stored or dead; only "stored" with our id counts.
    found = lookup.status === 200 && lookup.json("status") === "stored" &&
      lookup.json("id") === id;
    if (!found) sleep(0.05);
  }
  if (check(found, { "accepted user reached the database": (ok) => ok })) {
    stored.add(1);
    acceptedToStored.add(Date.now() - start);
  }
}
