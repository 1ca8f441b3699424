// The course's load test: N virtual users post random users through Traefik
// and check for 202. It does not look at the database; e2e-k6.js does.
//   docker compose run --rm --entrypoint=k6 k6-tests run /tests/hello-k6.js
//   ./stack k6 hello-k6.js
import http from "k6/http";
import { check } from "k6";

const BASE_URL = __ENV.BASE_URL || "http://traefik:8000";

export const options = {
  vus: Number(__ENV.VUS || 5),
  duration: __ENV.DURATION || "10s",
  thresholds: {
    checks: ["rate==1"],
  },
};

export default function () {
  const res = http.post(
    `${BASE_URL}/users`,
    JSON.stringify({ name: `User ${Math.random()}` }),
    { headers: { "Content-Type": "application/json" } },
  );
  check(res, { "status is 202": (r) => r.status === 202 });
}
