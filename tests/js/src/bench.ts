// Throughput of the package's hot path in Node (V8, the engine of Chromium), not run by
// scripts/test: `node tests/js/build/bench.js [events...]`. A recorded-like session (turns of
// a prompt, 40 streamed deltas, a tool call, usage, a terminal) is sent as live frames (one
// event each) and as catch-up frames (100 events each); the page drains once per 16 frames.
// Prints a `BENCH` line per figure for scripts/bench (BENCH_QUICK=1: 1k and 10k events only).

import { Projector } from "../../../pkg-web/agentwire.js";
import { loadPackage } from "./fixtures.js";

loadPackage();

function session(n: number): object[] {
  const out: object[] = [];
  let seq = 0;
  const ev = (type: string, run: string | null, data: object) => {
    seq += 1;
    out.push({
      id: `evt_${seq.toString(16).padStart(32, "0")}`, type, session_id: "s1",
      ...(run ? { run_id: run } : {}), sequence: seq, timestamp: "2026-01-01T00:00:00.000Z",
      provider: "demo", data, metadata: {}, schema_version: 1,
    });
  };
  for (let t = 0; out.length < n; t++) {
    const run = `turn_${t}`;
    ev("run_started", run, {});
    ev("message_sent", run, { content: `prompt ${t}` });
    for (let i = 0; i < 40; i++) ev("message_streamed", run, { delta: `word${i} `, message_id: `m${t}` });
    ev("message_received", run, { content: "…", message_id: `m${t}`, role: "assistant" });
    ev("tool_call_started", run, { tool_call_id: `c${t}`, tool_name: "Bash", tool_input: { command: "ls" } });
    ev("tool_call_completed", run, { tool_call_id: `c${t}`, tool_name: "Bash", tool_input: { command: "ls" }, tool_output: "a\nb\n" });
    ev("token_usage_updated", run, { input_tokens: 10 * t, output_tokens: 5 * t });
    ev("run_completed", run, {});
  }
  return out.slice(0, n);
}

function frames(events: object[], perFrame: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < events.length; i += perFrame) {
    out.push(JSON.stringify({ t: "events", session: "s1", epoch: "e1", events: events.slice(i, i + perFrame) }));
  }
  return out;
}

/** One pass: ingest every frame, drain every 16; the total and each frame's time. */
function pass(fs: string[], drain: (p: Projector) => unknown): { ms: number; times: number[] } {
  const p = new Projector();
  const times: number[] = [];
  const start = performance.now();
  fs.forEach((f, i) => {
    const t0 = performance.now();
    p.ingest(f, 0);
    if (i % 16 === 15) drain(p);
    times.push(performance.now() - t0);
  });
  drain(p);
  const ms = performance.now() - start;
  p.free();
  return { ms, times };
}

/** The variants alternate, three passes each, and each reports its best: the first pass of
 * a process pays V8's compilation, and another process on the machine only ever adds time. */
function run(variants: [id: string, label: string, drain: (p: Projector) => unknown][], fs: string[], events: number): void {
  const best = variants.map(() => ({ ms: Infinity, times: [] as number[] }));
  for (let r = 0; r < 3; r++) {
    variants.forEach(([, , drain], v) => {
      const result = pass(fs, drain);
      if (result.ms < best[v]!.ms) best[v] = result;
    });
  }
  variants.forEach(([id, label], v) => {
    const { ms, times } = best[v]!;
    times.sort((a, b) => a - b);
    const p99 = times[Math.floor(times.length * 0.99)] ?? 0;
    console.log(
      `${label.padEnd(34)} ${String(events).padStart(7)} events  ${(events / ms * 1000 / 1e3).toFixed(0).padStart(5)}k events/s  p99 ${(p99 * 1000).toFixed(0)} µs/frame`,
    );
    const k = events >= 1000 ? `${events / 1000}k` : String(events);
    console.log(["BENCH", `wasm.${id}.${k}`, ms.toFixed(1), "ms", "-", "-", `${label}, best of 3, Node ${process.versions.node}`].join("\t"));
  });
}

const sizes = process.argv.slice(2).map(Number);
const quick = process.env.BENCH_QUICK === "1";
for (const n of sizes.length ? sizes : quick ? [1_000, 10_000] : [1_000, 10_000, 100_000]) {
  const evs = session(n);
  for (const [id, name, per] of [["live", "live (1 event/frame)", 1], ["catchup", "catch-up (100 events/frame)", 100]] as const) {
    run([
      [`${id}.drain`, `${name}, drain()`, (p) => p.drain()],
      [`${id}.drainJson`, `${name}, drainJson()+parse`, (p) => JSON.parse(p.drainJson())],
    ], frames(evs, per), n);
  }
}
