// Interaction latency of the demo page during a long replay, in headless Chromium; not run by
// scripts/test (a benchmark: its figures are in BENCHMARKS.md, nothing is asserted on time).
//
//   node tests/js/build/interaction.bench.js [events] [tool updates]
//
// (BENCH_QUICK=1: 20k events by default.) Prints a `BENCH` line per figure for scripts/bench.
//
// A session of `events` (100k) events is seeded straight into a SQLite log (`agentwire-testkit
// seed`), one of its tool calls getting `tool updates` (300) output deltas; a real `agentwire
// serve` (release build if there is one) serves it, and the page subscribes to it from 0.
// While the replay streams in, the bench types into the prompt box and opens and closes a tool
// row every 50 ms, and reads the browser's Event Timing entries: each interaction's duration
// from input to the next paint, which is what INP reports. The baseline beside it is the same
// interactions on the page once caught up.

import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { type Page } from "playwright-core";

import { bin, launchChromium, root, testkitBin } from "./fixtures.js";

const events = Number(process.argv[2] ?? (process.env.BENCH_QUICK === "1" ? 20_000 : 100_000));
const updates = Number(process.argv[3] ?? 300);
const TOKEN = "bench-token-0123456789abcdef";
const SESSION = "ses_be9c4";
const release = join(root, "target", "release", "agentwire");
const program = existsSync(release) ? release : bin;

const dir = mkdtempSync(join(tmpdir(), "agentwire-interaction-"));
const db = join(dir, "log.db");
const seeded = execFileSync(testkitBin, [
  "seed", "--db", db, "--session", SESSION, "--events", String(events), "--tool-updates", `10:${updates}`,
]).toString().trim();

const server = spawn(program, ["serve", "--addr", "127.0.0.1:0", "--db", db, "--www", join(root, "www")], {
  stdio: ["ignore", "pipe", "inherit"],
  env: { ...process.env, AGENTWIRE_TOKEN: TOKEN },
});
const addr = await new Promise<string>((resolve, reject) => {
  const lines = createInterface({ input: server.stdout! });
  lines.on("line", (line) => {
    const m = /^agentwire: serving http:\/\/([^/]+)\//.exec(line);
    if (m) resolve(m[1]!);
  });
  server.once("exit", (code) => reject(new Error(`agentwire serve exited: ${code}`)));
});

const context = await launchChromium(join(dir, "profile"), { viewport: { width: 1280, height: 800 } });
try {
  const page = await context.newPage();
  await page.addInitScript(() => {
    const w = window as any;
    w.benchEntries = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries() as any[]) {
        if (e.interactionId) w.benchEntries.push({ id: e.interactionId, duration: e.duration });
      }
    }).observe({ type: "event", durationThreshold: 16, buffered: true } as PerformanceObserverInit);
  });
  const started = Date.now();
  // `snapshot=off`: the page replays the whole log (what this bench measures), not a snapshot.
  await page.goto(`http://${addr}/?token=${TOKEN}&snapshot=off#${SESSION}`);
  await page.waitForFunction((s) => (window as any).agentwirePage?.state.current === s, SESSION);
  const replay = await interact(page, () =>
    document.querySelector("#connection")?.getAttribute("data-state") === "caught_up");
  const caughtUpMs = Date.now() - started;
  const items = await page.evaluate(() => (window as any).agentwirePage.view.items.length);
  const after = await interact(page, undefined, 40);
  console.log(`interaction latency of the demo page, ${seeded} events (one tool call with ${updates} updates), ${program === release ? "release" : "debug"} server`);
  console.log(`  caught up after ${caughtUpMs} ms, ${items} items`);
  const build = program === release ? "release" : "debug";
  const k = `${Math.round(Number(seeded) / 1000)}k`;
  console.log(["BENCH", `interaction.catchup.${k}`, String(caughtUpMs), "ms", "-", "-", `page caught up, ${items} items, ${build} server`].join("\t"));
  const p98 = report("during the replay", replay);
  const base = report("caught up (baseline)", after);
  console.log(["BENCH", `interaction.replay.${k}.p98`, p98.toFixed(0), "ms", `caught up ${base.toFixed(0)}`,
    p98 > 0 ? `${(base / p98).toFixed(2)}x` : "-", `input to next paint during the replay, ${build} server`].join("\t"));
} finally {
  await context.close();
  server.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
}

/** Types a character and toggles a tool row every 50 ms until `done` holds in the page (or
 * `rounds` times); returns the interactions' durations (ms), input to next paint. */
async function interact(page: Page, done?: () => boolean, rounds = Infinity): Promise<Run> {
  await page.evaluate(() => ((window as any).benchEntries = []));
  let i = 0;
  for (; i < rounds; i++) {
    if (done && (await page.evaluate(done))) break;
    await page.focus("#prompt");
    await page.keyboard.type("x");
    const toggle = page.locator("#timeline .item-tool_call button.toggle").first();
    if (await toggle.count()) await toggle.click({ timeout: 5_000 }).catch(() => {});
    await page.waitForTimeout(50);
  }
  await page.waitForTimeout(200); // the last entries are reported after their paint
  const entries: { id: number; duration: number }[] = await page.evaluate(() => (window as any).benchEntries);
  // One interaction is several events (keydown, keyup; pointerdown, pointerup, click): its
  // latency is the longest of them, as INP counts it. Interactions under 16 ms are not
  // reported: they are the ones missing from `durations`.
  const longest = new Map<number, number>();
  for (const e of entries) longest.set(e.id, Math.max(longest.get(e.id) ?? 0, e.duration));
  return { durations: [...longest.values()], interactions: 2 * i };
}

interface Run {
  durations: number[];
  interactions: number;
}

/** Prints the run's figures; returns its p98 (ms). */
function report(what: string, { durations, interactions }: Run): number {
  const sorted = [...durations].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  console.log(
    `  ${what.padEnd(22)} ${sorted.length} of ${interactions} interactions over 16 ms;` +
    ` p50 ${at(0.5).toFixed(0)} ms, p98 ${at(0.98).toFixed(0)} ms, max ${(sorted.at(-1) ?? 0).toFixed(0)} ms`,
  );
  return at(0.98);
}
