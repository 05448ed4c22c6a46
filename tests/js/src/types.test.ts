// The package's types against what its code returns: this file type-checks against the
// shipped agentwire.d.ts (tsc, strict), and every value it gets from real inputs (all the
// transcripts, server frames of every kind, errors) is checked at run time against shapes
// that tsc ties to those same types (src/shapes.ts; src/drift.ts proves the tie bites).

import { strict as assert } from "node:assert";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { Client, Projector } from "../../../pkg-web/agentwire.js";
import * as offline from "../../../pkg-web/transcripts/agentwire.js";
import type {
  AgentwireError, Batch, ClientOptions, Event, Format, Item, Lifecycle,
} from "../../../pkg-web/agentwire.js";
import { loadPackage, root, transcripts } from "./fixtures.js";
import { apply, arrayOf, assertShape, batch, errorCode, event, item, lifecycle, storeStatus } from "./shapes.js";

loadPackage();
const seen = { kinds: new Set<string>(), ops: new Set<string>(), notes: new Set<string>() };

function checkBatch(b: Batch, where: string): Batch {
  assertShape(batch, b, where);
  for (const s of b.sessions) {
    for (const c of s.changes) {
      seen.ops.add(c.op);
      if (c.op === "insert" || c.op === "update") seen.kinds.add(c.item.kind);
    }
    for (const n of s.notes ?? []) seen.notes.add(n.note);
  }
  for (const n of b.notes ?? []) seen.notes.add(n.note);
  return b;
}

function expectError(f: () => unknown, code: AgentwireError["code"]): void {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof Error, "a real Error");
    const err = e as AgentwireError;
    assert.equal(err.name, "AgentwireError");
    assertShape(errorCode, err.code, "error.code");
    assert.equal(err.code, code, err.message);
    return;
  }
  assert.fail(`expected an error with code ${code}`);
}

let events = 0;
for (const t of transcripts()) {
  // normalize(): one Event per line.
  const lines = offline.normalize(t.format, t.text, 0).split("\n");
  assert.equal(lines.pop(), "", "every line ends with a newline");
  const parsed: Event[] = lines.map((l, i) => assertShape(event, JSON.parse(l), `${t.name}:${i + 1}`));
  events += parsed.length;
  const text: string = offline.project(t.format, t.text, 0);
  assert.match(text, /^lifecycle: (initializing|idle|running|error|closed)\n/);

  // The same events as server frames, with a replay overlap, through a Projector; and as
  // binary frames (their UTF-8 bytes) through another, which drains the same batches.
  const p = new Projector();
  const pb = new Projector();
  const utf8 = new TextEncoder();
  const model = new Map<string, Item[]>();
  const frame = (evs: Event[]) => JSON.stringify({ t: "events", session: "local", epoch: "e1", events: evs });
  const both = (f: string) => {
    p.ingest(f, 0);
    pb.ingestBytes(utf8.encode(f), 0);
    const batch = p.drain();
    assert.deepEqual(pb.drain(), batch, `${t.name}: binary frames drain as text frames`);
    return batch;
  };
  for (let i = 0; i < parsed.length; i += 7) {
    apply(model, checkBatch(both(frame(parsed.slice(Math.max(0, i - 3), i + 7))), t.name));
  }
  apply(model, checkBatch(both(JSON.stringify({ t: "caught_up", session: "local", latest: parsed.length })), t.name));
  pb.free();
  const snapshot: Item[] = p.snapshot("local");
  assertShape({ check: arrayOf(item.check) }, snapshot, `${t.name} snapshot`);
  assert.deepEqual(model.get("local") ?? [], snapshot, `${t.name}: batches rebuild the snapshot`);
  assert.equal(p.after("local"), parsed.length);
  const state: Lifecycle | undefined = p.lifecycle("local");
  assertShape(lifecycle, state, "lifecycle");

  // The raw transcript through a transcript projector, in uneven pieces.
  const tp = offline.Projector.transcript(t.format, "local");
  const tmodel = new Map<string, Item[]>();
  for (let i = 0; i < t.text.length; i += 101) {
    tp.ingest(t.text.slice(i, i + 101), 0);
    apply(tmodel, checkBatch(tp.drain(), t.name));
  }
  tp.finish(0);
  apply(tmodel, checkBatch(tp.drain(), t.name));
  assert.deepEqual(tmodel.get("local") ?? [], snapshot, `${t.name}: live transcript = frames`);
  // And as bytes, in pieces that may end inside a character.
  const tb = offline.Projector.transcript(t.format, "local");
  const bytes = utf8.encode(t.text);
  for (let i = 0; i < bytes.length; i += 101) tb.ingestBytes(bytes.subarray(i, i + 101), 0);
  tb.finish(0);
  assert.deepEqual(tb.snapshot("local"), snapshot, `${t.name}: transcript bytes = frames`);
  p.free();
  tp.free();
  tb.free();
}

// Text outside ASCII reaches the page as it was sent: `drain()` hands `JSON.parse` the core's
// JSON with such characters escaped (src/wasm/mod.rs), `drainJson()` returns it as written.
{
  const texts = ["é", "thinking … ", "日本語のテキスト", "😀 and 👩‍💻", "\uffff\u2028\u0080", "x".repeat(13) + "…"];
  const evs = texts.map((text, i) => ({
    id: `evt_${String(i + 1).padStart(32, "0")}`, type: "message_sent", session_id: "u", run_id: `turn_${i}`,
    sequence: i + 1, timestamp: "2026-01-01T00:00:00.000Z", provider: "claude", data: { content: text, role: "user" },
    metadata: {}, schema_version: 1,
  }));
  const f = JSON.stringify({ t: "events", session: "u", epoch: "e1", events: evs });
  const [pa, pj] = [new Projector(), new Projector()];
  pa.ingest(f, 0);
  pj.ingestBytes(new TextEncoder().encode(f), 0);
  const b = checkBatch(pa.drain(), "non-ASCII");
  const got = b.sessions[0]!.changes.map((c) => (c.op === "insert" && c.item.kind === "user_message" ? c.item.text : null));
  assert.deepEqual(got, texts, "each text as sent");
  const json = pj.drainJson();
  assert.match(json, /…/, "drainJson() keeps the characters");
  assert.deepEqual(JSON.parse(json), b, "drain() = JSON.parse(drainJson())");
  pa.free();
  pj.free();
}

// Every other kind of frame, and frames that are not valid.
const p = new Projector();
const frames = [
  { t: "welcome", protocol: 1, epoch: "e1", max_frame: 65536, heartbeat_ms: 500, server: "x" },
  { t: "resync", session: "s1", after: 0 },
  { t: "reset", session: "s1", epoch: "e2", reason: "stale_epoch" },
  { t: "events", session: "s1", epoch: "e2", events: [] },
  { t: "error", code: "unknown_session", message: "no session", session: "s1" },
  { t: "error", code: "hello_required", message: "the first message must be hello" },
  { t: "reply", id: "c1", ok: true, result: { turnId: "t" } },
  { t: "heartbeat", now_ms: 1 },
  { t: "pong" },
  {
    t: "session_status", session: "s1",
    store: { state: "unavailable", error: "disk full", since: "2026-12-01T12:00:00.000Z", attempts: 2, unstored: 40 },
  },
];
for (const f of frames) p.ingest(JSON.stringify(f), 0);
const gap = JSON.parse(offline.normalize("claude", readFileSync(join(root, "examples", "claude-session.jsonl"), "utf8"), 0).split("\n")[2]!) as Event;
p.ingest(JSON.stringify({ t: "events", session: "s1", epoch: "e2", events: [{ ...gap, session_id: "s1" }] }), 0);
expectError(() => p.ingest("{not json", 0), "malformed_frame");
expectError(() => p.ingestBytes(new Uint8Array([0x7b, 0xff, 0x7d]), 0), "malformed_frame");
expectError(() => p.ingest(JSON.stringify({ t: "teleport" }), 0), "unknown_type");
const last = checkBatch(p.drain(), "frames");
assertShape(storeStatus, p.store("s1"), "store");
assert.equal(p.store("s1")?.unstored, 40);
assert.equal(p.store("nobody"), undefined);
assert.ok(last.notes?.some((n) => n.note === "error" && n.code === "malformed_frame"));
assert.equal(typeof p.drainJson(), "string");
const framesOnly = new offline.Projector();
expectError(() => framesOnly.finish(0), "not_a_transcript");
expectError(() => offline.normalize("cobol" as Format, "", 0), "unknown_provider");
expectError(() => offline.Projector.transcript("cobol" as Format), "unknown_provider");
assert.ok(!("transcript" in Projector) && !("normalize" in (await import("../../../pkg-web/agentwire.js"))),
  "the main entry carries no provider decoder");
expectError(() => new Client({ url: "http://x", token: "t", onChange: () => {} }), "bad_options");
expectError(() => new Client({} as ClientOptions), "bad_options");

// Coverage: the inputs exercised every variant that matters to a page.
for (const kind of ["user_message", "assistant_message", "reasoning", "tool_call", "todo", "error", "approval"]) {
  assert.ok(seen.kinds.has(kind), `no ${kind} item was produced`);
}
for (const op of ["insert", "append", "update", "usage", "approvals"]) assert.ok(seen.ops.has(op), `no ${op} change`);
for (const n of ["caught_up", "reset", "resync", "gap", "error", "diagnostic", "store"]) assert.ok(seen.notes.has(n), `no ${n} note`);

// The public declarations name no `any` (the raw wasm exports of the web build aside).
const anyType = /([:<|,(]\s*any\b)|(\bany\s*[[|>,)])/;
for (const entry of ["agentwire.d.ts", "transcripts/agentwire.d.ts"]) {
  const dts = readFileSync(join(root, "pkg", entry), "utf8");
  assert.deepEqual(dts.split("\n").filter((l) => anyType.test(l)), [], entry);
}
assert.ok(anyType.test("(a: number) => any,") && anyType.test("x: any;"), "the pattern finds `any`");
console.log(`types: ${events} events, every batch, item, change, note and error matched its type`);
