/**
 * `GET /dashboard`: a live view of the pipeline for operators (ingest rate against stored rate,
 * depth by state, oldest queued age, live consumers) and its dead letters, listed one by one,
 * which it requeues or purges one, a selection, a kind or all at a time.
 *
 * What is served here is a static shell with no data in it: the page asks for the admin token
 * once, keeps it in sessionStorage, and sends it as a Bearer header on every call to the admin
 * routes (`/admin/overview` and `/admin/dead-letters` each second, `/admin/dead-letters/requeue`
 * and `/purge`). So the data is exactly
 * as protected as the admin API, and the token never appears where a URL would put it (Traefik's
 * access log, the browser's history, a Referer), nor in a cookie the browser would attach to a
 * forged cross-site POST. The route is mounted only with the admin routes (when ADMIN_TOKEN is
 * set), so a stack without them has no dashboard either.
 *
 * Every file, uPlot included, is a text import bundled into the module graph: the page works
 * offline (no CDN), `deno install --entrypoint server/main.ts` caches uPlot with the rest (the
 * Docker image), and the server needs no read permission. Text imports need `raw-imports`
 * among deno.json's `unstable` features.
 *
 * @module
 */

import { Hono } from "@hono/hono";
import uplotJs from "uplot/dist/uPlot.iife.min.js" with { type: "text" };
import uplotCss from "uplot/dist/uPlot.min.css" with { type: "text" };
import pageHtml from "./dashboard/page.html" with { type: "text" };
import pageJs from "./dashboard/page.js" with { type: "text" };
import pageCss from "./dashboard/page.css" with { type: "text" };
import ratesJs from "./dashboard/rates.js" with { type: "text" };
import deadLetterViewJs from "./dashboard/dead_letter_view.js" with { type: "text" };

const HTML = "text/html; charset=utf-8";
const JS = "text/javascript; charset=utf-8";
const CSS = "text/css; charset=utf-8";

/** File name under `/dashboard/` → [content type, body]. A Map: no inherited keys to serve. */
const ASSETS: ReadonlyMap<string, readonly [string, string]> = new Map([
  ["page.js", [JS, pageJs]],
  ["rates.js", [JS, ratesJs]],
  ["dead_letter_view.js", [JS, deadLetterViewJs]],
  ["page.css", [CSS, pageCss]],
  ["uPlot.iife.min.js", [JS, uplotJs]],
  ["uPlot.min.css", [CSS, uplotCss]],
]);

/**
 * The page shows dead-letter reasons, which come from payloads anyone could POST, and holds the
 * admin token: scripts and styles from this origin only (so injected markup cannot run or load
 * anything), and no framing (so the Requeue and Purge buttons cannot be clickjacked).
 */
const SECURITY_HEADERS = {
  "Content-Security-Policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "no-referrer",
  // A new deploy's page is picked up on reload; the files are small.
  "Cache-Control": "no-cache",
};

/** The dashboard's routes: `GET /dashboard` and its files under `/dashboard/`. */
export function dashboardRoutes(): Hono {
  const routes = new Hono();
  routes.get(
    "/dashboard",
    (c) => c.body(pageHtml, 200, { ...SECURITY_HEADERS, "Content-Type": HTML }),
  );
  routes.get("/dashboard/:file", (c, next) => {
    const asset = ASSETS.get(c.req.param("file"));
    if (asset === undefined) return next();
    const [type, body] = asset;
    return c.body(body, 200, { ...SECURITY_HEADERS, "Content-Type": type });
  });
  return routes;
}
