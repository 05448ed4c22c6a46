// agentwire/react's store (pkg-web/react/store.js, no React needed): every transcript under
// tests/data/ streamed line by line through a real `Projector.transcript()`, one drain per
// line applied to the store. After each batch the store's items equal the projector's
// snapshot, every item that the batch's changes did not name is the same object as before,
// the items array itself stays when no item changed, and only the session's listeners run.
// Then a table of hand-made batches: approvals, lifecycle, connection state, reset, unsubscribe.

import { strict as assert } from "node:assert";

import { Projector } from "../../../pkg-web/transcripts/agentwire.js";
import type { Batch, ClientBatch, Item } from "agentwire";
import { AgentwireStore, CONNECTION } from "../../../pkg-web/react/store.js";
import { loadPackage, transcripts } from "./fixtures.js";

loadPackage();
const NOW_MS = Date.parse("2026-01-02T03:04:05.678Z");

let batches = 0;
let kept = 0;
let replaced = 0;
for (const t of transcripts()) {
  const projector = Projector.transcript(t.format, "local");
  const store = new AgentwireStore();
  const calls = { local: 0, other: 0, all: 0 };
  store.subscribe(() => calls.local++, "local");
  store.subscribe(() => calls.other++, "other");
  store.subscribe(() => calls.all++);
  const lines = t.text.split(/(?<=\n)/);
  for (let i = 0; i <= lines.length; i++) {
    if (i < lines.length) projector.ingest(lines[i]!, NOW_MS);
    else projector.finish(NOW_MS);
    const batch = projector.drain();
    const before = store.session("local");
    const callsBefore = { ...calls };
    store.apply(batch);
    batches++;
    const after = store.session("local");
    const where = `${t.name} line ${i + 1}`;
    assert.deepEqual(after.items, projector.snapshot("local"), `${where}: the store's items`);
    const s = batch.sessions.find((x) => x.session === "local");
    const named = new Set<number>();
    for (const c of s?.changes ?? []) if ("index" in c) named.add(c.index);
    if (s?.reset) {
      assert.ok(after.items !== before.items, `${where}: a reset replaces the items`);
      continue;
    }
    before.items.forEach((item: Item, index: number) => {
      if (named.has(index)) return;
      assert.equal(after.items[index], item, `${where}: item ${index} was not changed, yet replaced`);
      kept++;
    });
    replaced += named.size;
    if (named.size === 0) assert.equal(after.items, before.items, `${where}: no item changed, the array stays`);
    const changed = after !== before;
    assert.equal(calls.local - callsBefore.local, changed ? 1 : 0, `${where}: the session's listener`);
    assert.equal(calls.all - callsBefore.all, changed ? 1 : 0, `${where}: the store's listener`);
    assert.equal(calls.other, 0, `${where}: another session's listener ran`);
    if (!changed) assert.equal(store.session("local"), before);
  }
  projector.free();
}

// Hand-made batches, in order, through one store; each row says what the store then holds.
const approval = (id: string, status = "pending"): Item =>
  ({ kind: "approval", request_id: id, tool_name: "Bash", input: {}, status }) as Item;
const user: Item = { kind: "user_message", text: "hi" };
interface Row {
  name: string;
  batch: ClientBatch | Batch;
  /** Listeners expected to run: a, b (sessions), conn, all. */
  woken: string[];
  check: (s: AgentwireStore, before: ReturnType<AgentwireStore["session"]>) => void;
}
const rows: Row[] = [
  {
    name: "connection state only",
    batch: { sessions: [], state: "live" },
    woken: ["conn", "all"],
    check: (s) => assert.equal(s.connection(), "live"),
  },
  {
    name: "the same state again wakes nobody",
    batch: { sessions: [], state: "live" },
    woken: [],
    check: (s) => assert.equal(s.connection(), "live"),
  },
  {
    name: "items, an approval, a lifecycle",
    batch: {
      sessions: [{
        session: "a", after: 3, lifecycle: { state: "running", active_turn: "t1" },
        changes: [
          { op: "insert", index: 0, item: user },
          { op: "insert", index: 1, item: approval("r1") },
          { op: "approvals", pending: ["r1"] },
        ],
      }],
    },
    woken: ["a", "all"],
    check: (s) => {
      const a = s.session("a");
      assert.equal(a.items[0], user);
      assert.deepEqual(a.approvals.map((x) => (x as { request_id: string }).request_id), ["r1"]);
      assert.deepEqual(a.lifecycle, { state: "running", active_turn: "t1" });
    },
  },
  {
    name: "an equal lifecycle keeps its object and wakes nobody",
    batch: { sessions: [{ session: "a", after: 4, lifecycle: { state: "running", active_turn: "t1" }, changes: [] }] },
    woken: [],
    check: (s, before) => assert.equal(s.session("a"), before),
  },
  {
    name: "the approval answered: pending empties, the user message stays",
    batch: {
      sessions: [{
        session: "a", after: 5,
        changes: [{ op: "update", index: 1, item: approval("r1", "granted") }, { op: "approvals", pending: [] }],
      }],
    },
    woken: ["a", "all"],
    check: (s, before) => {
      const a = s.session("a");
      assert.deepEqual(a.approvals, []);
      assert.equal(a.items[0], before.items[0]);
      assert.equal(a.lifecycle, before.lifecycle);
    },
  },
  {
    name: "usage alone keeps the items",
    batch: {
      sessions: [{
        session: "a", after: 6,
        changes: [{
          op: "usage",
          totals: {
            input_tokens: 1, output_tokens: 2, cache_read_input_tokens: 0,
            cache_creation_input_tokens: 0, reasoning_output_tokens: 0, cost_usd: 0,
          },
        }],
      }],
    },
    woken: ["a", "all"],
    check: (s, before) => {
      assert.equal(s.session("a").items, before.items);
      assert.equal(s.session("a").usage?.output_tokens, 2);
    },
  },
  {
    name: "another session wakes only its own",
    batch: { sessions: [{ session: "b", after: 1, changes: [{ op: "insert", index: 0, item: user }] }] },
    woken: ["b", "all"],
    check: (s) => assert.equal(s.session("b").items.length, 1),
  },
  {
    name: "a reset drops what was held",
    batch: { sessions: [{ session: "a", after: 1, reset: true, changes: [{ op: "insert", index: 0, item: user }] }] },
    woken: ["a", "all"],
    check: (s) => assert.deepEqual(s.session("a").items, [user]),
  },
];
function check(): void {
  const store = new AgentwireStore();
  const woken: string[] = [];
  const off = [
    store.subscribe(() => woken.push("a"), "a"),
    store.subscribe(() => woken.push("b"), "b"),
    store.subscribe(() => woken.push("conn"), CONNECTION),
    store.subscribe(() => woken.push("all")),
  ];
  for (const row of rows) {
    woken.length = 0;
    const before = store.session("a");
    store.apply(row.batch);
    assert.deepEqual(woken.sort(), [...row.woken].sort(), `${row.name}: listeners woken`);
    row.check(store, before);
  }
  for (const f of off) f();
  woken.length = 0;
  store.apply({ sessions: [{ session: "a", after: 2, changes: [{ op: "insert", index: 1, item: user }] }], state: "closed" });
  assert.deepEqual(woken, [], "unsubscribed listeners ran");
}
check();

console.log(
  `react store: ${batches} batches from ${transcripts().length} transcripts, ${kept} unchanged items kept ` +
    `their object, ${replaced} changed ones replaced; ${rows.length} hand-made batches`,
);
