// The page of the projector benchmark (tests/js/src/projector.bench.ts drives it): the same
// server frames fed to the wasm `Projector` and to the plain reducer a frontend developer
// would write instead, in one Chromium. Nothing here is a test; it reports times.

import init, { Projector } from "agentwire";
import type { Batch, Item } from "agentwire";

declare global {
  interface Window {
    bench: (n: number, reps: number) => Promise<Record<string, unknown>>;
    ready: Promise<void>;
  }
}

// ---- The baseline: a plain JS reducer, as a frontend developer writes it (~40 lines). ----
type Plain = { after: number; items: any[]; byId: Map<string, any>; usage: { input: number; output: number } };
function plainReducer(): Plain {
  return { after: 0, items: [], byId: new Map(), usage: { input: 0, output: 0 } };
}
function plainIngest(s: Plain, frame: string): void {
  const msg = JSON.parse(frame);
  if (msg.t !== "events") return;
  for (const e of msg.events) {
    if (e.sequence !== s.after + 1) continue; // a replayed or out-of-order event: skip
    s.after = e.sequence;
    const d = e.data, run = e.run_id;
    switch (e.type) {
      case "message_sent": s.items.push({ kind: "user_message", text: d.content, run_id: run }); break;
      case "message_streamed": case "reasoning_streamed": {
        const it = s.byId.get(d.message_id);
        if (it) { if (it.streaming) it.text += d.delta; break; }
        const kind = e.type === "message_streamed" ? "assistant_message" : "reasoning";
        const item = { kind, message_id: d.message_id, text: d.delta, streaming: true, discarded: false, run_id: run };
        s.items.push(item); s.byId.set(d.message_id, item); break;
      }
      case "message_received": {
        const it = s.byId.get(d.message_id);
        if (it) { it.text = d.content; it.streaming = false; }
        else { const item = { kind: "assistant_message", message_id: d.message_id, text: d.content, streaming: false, discarded: false, run_id: run }; s.items.push(item); s.byId.set(d.message_id, item); }
        break;
      }
      case "tool_call_started": {
        const item = { kind: "tool_call", tool_call_id: d.tool_call_id, tool_name: d.tool_name, input: d.tool_input, status: "running", output: "", run_id: run };
        s.items.push(item); s.byId.set(d.tool_call_id, item); break;
      }
      case "tool_call_completed": {
        const it = s.byId.get(d.tool_call_id);
        if (it) { it.status = "completed"; it.output = d.tool_output; } break;
      }
      case "token_usage_updated": s.usage.input += d.input_tokens; s.usage.output += d.output_tokens; break;
      case "run_completed":
        for (let i = s.items.length - 1; i >= 0 && s.items[i].run_id === run; i--) {
          const it = s.items[i];
          if (it.streaming) it.streaming = false;
          if (it.status === "running") it.status = "cancelled";
        }
        break;
    }
  }
}
// ---- end of the baseline ----

/** What a page does with each batch: mirror it into its own list. */
function applyBatch(items: Item[], b: Batch): void {
  for (const s of b.sessions) {
    if (s.reset) items.length = 0;
    for (const c of s.changes) {
      if (c.op === "insert") items.push(c.item);
      else if (c.op === "append") {
        const it = items[c.index] as any;
        if (it.kind === "tool_call") it.output += c.text;
        else it.text += c.text;
      } else if (c.op === "update") items[c.index] = c.item;
    }
  }
}

let wasmMemory: WebAssembly.Memory;
let live: string[] = [];
let catchup: string[] = [];
// The same frames as binary messages (what a WebSocket hands the `Client` from a server asked
// for `binary_frames`: the UTF-8 bytes of the same JSON text), encoded before any timing.
let liveBytes: Uint8Array[] = [];
let catchupBytes: Uint8Array[] = [];
// And packed (`packed_events`: what the package's `Client` asks for, so what it gets), as
// `agentwire-testkit frames --packed` wrote them: each after its length (4 bytes, LE).
let livePacked: Uint8Array[] = [];
let catchupPacked: Uint8Array[] = [];
let hasPacked = true;
function splitPacked(buf: ArrayBuffer): Uint8Array[] {
  const view = new DataView(buf), out: Uint8Array[] = [];
  for (let at = 0; at < buf.byteLength; ) {
    const len = view.getUint32(at, true);
    out.push(new Uint8Array(buf, at + 4, len));
    at += 4 + len;
  }
  return out;
}
window.ready = (async () => {
  const exports = await init();
  wasmMemory = exports.memory;
  const get = async (name: string) => (await (await fetch(name)).text()).split("\n").filter((l) => l);
  live = await get("live.jsonl");
  catchup = await get("catchup.jsonl");
  const enc = new TextEncoder();
  liveBytes = live.map((f) => enc.encode(f));
  catchupBytes = catchup.map((f) => enc.encode(f));
  const packed = async (name: string) => splitPacked(await (await fetch(name)).arrayBuffer());
  livePacked = await packed("live.packed");
  catchupPacked = await packed("catchup.packed");
  // An older package (AGENTWIRE_PKG, for a before/after) refuses packed frames.
  const probe = new Projector();
  try { probe.ingestBytes(livePacked[0]!, 0); } catch { hasPacked = false; }
  probe.free();
})();

const DRAIN_EVERY = 16;
const SESSION = "ses_bench";

const hasBytes = typeof (Projector.prototype as any).ingestBytes === "function";

/** Text frames go through `ingest`, binary ones (bytes) through `ingestBytes`. */
function runWasm(frames: string[] | Uint8Array[]): { ms: number; items: Item[] } {
  const items: Item[] = [];
  const start = performance.now();
  const p = new Projector();
  if (typeof frames[0] === "string") {
    const text = frames as string[];
    for (let i = 0; i < text.length; i++) {
      p.ingest(text[i]!, 0);
      if (i % DRAIN_EVERY === DRAIN_EVERY - 1) applyBatch(items, p.drain());
    }
  } else {
    const bytes = frames as Uint8Array[];
    for (let i = 0; i < bytes.length; i++) {
      p.ingestBytes(bytes[i]!, 0);
      if (i % DRAIN_EVERY === DRAIN_EVERY - 1) applyBatch(items, p.drain());
    }
  }
  applyBatch(items, p.drain());
  const ms = performance.now() - start;
  p.free();
  return { ms, items };
}

/** The steps of the wasm path, each timed on its own pass. */
function steps(frames: string[], bytes: Uint8Array[], packed: Uint8Array[]): Record<string, number> {
  const enc = new TextEncoder();
  const buf = new Uint8Array(1 << 20);
  let t = performance.now();
  for (const f of frames) enc.encodeInto(f, buf);
  const crossing = performance.now() - t;
  t = performance.now();
  for (const b of bytes) buf.set(b);
  const crossingBytes = performance.now() - t;
  const p = new Projector();
  t = performance.now();
  for (const f of frames) p.ingest(f, 0);
  const ingest = performance.now() - t;
  // The same frames again: decoded, then dropped by the cursor (already applied).
  t = performance.now();
  for (const f of frames) p.ingest(f, 0);
  const decode = performance.now() - t;
  // And again as bytes (`ingestBytes`): the crossing is one copy.
  t = performance.now();
  if (hasBytes) for (const b of bytes) p.ingestBytes(b, 0);
  const decodeBytes = hasBytes ? performance.now() - t : NaN;
  // And packed.
  t = performance.now();
  if (hasPacked) for (const b of packed) p.ingestBytes(b, 0);
  const decodePacked = hasPacked ? performance.now() - t : NaN;
  p.drain();
  p.free();
  // Ingest with a drain every 16 frames, the drains alone: drainJson (serialization) and
  // drain (serialization + JSON.parse into objects).
  const q = new Projector();
  let json = 0, objects = 0;
  for (let i = 0; i < frames.length; i++) {
    q.ingest(frames[i]!, 0);
    if (i % DRAIN_EVERY === DRAIN_EVERY - 1) {
      if (i % (2 * DRAIN_EVERY) === DRAIN_EVERY - 1) {
        const t0 = performance.now(); q.drainJson(); json += performance.now() - t0;
      } else {
        const t0 = performance.now(); q.drain(); objects += performance.now() - t0;
      }
    }
  }
  q.free();
  return { crossing, crossingBytes, ingest, decode, decodeBytes, decodePacked, apply: ingest - decode, drainJson: json * 2, drain: objects * 2 };
}

function runPlain(frames: string[]): { ms: number; state: Plain } {
  const start = performance.now();
  const s = plainReducer();
  for (const f of frames) plainIngest(s, f);
  return { ms: performance.now() - start, state: s };
}

function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === "object") {
    const o: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) {
      const x = (v as any)[k];
      if (x !== undefined) o[k] = canonical(x);
    }
    return o;
  }
  return v;
}

// The best of the runs: the machine is shared, and another process only ever adds time.
const best = (xs: number[]) => Math.min(...xs);

window.bench = async (n: number, reps: number) => {
  await window.ready;
  const out: Record<string, unknown> = {};
  // Memory first, on a fresh projector: the wasm memory's growth over a whole live run.
  if (n === 0) {
    const before = wasmMemory.buffer.byteLength;
    const p = new Projector();
    for (let i = 0; i < live.length; i++) {
      p.ingest(live[i]!, 0);
      if (i % DRAIN_EVERY === DRAIN_EVERY - 1) p.drain();
    }
    p.drain();
    out.memoryGrowth = wasmMemory.buffer.byteLength - before;
    out.events = live.length;
    p.free();
    return out;
  }
  for (const [mode, all, allBytes, allPacked, per] of [["live", live, liveBytes, livePacked, 1], ["catchup", catchup, catchupBytes, catchupPacked, 100]] as const) {
    const frames = all.slice(0, Math.ceil(n / per));
    const bytes = allBytes.slice(0, Math.ceil(n / per));
    const packed = allPacked.slice(0, Math.ceil(n / per));
    const events = Math.min(n, all.length * per);
    const wasm: number[] = [], json: number[] = [], text: number[] = [], plain: number[] = [];
    let same = true;
    for (let r = 0; r < reps; r++) {
      // An older package (AGENTWIRE_PKG, for a before/after) may read no packed frames (then
      // its JSON bytes twice), or no bytes at all (then text thrice).
      const b = runWasm(hasBytes ? bytes : frames);
      const w = hasPacked ? runWasm(packed) : b;
      const t = runWasm(frames);
      const j = runPlain(frames);
      wasm.push(w.ms);
      json.push(b.ms);
      text.push(t.ms);
      plain.push(j.ms);
      if (r === 0) {
        same = [w, b, t].every((x) => JSON.stringify(canonical(x.items)) === JSON.stringify(canonical(j.state.items)));
        if (!same) {
          const i = w.items.findIndex((it, k) => JSON.stringify(canonical(it)) !== JSON.stringify(canonical(j.state.items[k])));
          out[`${mode}.diff`] = { index: i, wasm: w.items[i], plain: j.state.items[i], lengths: [w.items.length, j.state.items.length] };
        }
        out[`${mode}.items`] = w.items.length;
      }
    }
    out[`${mode}.events`] = events;
    out[`${mode}.wasm`] = best(wasm);
    out[`${mode}.json`] = best(json);
    out[`${mode}.text`] = best(text);
    out[`${mode}.plain`] = best(plain);
    out[`${mode}.same`] = same;
    const runs = Array.from({ length: reps }, () => steps(frames, bytes, packed));
    out[`${mode}.steps`] = Object.fromEntries(Object.keys(runs[0]!).map((k) => [k, best(runs.map((r) => r[k]!))]));
  }
  return out;
};
