// The browser test's page (served by `agentwire serve --www`, so same origin): creates a demo
// session, follows it with a `Client`, starts a slow turn, has the server drop every
// WebSocket several times mid-turn, and reports what the page ended with next to the timeline
// of an uninterrupted run. tests/js/src/browser.test.ts drives it and asserts.

import init, { Client, Projector } from "agentwire";
import type { AgentwireError, ClientBatch, ConnectionState, Item } from "agentwire";
import { apply, assertShape, clientBatch } from "./shapes.js";

declare global {
  interface Window {
    scenario: Promise<Record<string, unknown>>;
  }
}

const token = new URLSearchParams(location.search).get("token") ?? "";
const DEADLINE_MS = 30_000;

/** Waits for a condition, checked once per animation frame, with a deadline. */
function until(what: string, done: () => boolean): Promise<void> {
  const start = performance.now();
  return new Promise((resolve, reject) => {
    const tick = () => {
      if (done()) return resolve();
      if (performance.now() - start > DEADLINE_MS) return reject(new Error(`timed out: ${what}`));
      requestAnimationFrame(tick);
    };
    tick();
  });
}

async function api(method: string, path: string, body?: unknown): Promise<any> {
  const r = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r.status === 204 ? null : r.json();
}

/** Counts the frames the server sends, by wrapping the WebSocket the package constructs: all,
 * binary ones, packed ones (first byte 0xA7), and text ones after a binary one on the same
 * socket (the Client asks for `binary_frames` and `packed_events`: from the welcome on, none
 * should be text; a heartbeat may precede it). */
let framesReceived = 0;
let binaryFrames = 0;
let packedFrames = 0;
let textAfterBinary = 0;
const NativeWebSocket = WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(url: string | URL, protocols?: string | string[]) {
    super(url, protocols);
    let binary = false;
    this.addEventListener("message", (e) => {
      framesReceived++;
      if (typeof e.data !== "string") {
        binary = true;
        binaryFrames++;
        if (new Uint8Array(e.data as ArrayBuffer)[0] === 0xa7) packedFrames++;
      } else if (binary) textAfterBinary++;
    });
  }
};

/** A Client whose batches are checked against the types and mirrored into a list. */
function follow(session: string) {
  const seen = {
    items: new Map<string, Item[]>(),
    states: [] as ConnectionState[],
    frameTimes: [] as number[],
    notes: [] as string[],
  };
  const client = new Client({
    url: `ws://${location.host}/ws`,
    token,
    sessions: [session],
    onChange: (b: ClientBatch) => {
      assertShape(clientBatch, b, "batch");
      seen.frameTimes.push(Number(document.timeline.currentTime));
      if (b.state) seen.states.push(b.state);
      for (const s of b.sessions) for (const n of s.notes ?? []) seen.notes.push(n.note);
      apply(seen.items, b);
    },
  });
  return { client, seen };
}

const code = (e: unknown) =>
  e instanceof Error ? `${e.name}:${(e as AgentwireError).code}` : `not an Error: ${String(e)}`;

async function scenario(): Promise<Record<string, unknown>> {
  await init();
  const session: string = (await api("POST", "/api/sessions", { provider: "demo" })).id;
  const { client, seen } = follow(session);
  await until("caught up", () => client.state === "caught_up");
  const { turnId } = await client.startTurn(session, "a slow answer, please");
  const errors = [
    code(await client.startTurn(session, "another").catch((e: unknown) => e)),
    code(await client.answerApproval(session, "req_none", "allow").catch((e: unknown) => e)),
    code(await client.answerApproval(session, "req_none", "maybe" as never).catch((e: unknown) => e)),
  ];
  const lifecycleAtDrops: string[] = [];
  for (let i = 0; i < 4; i++) {
    const after = client.after(session);
    await until("the turn streams", () => client.after(session) >= after + 12);
    lifecycleAtDrops.push(client.lifecycle(session) ?? "none");
    const drops = client.drops;
    const { dropped } = await api("POST", "/api/connections/drop");
    if (dropped < 1) throw new Error("no connection was dropped");
    await until("resumed", () => client.drops > drops && client.state !== "reconnecting");
  }
  await until("the turn ended", () => client.lifecycle(session) === "idle" && client.state === "caught_up");
  errors.push(code(await client.interrupt(session).catch((e: unknown) => e)));
  // The session contract: a mode the demo agent has, then what it refuses.
  const modeSet = await client.setMode(session, "dontAsk");
  for (const refused of [
    () => client.setMode(session, "plan"),
    () => client.setModel(session, { model: "another-model" }),
    () => client.setModel(session, {}),
    () => client.setModel(session, { thinking: "max" as never }),
    () => client.resumeSession(session),
  ]) {
    errors.push(code(await refused().catch((e: unknown) => e)));
  }
  const described = await client.describeSession(session);
  const viaApi = await api("GET", `/api/sessions/${session}`);
  const contract = (d: any) => [d.session, d.capabilities, d.modes, d.current_mode, d.commands];
  errors.push(code(await client.describeSession("ses_0ff").catch((e: unknown) => e)));
  await until("the mode change arrived", () => client.after(session) >= described.latest_sequence);
  await until("the last batch", () => framesReceived > 0 && seen.items.get(session)?.length === client.snapshot(session).length);
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));

  // An uninterrupted run: the whole stored log projected in one pass, and a second client.
  const { events, epoch } = await api("GET", `/api/sessions/${session}/events?after=0&limit=10000`);
  const reference = new Projector();
  reference.ingest(JSON.stringify({ t: "events", session, epoch, events }), Date.now());
  const second = follow(session);
  await until("the second client caught up", () => second.client.state === "caught_up");
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));

  const result = {
    turnId,
    events: events.length,
    drops: client.drops,
    lifecycleAtDrops,
    errors,
    modeSet: modeSet === undefined ? "resolved" : modeSet,
    currentMode: described.current_mode,
    describedLikeTheApi: JSON.stringify(contract(described)) === JSON.stringify(contract(viaApi)),
    describedNode: described.session.node,
    describedStore: described.store,
    store: client.store(session),
    states: seen.states,
    notes: seen.notes,
    callbacks: seen.frameTimes.length,
    distinctFrames: new Set(seen.frameTimes).size,
    framesReceived,
    binaryFrames,
    packedFrames,
    textAfterBinary,
    pageItems: seen.items.get(session) ?? [],
    snapshot: client.snapshot(session),
    reference: reference.snapshot(session),
    secondPage: second.seen.items.get(session) ?? [],
    secondSnapshot: second.client.snapshot(session),
  };
  client.close();
  second.client.close();
  client.free();
  second.client.free();
  return result;
}

window.scenario = scenario();
window.scenario.then(
  (r) => { document.getElementById("log")!.textContent = JSON.stringify(r, null, 1); },
  (e: unknown) => { document.getElementById("log")!.textContent = String(e); },
);
