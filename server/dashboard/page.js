// Not type-checked (no @ts-check, unlike rates.js): `deno check` checks the workspace as one
// program with Deno's lib, and adding the DOM's breaks Deno's stream types elsewhere. The JSDoc
// types are for the reader; tests/integration/dashboard_test.ts runs this file in Chromium.
/**
 * The dashboard's behaviour: asks for the admin token once (kept in sessionStorage, so it dies
 * with the tab), polls `GET /admin/overview` and a page of `GET /admin/dead-letters` every second
 * with it as a Bearer header, derives the rates from successive polls (`rates.js`), and draws
 * them with uPlot (loaded before this module as the global `uPlot`). Every text that comes from
 * the queue is set with `textContent`, never parsed as HTML: dead-letter reasons and items echo
 * what clients sent.
 *
 * Dead letters are requeued or purged one by one, as a selection (both by their user ids, or the
 * records of letters without one; see `dead_letter_view.js` for why never by their place), by
 * kind, or all; a purge, which cannot be undone, asks first.
 *
 * @module
 */

import { letterRow, namedFilter, pageOffset } from "./dead_letter_view.js";
import { formatAge, formatRate, rates, snapshotOf } from "./rates.js";

/** One poll per second: the rates are per-second figures and the page stays cheap to serve. */
const POLL_MS = 1000;
/** Two minutes of history on the chart. */
const CHART_POINTS = 120;
const TOKEN_KEY = "adminToken";
/** Dead letters per page: a screenful. */
const LETTERS_PER_PAGE = 20;

/** @type {import("./rates.js").Snapshot | undefined} */
let previous;
/** Chart columns: seconds since the epoch, ingest/s, stored/s. */
/** @type {[number[], number[], number[]]} */
const series = [[], [], []];
/** @type {any} */
let chart;
/** @type {ReturnType<typeof setTimeout> | undefined} */
let timer;
/** The dead-letter page shown: its offset, and what was drawn (redrawn only on a change). */
let letterOffset = 0;
let drawnLetters = "";
/** The counts by kind drawn last. */
let drawnKinds = "";
/** Dead letters in all, as the last page said. */
let deadTotal = 0;
/**
 * The letters ticked on the page shown, by what names each (`field` and `value` joined).
 * @type {Map<string, import("./dead_letter_view.js").LetterName>}
 */
const selected = new Map();
const nameKey = (/** @type {import("./dead_letter_view.js").LetterName} */ name) =>
  `${name.field}:${name.value}`;
/** True while a requeue or purge runs: the buttons wait for its answer. */
let busy = false;

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
    await refreshLetters();
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
          { label: "accepted users/s", stroke: "#1f77b4", width: 2 },
          { label: "stored users/s", stroke: "#2ca02c", width: 2 },
        ],
        axes: [
          // Whole seconds as wall-clock time: uPlot's default shows milliseconds at this zoom.
          {
            space: 90,
            values: (/** @type {unknown} */ _, /** @type {number[]} */ ticks) =>
              ticks.map((t) => new Date(t * 1000).toLocaleTimeString()),
          },
          { label: "users/s", size: 70 },
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
  // Redrawn only on a change, like the list: a button replaced mid-click loses the click.
  const drawn = JSON.stringify(entries);
  if (drawn === drawnKinds) return;
  drawnKinds = drawn;
  const rows = entries.map(([kind, count]) => {
    const actions = document.createElement("span");
    actions.append(
      button("Requeue", () => act("requeue", { reason: kind }, `every ${kind} letter`)),
      button("Purge", () => act("purge", { reason: kind }, `every ${kind} letter (${count})`)),
    );
    const tr = row([kind, count.toLocaleString("en-US"), actions]);
    tr.dataset.kind = kind;
    return tr;
  });
  byId("dead-letters").querySelector("tbody")?.replaceChildren(...rows);
}

/** Reads the dead-letter page shown, stepping back a page when letters left from under it. */
async function refreshLetters() {
  let page = await call(`/admin/dead-letters?offset=${letterOffset}&limit=${LETTERS_PER_PAGE}`);
  const offset = pageOffset(letterOffset, LETTERS_PER_PAGE, page.total);
  if (offset !== letterOffset) {
    letterOffset = offset;
    page = await call(`/admin/dead-letters?offset=${offset}&limit=${LETTERS_PER_PAGE}`);
  }
  renderLetters(page);
}

/**
 * Draws one page of `GET /admin/dead-letters`, only when it changed (a redraw each second would
 * take the row from under the operator's pointer), keeping the ticks of letters still shown.
 * @param {{ total: number, offset: number, letters: Record<string, unknown>[] }} page
 */
function renderLetters(page) {
  deadTotal = page.total;
  const drawn = JSON.stringify([page.total, page.offset, page.letters]);
  if (drawn !== drawnLetters) {
    drawnLetters = drawn;
    const letters = page.letters.map(letterRow);
    const shown = new Set(letters.flatMap((letter) => letter.name ? [nameKey(letter.name)] : []));
    for (const key of selected.keys()) if (!shown.has(key)) selected.delete(key);
    byId("letters").querySelector("tbody")?.replaceChildren(...letters.map(letterLine));
    const last = page.offset + letters.length;
    byId("letters-range").textContent = letters.length === 0
      ? "none"
      : `${page.offset + 1}–${last} of ${page.total.toLocaleString("en-US")}`;
    /** @type {HTMLButtonElement} */ (byId("letters-previous")).disabled = page.offset === 0;
    /** @type {HTMLButtonElement} */ (byId("letters-next")).disabled = last >= page.total;
  }
  updateControls();
}

/** @param {import("./dead_letter_view.js").LetterRow} letter */
function letterLine(letter) {
  const { name } = letter;
  const key = name ? nameKey(name) : "";
  const what = letter.id === undefined
    ? `this ${letter.kind} letter`
    : `the letter of ${letter.id}`;
  const tick = document.createElement("input");
  tick.type = "checkbox";
  tick.disabled = name === undefined;
  tick.checked = name !== undefined && selected.has(key);
  tick.setAttribute("aria-label", `select ${what}`);
  tick.addEventListener("change", () => {
    if (name === undefined) return;
    if (tick.checked) selected.set(key, name);
    else selected.delete(key);
    updateControls();
  });
  const item = document.createElement("code");
  item.textContent = letter.item;
  item.title = letter.fullItem;
  const actions = document.createElement("span");
  if (name !== undefined) {
    const filter = namedFilter([name]);
    actions.append(
      button("Requeue", () => act("requeue", filter, what)),
      button("Purge", () => act("purge", filter, what)),
    );
  }
  const tr = row([tick, letter.when, letter.kind, letter.reason, item, actions]);
  tr.dataset.id = letter.id ?? "";
  tr.dataset.key = key;
  tr.dataset.kind = letter.kind;
  tr.cells[1]?.setAttribute("title", letter.deadAt);
  tr.cells[3]?.classList.add("reason");
  tr.cells[4]?.classList.add("item");
  return tr;
}

/** Enables what can be done now: a selection, anything at all, nothing while an action runs. */
function updateControls() {
  const enable = (/** @type {string} */ id, /** @type {boolean} */ on) =>
    /** @type {HTMLButtonElement} */ (byId(id)).disabled = !on || busy;
  enable("requeue-selected", selected.size > 0);
  enable("purge-selected", selected.size > 0);
  enable("requeue-all", deadTotal > 0);
  enable("purge-all", deadTotal > 0);
  const ticks = [...byId("letters").querySelectorAll("tbody input:not(:disabled)")];
  const all = /** @type {HTMLInputElement} */ (byId("select-page"));
  all.disabled = ticks.length === 0;
  all.checked = ticks.length > 0 && ticks.every((tick) => /** @type {any} */ (tick).checked);
}

/** A button that runs `onClick`. */
function button(/** @type {string} */ label, /** @type {() => void} */ onClick) {
  const element = document.createElement("button");
  element.type = "button";
  element.textContent = label;
  element.addEventListener("click", onClick);
  return element;
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

/**
 * Requeues or purges the letters `filter` names (`{}` all, `{reason}` a kind, `{ids}` given
 * users, `{records}` given letters without an id), asking first for a purge, then shows the
 * answer and the list as it is now.
 * @param {"requeue" | "purge"} action
 * @param {{ reason?: string, ids?: string[], records?: string[] }} filter
 * @param {string} what the letters, for the purge's question
 */
async function act(action, filter, what) {
  // One at a time: the answer of one says what the next would act on.
  if (busy) return;
  if (action === "purge" && !confirm(`Purge ${what}? A purged letter is gone for good.`)) return;
  const result = byId("dead-result");
  busy = true;
  updateControls();
  try {
    const answer = await call(`/admin/dead-letters/${action}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(filter),
    });
    const done = action === "requeue" ? answer.requeued : answer.purged;
    const named = filter.ids || filter.records
      ? (filter.ids?.length ?? 0) + (filter.records?.length ?? 0)
      : done;
    const gone = named - done;
    // Another operator, or a consumer's requeue, may have taken some first.
    result.textContent = `${action}d ${done}` + (gone > 0 ? ` (${gone} no longer dead)` : "");
    result.classList.remove("error");
    selected.clear();
  } catch (error) {
    result.textContent = `${action} failed: ${error instanceof Error ? error.message : error}`;
    result.classList.add("error");
  } finally {
    busy = false;
  }
  drawnLetters = "";
  await refreshLetters().catch(() => updateControls());
}

function selection() {
  return namedFilter(selected.values());
}

byId("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, /** @type {HTMLInputElement} */ (byId("token")).value.trim());
  start();
});
byId("requeue-all").addEventListener("click", () => act("requeue", {}, "every dead letter"));
byId("purge-all").addEventListener(
  "click",
  () => act("purge", {}, `every dead letter (${deadTotal.toLocaleString("en-US")} now)`),
);
byId("requeue-selected").addEventListener("click", () => {
  act("requeue", selection(), `${selected.size} selected letters`);
});
byId("purge-selected").addEventListener("click", () => {
  act("purge", selection(), `${selected.size} selected letters`);
});
byId("select-page").addEventListener("change", (event) => {
  const on = /** @type {HTMLInputElement} */ (event.target).checked;
  for (const tick of byId("letters").querySelectorAll("tbody input:not(:disabled)")) {
    /** @type {HTMLInputElement} */ (tick).checked = on;
    tick.dispatchEvent(new Event("change"));
  }
  updateControls();
});
byId("letters-previous").addEventListener("click", () => turnPage(-LETTERS_PER_PAGE));
byId("letters-next").addEventListener("click", () => turnPage(LETTERS_PER_PAGE));

/** Shows the next (older) or previous (newer) page; the ticks stay with the page they were on. */
function turnPage(/** @type {number} */ by) {
  letterOffset = Math.max(0, letterOffset + by);
  selected.clear();
  refreshLetters().catch(() => {});
}

if (token() === "") showLogin("");
else start();
