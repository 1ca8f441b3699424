// Smoke test: a few virtual users POST users for a few seconds through Traefik; every request
// must be accepted (202). Each accepted id is logged as `accepted <id>`, so a caller can check
// that exactly these users reach the database (tests/integration/native_stack_test.ts does).
//
//   ./stack k6 smoke-k6.js                                   (native stack)
//   docker compose run --rm --entrypoint=k6 k6-tests run /tests/smoke-k6.js
import http from "k6/http";
import { check } from "k6";

const BASE_URL = __ENV.BASE_URL || "http://traefik:8000";

export const options = {
  vus: 5,
  duration: "5s",
  thresholds: {
    checks: ["rate==1"],
    http_req_failed: ["rate==0"],
  },
};

export default function () {
  const response = http.post(
    `${BASE_URL}/users`,
    JSON.stringify({ name: `smoke ${__VU}-${__ITER}` }),
    { headers: { "Content-Type": "application/json" } },
  );
  const accepted = check(response, {
    "status is 202": (r) => r.status === 202,
    "body has the id": (r) => r.status === 202 && typeof r.json("id") === "string",
  });
  if (accepted) console.log(`accepted ${response.json("id")}`);
}
