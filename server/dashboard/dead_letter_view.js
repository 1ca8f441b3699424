// @ts-check
/**
 * How the dashboard shows one dead letter and pages through them: the fields of a row (when,
 * kind, reason, the item) from a record of `GET /admin/dead-letters`, and which page to ask for
 * once letters come and go. Plain JavaScript the browser runs as it is, like `rates.js`.
 *
 * A letter is acted on by its user's id (`{"ids": […]}` to the admin routes), never by its
 * place in the list: consumers push new letters at the head and other operators take letters
 * out, so a place names another letter a moment later, while an id keeps naming its user. A
 * letter without an id (an item that was never an envelope) is named by its whole record
 * (`{"records": […]}`), which the listing gives for that purpose.
 *
 * @module
 */

/** The longest item shown in a row; the whole of it is in the cell's title. */
export const ITEM_CHARS = 160;

/**
 * One row of the dead-letter list.
 * @typedef {object} LetterRow
 * @property {string | undefined} id The user's id, when the letter has one.
 * @property {LetterName | undefined} name What names it alone to a requeue or purge; undefined
 *   only for a listing that gave neither an id nor a record.
 * @property {string} kind Its kind (`database_refused`, …), `unknown` when it carries none.
 * @property {string} reason Why it can never be stored, with PostgreSQL's SQLSTATE when it gave one.
 * @property {string} when When it was buried, as `YYYY-MM-DD HH:MM:SS` UTC; "" when unknown.
 * @property {string} deadAt The record's `dead_at` as it is (ISO 8601), for the cell's title.
 * @property {string} item The item as it was queued, cut to ITEM_CHARS.
 * @property {string} fullItem The whole item.
 */

/**
 * How the admin routes are told one letter: its user's id, or its whole record.
 * @typedef {{ field: "ids" | "records", value: string }} LetterName
 */

/**
 * The row of a record of `GET /admin/dead-letters`: a dead letter, or `{raw}` for a record
 * that is not one (pushed by hand), shown as its text.
 * @param {Record<string, unknown>} letter
 * @returns {LetterRow}
 */
export function letterRow(letter) {
  const text = (/** @type {unknown} */ value) => typeof value === "string" ? value : "";
  if (typeof letter.raw === "string") {
    return {
      id: undefined,
      name: { field: "records", value: letter.raw },
      kind: "unknown",
      reason: "not a dead-letter record",
      when: "",
      deadAt: "",
      item: cut(letter.raw),
      fullItem: letter.raw,
    };
  }
  const id = text(letter.id);
  const reason = text(letter.reason);
  const sqlstate = text(letter.sqlstate);
  const deadAt = text(letter.dead_at);
  const time = Date.parse(deadAt);
  const payload = text(letter.payload);
  const record = text(letter.record);
  /** @type {LetterName | undefined} */
  const name = id !== ""
    ? { field: "ids", value: id }
    : record !== ""
    ? { field: "records", value: record }
    : undefined;
  return {
    id: id === "" ? undefined : id,
    name,
    kind: text(letter.kind) || "unknown",
    reason: sqlstate === "" ? reason : `${reason} (SQLSTATE ${sqlstate})`,
    when: Number.isNaN(time) ? "" : new Date(time).toISOString().slice(0, 19).replace("T", " "),
    deadAt,
    item: cut(payload),
    fullItem: payload,
  };
}

function cut(/** @type {string} */ item) {
  return item.length <= ITEM_CHARS ? item : `${item.slice(0, ITEM_CHARS - 1)}…`;
}

/**
 * The body of a requeue or purge of the letters `names` names: their ids and their records.
 * @param {Iterable<LetterName>} names
 * @returns {{ ids?: string[], records?: string[] }}
 */
export function namedFilter(names) {
  /** @type {{ ids?: string[], records?: string[] }} */
  const filter = {};
  for (const { field, value } of names) (filter[field] ??= []).push(value);
  return filter;
}

/**
 * The offset of the page to show: `offset` while it still has letters, else the last page
 * that does (letters taken out from under the page the operator was on), 0 when none is left.
 * @param {number} offset
 * @param {number} limit
 * @param {number} total
 */
export function pageOffset(offset, limit, total) {
  if (offset < total) return offset;
  return total === 0 ? 0 : Math.floor((total - 1) / limit) * limit;
}
