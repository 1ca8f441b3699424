import assert from "node:assert/strict";
import { createApp } from "./app.ts";
import { dashboardRoutes } from "./dashboard.ts";

Deno.test("dashboardRoutes() serves the page shell, which holds no data, with a strict CSP", async () => {
  const res = await dashboardRoutes().request("/dashboard");
  assert.equal(res.status, 200);
  assert.match(res.headers.get("Content-Type") ?? "", /^text\/html/);
  assert.match(res.headers.get("Content-Security-Policy") ?? "", /script-src 'self';/);
  assert.match(res.headers.get("Content-Security-Policy") ?? "", /frame-ancestors 'none'/);
  const html = await res.text();
  assert.match(html, /<script src="\/dashboard\/uPlot\.iife\.min\.js">/);
  assert.match(html, /<script type="module" src="\/dashboard\/page\.js">/);
});

Deno.test("dashboardRoutes() serves uPlot from the npm package, not from a CDN", async () => {
  const routes = dashboardRoutes();
  const js = await routes.request("/dashboard/uPlot.iife.min.js");
  assert.equal(js.status, 200);
  assert.match(js.headers.get("Content-Type") ?? "", /^text\/javascript/);
  assert.match(await js.text(), /uPlot \(v1\.6\.32\)/);
  const css = await routes.request("/dashboard/uPlot.min.css");
  assert.match(css.headers.get("Content-Type") ?? "", /^text\/css/);
  assert.match(await css.text(), /\.uplot/);
});

Deno.test("dashboardRoutes() serves the page's modules and nothing else under /dashboard/", async () => {
  const routes = dashboardRoutes();
  for (const file of ["page.js", "rates.js", "dead_letter_view.js", "page.css"]) {
    assert.equal((await routes.request(`/dashboard/${file}`)).status, 200, file);
  }
  for (const file of ["constructor", "page.html", "..%2Fdashboard.ts", "nope.js"]) {
    assert.equal((await routes.request(`/dashboard/${file}`)).status, 404, file);
  }
});

/** createApp() over fakes, with or without the admin routes. */
function app(admin: boolean) {
  const none = () => Promise.reject(new Error("not called"));
  return createApp({
    accept: () => Promise.resolve(),
    userStatus: () => Promise.resolve(undefined),
    listUsers: () => Promise.resolve([]),
    admin: admin
      ? {
        token: "a-token-of-sixteen-chars",
        deadLetters: { list: none, requeue: none, purge: none },
        overview: none,
      }
      : undefined,
  });
}

Deno.test("createApp() serves /dashboard only along with the admin routes it shows", async () => {
  assert.equal((await app(true).request("/dashboard")).status, 200);
  assert.equal((await app(true).request("/dashboard/uPlot.min.css")).status, 200);
  const without = await app(false).request("/dashboard");
  assert.equal(without.status, 404);
  assert.match((await without.json()).error, /no route/);
});

Deno.test("dashboardRoutes() shows the rates in users per second, whatever each request carries", async () => {
  const html = await (await dashboardRoutes().request("/dashboard")).text();
  // The rates come from the queue's counts of users (rates.js), so a batch counts each user.
  assert.match(html, /<span id="ingest-rate">–<\/span> users\/s/);
  assert.match(html, /<span id="stored-rate">–<\/span> users\/s/);
});
