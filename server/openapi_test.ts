import assert from "node:assert/strict";
import type { Hono } from "@hono/hono";
import { ERROR_CODES, type ErrorCode } from "./api_error.ts";
import { createApp } from "./app.ts";
import { ApiMetrics } from "./metrics.ts";

const ID = "01934d5e-7b7c-7a1e-9c3f-1a2b3c4d5e6f";
const ADA = { id: ID, name: "Ada", enqueued_at: new Date(0), stored_at: new Date(1) };

/** An app over fakes; `full` adds the metrics, the admin routes, client keys and a rate limit. */
function fakeApp(full: boolean): Hono {
  return createApp({
    accept: () => Promise.resolve(),
    userStatus: (id) => Promise.resolve(id === ID ? { status: "stored", ...ADA } : undefined),
    listUsers: (limit) => Promise.resolve([ADA].slice(0, limit)),
    newId: () => ID,
    ...(full
      ? {
        metrics: new ApiMetrics({ replica: "server-1", processMetrics: false }),
        batch: {
          accept: (users) => Promise.resolve(users.map(() => undefined)),
          acceptOnce: (users) => Promise.resolve(users.map((user) => user.id)),
        },
        admin: {
          token: "s3cret-token-of-some-length",
          deadLetters: {
            list: (offset) => Promise.resolve({ total: 0, byReason: {}, offset, letters: [] }),
            requeue: () => Promise.resolve(0),
            purge: () => Promise.resolve(0),
          },
          overview: () => Promise.reject(new Error("not read by these tests")),
        },
        clientKeys: [{ name: "ada", key: "a-client-key-of-at-least-32-characters" }],
        rateLimit: {
          policy: '"users";q=1000;w=10',
          take: () =>
            Promise.resolve({
              allowed: true,
              remaining: 999,
              resetSeconds: 1,
              retryAfterSeconds: 0,
            }),
        },
      }
      : {}),
  });
}

/** What these tests read of a JSON Schema. */
interface Schema {
  readonly $ref?: string;
  readonly type?: string;
  readonly enum?: unknown[];
  readonly required?: string[];
  readonly properties?: Record<string, Schema>;
  readonly additionalProperties?: unknown;
  readonly discriminator?: { propertyName: string; mapping: Record<string, string> };
}

type Content = Record<string, { schema: Schema }>;

/** What these tests read of an OpenAPI operation. */
interface Operation {
  readonly operationId?: string;
  readonly parameters?: { name: string; in: string; required?: boolean }[];
  readonly requestBody?: { content: Content };
  readonly responses: Record<
    string,
    { description?: unknown; content?: Content; headers?: Record<string, unknown> }
  >;
}

/** What these tests read of an OpenAPI document. */
interface Document {
  readonly openapi: string;
  readonly info: { title: unknown; version: unknown };
  readonly paths: Record<string, Record<string, Operation>>;
  readonly components?: { securitySchemes?: unknown };
}

async function documentOf(app: Hono): Promise<Document> {
  const res = await app.request("/openapi.json");
  assert.equal(res.status, 200);
  assert.match(res.headers.get("Content-Type") ?? "", /^application\/json/);
  return await res.json();
}

const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/** Every documented operation as `METHOD /path`, paths in Hono's `:param` form. */
function documented(doc: Document): Set<string> {
  return new Set(
    Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).filter((key) => METHODS.includes(key)).map((method) =>
        `${method.toUpperCase()} ${path.replaceAll(/\{([^}]+)\}/g, ":$1")}`
      )
    ),
  );
}

/** The routes the app registers as `METHOD /path`, middleware (`ALL`) left out. */
function registered(app: Hono): Set<string> {
  return new Set(
    app.routes.filter((route) => route.method !== "ALL").map((r) => `${r.method} ${r.path}`),
  );
}

/** Routes for the operator, left out of the public document on purpose (`openapi.ts`). */
function isAdmin(route: string): boolean {
  return /^\S+ \/(admin|dashboard)(\/|$)/.test(route);
}

/** The schema a local `$ref` points at (undefined if none), or the schema itself. */
function resolve(doc: Document, schema: Schema | undefined): Schema | undefined {
  if (schema?.$ref === undefined) return schema;
  let node: unknown = doc;
  for (const key of schema.$ref.replace(/^#\//, "").split("/")) {
    node = (node as Record<string, unknown> | undefined)?.[key];
  }
  return node as Schema | undefined;
}

/** The schema of an answer's (or a body's) JSON. */
function jsonSchema(doc: Document, content: Content | undefined): Schema | undefined {
  return resolve(doc, content?.["application/json"]?.schema);
}

Deno.test("createApp() serves /openapi.json, a well-formed OpenAPI 3.1 document", async () => {
  for (const full of [false, true]) {
    const doc = await documentOf(fakeApp(full));
    assert.match(doc.openapi, /^3\.1\.\d+$/);
    assert.equal(typeof doc.info.title, "string");
    assert.equal(typeof doc.info.version, "string");
    const operationIds = new Set<string>();
    for (const [path, item] of Object.entries(doc.paths)) {
      assert.match(path, /^\//);
      const templated = [...path.matchAll(/\{([^}]+)\}/g)].map((match) => match[1]).sort();
      for (const [method, operation] of Object.entries(item)) {
        const where = `${method} ${path}`;
        assert.ok(METHODS.includes(method), `${where}: not an HTTP method`);
        assert.equal(typeof operation.operationId, "string", where);
        assert.ok(!operationIds.has(operation.operationId!), `${where}: operationId repeats`);
        operationIds.add(operation.operationId!);
        const inPath = (operation.parameters ?? []).filter((p) => p.in === "path");
        assert.deepEqual(inPath.map((p) => p.name).sort(), templated, where);
        assert.ok(inPath.every((p) => p.required === true), `${where}: optional path param`);
        const responses = Object.entries(operation.responses ?? {});
        assert.ok(responses.length > 0, `${where}: no responses`);
        for (const [status, response] of responses) {
          assert.match(status, /^([1-5]\d\d|default)$/, where);
          assert.equal(typeof response.description, "string", `${where} ${status}`);
        }
      }
    }
    // Every reference resolves inside the document.
    const refs = JSON.stringify(doc).matchAll(/"\$ref":"([^"]*)"/g);
    for (const [, ref = ""] of refs) {
      assert.match(ref, /^#\//);
      assert.ok(resolve(doc, { $ref: ref }) !== undefined, `${ref} does not resolve`);
    }
  }
});

Deno.test("createApp() has every route /openapi.json documents, and it answers", async () => {
  for (const full of [false, true]) {
    const app = fakeApp(full);
    const doc = await documentOf(app);
    const routes = registered(app);
    for (const route of documented(doc)) {
      assert.ok(routes.has(route), `${route} is documented but the app has no such route`);
      const [method, path] = route.split(" ") as [string, string];
      const res = await app.request(
        path.replace(":id", ID),
        method === "POST"
          ? { method, body: '{"name": "Ada"}', headers: { "Content-Type": "application/json" } }
          : { method },
      );
      const body = await res.text();
      assert.ok(!(res.status === 404 && body.includes("no route for")), `${route}: ${body}`);
      const operation = doc.paths[path.replace(":id", "{id}")]?.[method.toLowerCase()];
      assert.ok(
        String(res.status) in (operation?.responses ?? {}),
        `${route} answered ${res.status}`,
      );
    }
  }
});

Deno.test("/openapi.json documents every public route createApp() registers", async () => {
  for (const full of [false, true]) {
    const app = fakeApp(full);
    const doc = await documentOf(app);
    const known = documented(doc);
    const missing = [...registered(app)].filter((route) => !isAdmin(route) && !known.has(route));
    // What is left is a method guard (405 on PUT /users, say), which is no operation.
    for (const route of missing) {
      const [method, path] = route.split(" ") as [string, string];
      const res = await app.request(path, { method });
      assert.equal(res.status, 405, `${route} is not in /openapi.json: document it in openapi.ts`);
      assert.ok(res.headers.has("Allow"), route);
    }
    assert.equal(known.has("GET /metrics"), full, "GET /metrics is documented iff it exists");
  }
});

Deno.test("/openapi.json leaves out the admin routes and the dashboard even when mounted", async () => {
  const app = fakeApp(true);
  const doc = await documentOf(app);
  assert.ok([...registered(app)].some(isAdmin), "the admin routes are mounted");
  assert.deepEqual([...documented(doc)].filter(isAdmin), []);
  // The schemes of the documented routes only: the client keys', and the admin token of GET /users.
  assert.deepEqual(Object.keys(doc.components?.securitySchemes ?? {}).sort(), [
    "adminToken",
    "clientKey",
  ]);
  assert.equal((await documentOf(fakeApp(false))).components?.securitySchemes, undefined);
});

Deno.test("/openapi.json describes POST /users' body with the schema the route validates with", async () => {
  const app = fakeApp(false);
  const doc = await documentOf(app);
  const schema = jsonSchema(doc, doc.paths["/users"]?.post?.requestBody?.content);
  assert.equal(schema?.type, "object");
  assert.deepEqual(schema.required, ["name"]);
  assert.deepEqual(schema.properties, { name: { type: "string" } });
  assert.equal(schema.additionalProperties, false);
  // And the route does refuse what the document forbids.
  const res = await app.request("/users", {
    method: "POST",
    body: '{"name": "Ada", "age": 36}',
    headers: { "Content-Type": "application/json" },
  });
  assert.equal(res.status, 400);
});

Deno.test("/openapi.json describes a user's status as the union of stored, queued and dead", async () => {
  const doc = await documentOf(fakeApp(false));
  const union = jsonSchema(doc, doc.paths["/users/{id}"]?.get?.responses["200"]?.content);
  const mapping = union?.discriminator?.mapping ?? {};
  assert.equal(union?.discriminator?.propertyName, "status");
  assert.deepEqual(Object.keys(mapping).sort(), ["dead", "queued", "stored"]);
  const stored = resolve(doc, { $ref: mapping.stored ?? "" });
  // Dates are `Date`s in the type and ISO 8601 strings on the wire.
  assert.deepEqual(stored?.properties?.stored_at, {
    type: "string",
    format: "date-time",
    description: "when the row was committed",
  });
});

Deno.test("/openapi.json gives each error answer the codes it carries, each under its own status", async () => {
  const doc = await documentOf(fakeApp(true));
  const documentedCodes = new Set<string>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      for (const [status, response] of Object.entries(operation.responses)) {
        const schema = jsonSchema(doc, response.content);
        const codes = schema?.properties?.code?.enum;
        if (Number(status) < 400 || codes === undefined) continue;
        const where = `${method} ${path} ${status}`;
        assert.deepEqual(schema?.required?.sort(), ["code", "error"], where);
        for (const code of codes) {
          assert.ok(Object.hasOwn(ERROR_CODES, String(code)), `${where}: unknown code ${code}`);
          assert.equal(ERROR_CODES[code as ErrorCode].status, Number(status), `${where}: ${code}`);
          assert.match(String(response.description), new RegExp(`\`${code}\``), where);
          documentedCodes.add(String(code));
        }
        if (status === "503") assert.ok(response.headers?.["Retry-After"], where);
        if (status === "401") assert.ok(response.headers?.["WWW-Authenticate"], where);
        if (status === "429") {
          for (const header of ["Retry-After", "RateLimit-Policy", "RateLimit"]) {
            assert.ok(response.headers?.[header], `${where} ${header}`);
          }
        }
      }
    }
  }
  // The codes no public route gives: the admin routes' and those of a path or method with none.
  const notPublic = ["invalid_filter", "not_found", "method_not_allowed"];
  assert.deepEqual(
    [...documentedCodes].sort(),
    Object.keys(ERROR_CODES).filter((code) => !notPublic.includes(code)).sort(),
  );
});
