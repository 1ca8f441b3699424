// Not type-checked (no @ts-check, unlike rates.js): `deno check` checks the workspace as one
// program with Deno's lib, and adding the DOM's breaks Deno's stream types elsewhere. The JSDoc
// types are for the reader; tests/integration/dashboard_test.ts runs this file in Chromium.
/**
 * The dashboard's behaviour: asks for the admin token once (kept in sessionStorage, so it dies
 * with the tab), polls `GET /admin/overview` every second with it as a Bearer header, derives the
 * rates from successive polls (`rates.js`), and draws them with uPlot (loaded before this module
 * as the global `uPlot`). Every text that comes from the queue is set with `textContent`, never
 * parsed as HTML: dead-letter reasons echo what clients sent.
 *
 * @module
 */

import { formatAge, formatRate, rates, snapshotOf } from "./rates.js";

/** One poll per second: the rates are per-second figures and the page stays cheap to serve. */
const POLL_MS = 1000;
/** Two minutes of history on the chart. */
const CHART_POINTS = 120;
const TOKEN_KEY = "adminToken";

/** @type {import("./rates.js").Snapshot | undefined} */
let previous;
/** Chart columns: seconds since the epoch, ingest/s, stored/s. */
/** @type {[number[], number[], number[]]} */
const series = [[], [], []];
/** @type {any} */
let chart;
/** @type {ReturnType<typeof setTimeout> | undefined} */
let timer;

const byId = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));

function token() {
  return sessionStorage.getItem(TOKEN_KEY) ?? "";
}

/** Calls an admin route with the token; on 401 forgets the token and asks again. */
async function call(/** @type {string} */ path, /** @type {RequestInit} */ init = {}) {
  const response = await fetch(path, {
    ...init,
    headers: { ...init.headers, Authorization: `Bearer ${token()}` },
  });
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("the token was refused");
    throw new Error("unauthorized");
  }
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new Error(`${path} answered ${response.status}: ${body.error ?? ""}`);
  }
  return response.json();
}

function showLogin(/** @type {string} */ problem) {
  clearTimeout(timer);
  timer = undefined;
  byId("board").hidden = true;
  byId("login").hidden = false;
  byId("login-error").textContent = problem;
  byId("token").focus();
}

function start() {
  byId("login").hidden = true;
  byId("board").hidden = false;
  previous = undefined;
  poll();
}

async function poll() {
  try {
    const overview = await call("/admin/overview");
    render(overview);
    byId("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    byId("status").classList.remove("stale");
  } catch (error) {
    if (String(error).includes("unauthorized")) return;
    byId("status").textContent = `not updating: ${error instanceof Error ? error.message : error}`;
    byId("status").classList.add("stale");
  }
  timer = setTimeout(poll, POLL_MS);
}

/** @param {import("@users-pipeline/queue").Overview} overview `GET /admin/overview` */
function render(overview) {
  // The client's clock: the overview carries no time, and both polls are timed the same way.
  const current = snapshotOf(overview, Date.now());
  const rate = previous === undefined ? undefined : rates(previous, current);
  previous = current;

  byId("stored-total").textContent = current.stored.toLocaleString("en-US");
  const oldest = overview.oldest_queued_age_ms;
  byId("oldest-age").textContent = oldest === null ? "–" : formatAge(oldest);
  for (const [state, count] of Object.entries(overview.depth)) {
    byId(`depth-${state}`).textContent = count.toLocaleString("en-US");
  }
  if (rate !== undefined) {
    byId("ingest-rate").textContent = formatRate(rate.ingest);
    byId("stored-rate").textContent = formatRate(rate.stored);
    plot(current.at / 1000, rate.ingest, rate.stored);
  }
  renderConsumers(overview.consumers, rate?.consumers ?? {});
  renderDeadLetters(overview.dead_letters_by_reason);
}

function plot(
  /** @type {number} */ time,
  /** @type {number} */ ingest,
  /** @type {number} */ stored,
) {
  series[0].push(time);
  series[1].push(ingest);
  series[2].push(stored);
  for (const column of series) column.splice(0, column.length - CHART_POINTS);
  const element = byId("chart");
  if (chart === undefined) {
    // @ts-ignore: uPlot is the global the IIFE build defines.
    chart = new uPlot(
      {
        width: element.clientWidth || 800,
        height: 260,
        series: [
          {},
          { label: "ingest /s", stroke: "#1f77b4", width: 2 },
          { label: "stored /s", stroke: "#2ca02c", width: 2 },
        ],
        axes: [
          // Whole seconds as wall-clock time: uPlot's default shows milliseconds at this zoom.
          {
            space: 90,
            values: (/** @type {unknown} */ _, /** @type {number[]} */ ticks) =>
              ticks.map((t) => new Date(t * 1000).toLocaleTimeString()),
          },
          { label: "rows/s", size: 70 },
        ],
      },
      series,
      element,
    );
  } else {
    chart.setData(series);
  }
  element.dataset.points = String(series[0].length);
}

/**
 * @param {import("@users-pipeline/queue").Overview["consumers"]} consumers
 * @param {Record<string, number>} perSecond
 */
function renderConsumers(consumers, perSecond) {
  const rows = consumers.map((consumer) => {
    const rate = perSecond[consumer.id];
    return row([
      consumer.alive ? consumer.id : `${consumer.id} (heartbeat expired)`,
      rate === undefined ? "–" : formatRate(rate),
      consumer.stored.toLocaleString("en-US"),
    ]);
  });
  byId("consumers").querySelector("tbody")?.replaceChildren(...rows);
}

/** @param {Readonly<Record<string, number>>} counts dead letters by kind */
function renderDeadLetters(counts) {
  const entries = Object.entries(counts).filter(([, count]) => count > 0);
  const total = entries.reduce((sum, [, count]) => sum + count, 0);
  byId("dead-total").textContent = String(total);
  const rows = entries.map(([kind, count]) => {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "Requeue";
    button.addEventListener("click", () => requeue(kind));
    const tr = row([kind, count.toLocaleString("en-US"), button]);
    tr.dataset.kind = kind;
    tr.cells[0]?.classList.add("reason");
    return tr;
  });
  byId("dead-letters").querySelector("tbody")?.replaceChildren(...rows);
  /** @type {HTMLButtonElement} */ (byId("requeue-all")).disabled = total === 0;
}

/** A table row of text cells (or an element, set as is). */
function row(/** @type {(string | HTMLElement)[]} */ cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = document.createElement("td");
    if (typeof cell === "string") td.textContent = cell;
    else td.append(cell);
    tr.append(td);
  }
  return tr;
}

/** Requeues the dead letters of one kind, or all of them. */
async function requeue(/** @type {string | undefined} */ kind) {
  const result = byId("requeue-result");
  try {
    const answer = await call("/admin/dead-letters/requeue", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(kind === undefined ? {} : { reason: kind }),
    });
    result.textContent = `requeued ${answer.requeued}`;
    result.classList.remove("error");
  } catch (error) {
    result.textContent = `requeue failed: ${error instanceof Error ? error.message : error}`;
    result.classList.add("error");
  }
}

byId("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, /** @type {HTMLInputElement} */ (byId("token")).value.trim());
  start();
});
byId("requeue-all").addEventListener("click", () => requeue(undefined));

if (token() === "") showLogin("");
else start();
