// Hydration (issue 14 goal 6, issue 16 item 1): from the demo page's subscribe to the
// session's last item rendered, in Chromium, against a release `agentwire serve` (the debug
// one when there is no release build) over a session seeded straight into its SQLite log.
// Per size, over a log seeded without a stored projection: the page opened from a snapshot on
// the first companion ever to serve it ("first": it builds the session's projection from the
// log, storing it on the way), then on a restarted one ("cold": it loads the stored
// checkpoint and applies the events after it), then again ("warm": the projection is held),
// next to the baseline, the same page replaying the whole log (`?snapshot=off`), in the same
// run; the companion's RSS and the page's JS heap after each.
//
//   node tests/js/build/hydration.bench.js [sizes, default 100000,1000000] [--no-replay]
//
// `--no-replay` leaves out the baseline (a 1M-event replay takes minutes): for a quick look.

import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";

import { bin, root } from "./fixtures.js";
import { browser, open, seed, serve } from "./hydration.js";

const args = process.argv.slice(2);
const replay = !args.includes("--no-replay");
const sizes = (args.find((a) => !a.startsWith("--")) ?? "100000,1000000").split(",").map(Number);
const release = join(root, "target", "release", "agentwire");
const program = existsSync(release) ? release : bin;
const build = program === release ? "release" : "debug";

const rss = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
};
const bench = (id: string, value: number, unit: string, baseline: string, ratio: string, note: string) =>
  console.log(["BENCH", id, value.toFixed(1), unit, baseline, ratio, note].join("\t"));
const label = (n: number) => (n >= 1_000_000 ? `${n / 1_000_000}m` : `${n / 1000}k`);

for (const size of sizes) {
  const t0 = Date.now();
  const seeded = seed(size, undefined, false);
  console.log(`seeded ${size} events in ${Date.now() - t0} ms`);
  let server = await serve(program, seeded.db);
  const context = await browser(seeded.dir);
  try {
    // The last item: the last turn's answer (the seed's turns end with one).
    const r = await fetch(`http://${server.addr}/api/sessions/${seeded.session}/events?after=${size - 200}&limit=1000`, {
      headers: { Authorization: "Bearer hydration-token-0123456789abcdef" },
    });
    const { events } = await r.json();
    const answer = events.filter((e: any) => e.type === "message_received").pop().data.content as string;
    const lastText = answer.trim().split(" ").slice(-3).join(" ");
    const heap = (page: import("playwright-core").Page) =>
      page.evaluate(() => ((performance as any).memory?.usedJSHeapSize ?? NaN) / (1 << 20));
    const row: Record<string, { ms: number; heap: number; rss: number; held: number }> = {};
    const runs = [["first", true], ["cold", true], ["warm", true], ["replay", false]] as const;
    for (const [name, snapshot] of runs.filter(([name]) => replay || name !== "replay")) {
      if (name === "cold") {
        await server.stop();
        server = await serve(program, seeded.db);
      }
      const o = await open(context, server.addr, seeded.session, lastText, snapshot, 600_000);
      row[name] = { ms: o.ms, heap: await heap(o.page), rss: rss(server.child.pid!), held: o.held };
      await o.page.close();
      console.log(`${label(size)} ${name}: ${o.ms.toFixed(0)} ms, holding ${o.held} items, page heap ${row[name]!.heap.toFixed(1)} MiB, companion RSS ${row[name]!.rss.toFixed(1)} MiB`);
    }
    if (!replay) continue;
    const base = row.replay!.ms;
    const target = size >= 1_000_000 ? "target 300 ms" : "target 1000 ms";
    for (const name of ["first", "cold", "warm"] as const) {
      bench(`hydration.snapshot.${label(size)}.${name}`, row[name]!.ms, "ms", `full replay ${base.toFixed(0)} ms`,
        `${(base / row[name]!.ms).toFixed(2)}x`, `chromium, ${build} serve, ${target}`);
    }
    bench(`hydration.replay.${label(size)}`, base, "ms", "-", "-", `chromium, ${build} serve, the same page without a snapshot`);
    bench(`hydration.page_heap.${label(size)}.snapshot`, row.warm!.heap, "MiB", `full replay ${row.replay!.heap.toFixed(1)} MiB`, "-", "performance.memory after the last item rendered");
    bench(`hydration.companion_rss.${label(size)}`, row.warm!.rss, "MiB", "-", "-", "after snapshots (the session's projection held, trimmed to its last items)");
  } finally {
    await context.close();
    await server.stop();
    rmSync(seeded.dir, { recursive: true, force: true });
  }
}
