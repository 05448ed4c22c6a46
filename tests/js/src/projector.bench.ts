// The wasm Projector against the plain JS reducer a frontend developer would write instead,
// on the same server frames, in one headless Chromium; not run by scripts/test (a benchmark:
// its figures are in BENCHMARKS.md, nothing is asserted on time).
//
//   node tests/js/build/projector.bench.js [reps]
//
// (`AGENTWIRE_PKG=dir` benchmarks another build of the web package than pkg-web/, e.g. the
// parent commit's, for a before/after in one sitting.)
//
// The frames are the seeded coding-agent session of `agentwire-testkit seed` (reasoning and
// text deltas of ~20 characters, 1–4 tool calls per turn with 200–2,400-character results),
// printed by `agentwire-testkit frames`: live (one event per frame) and catch-up (100 per
// frame), 10k and 100k events. The wasm side ingests every frame, drains every 16 frames and
// mirrors each batch into a JS list, as a page does; the reducer (in projector-page.ts)
// parses each frame and applies it to its list. All must end with the same items. The wasm
// side runs twice: on binary frames (`ingestBytes` of each frame's UTF-8 bytes: what the
// package's `Client` gets, as it asks for `binary_frames` in `hello`; the headline figure)
// and on text frames (`ingest` of strings: a page that owns a socket of text frames; `.text`).
// The reducer reads text frames (what a JSON client gets). Besides the totals it times the
// steps of the wasm path on their own passes: the string crossing (TextEncoder.encodeInto,
// about what passing a string to wasm costs) and the bytes' (Uint8Array.set), decoding (the
// same frames again, dropped by the cursor after decoding, as text and as bytes), applying
// (ingest − decode) and draining.

import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync, openSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { extname, join } from "node:path";
import { gzipSync } from "node:zlib";

import { launchChromium, root, testkitBin } from "./fixtures.js";

const reps = Number(process.argv[2] ?? 5);
const dir = mkdtempSync(join(tmpdir(), "agentwire-projector-bench-"));
const www = join(dir, "www");
const pkgDir = process.env.AGENTWIRE_PKG ?? join(root, "pkg-web");
cpSync(pkgDir, join(www, "pkg"), { recursive: true });
cpSync(join(root, "tests", "js", "build", "projector-page.js"), join(www, "page.js"));
writeFileSync(join(www, "index.html"), `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="importmap">{ "imports": { "agentwire": "./pkg/agentwire.js" } }</script>
<script type="module" src="./page.js"></script>`);
for (const [file, per] of [["live", 1], ["catchup", 100]] as const) {
  for (const [ext, packed] of [["jsonl", []], ["packed", ["--packed"]]] as const) {
    const fd = openSync(join(www, `${file}.${ext}`), "w");
    execFileSync(testkitBin, ["frames", "--events", "100000", "--per-frame", String(per), ...packed], { stdio: ["ignore", fd, "inherit"] });
  }
}

const types: Record<string, string> = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm" };
const server = createServer((req, res) => {
  try {
    const name = decodeURIComponent(new URL(req.url!, "http://x").pathname);
    const path = join(www, name.endsWith("/") ? `${name}index.html` : name);
    const body = readFileSync(path);
    res.writeHead(200, { "content-type": types[extname(path)] ?? "text/plain" }).end(body);
  } catch {
    res.writeHead(404).end();
  }
});
await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
const port = (server.address() as { port: number }).port;

const BENCH = (id: string, value: string, unit: string, baseline: string, ratio: string, note: string) =>
  console.log(["BENCH", id, value, unit, baseline, ratio, note].join("\t"));

const context = await launchChromium(join(dir, "profile"));
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
  page.on("console", (m) => { if (m.type() === "error") console.error(`console: ${m.text()}`); });
  await page.goto(`http://127.0.0.1:${port}/`);
  await page.waitForFunction(() => "bench" in window);
  const version = context.browser()?.version() ?? "chromium";
  const mem = await page.evaluate(() => window.bench(0, 0));
  const perEvent: Record<string, number> = {};
  console.log(`projector vs a plain JS reducer, ${version}, best of ${reps} runs (each step too), drain every 16 frames, package ${pkgDir}`);
  for (const [n, label] of [[10_000, "10k"], [100_000, "100k"]] as const) {
    const r = (await page.evaluate(([n, reps]) => window.bench(n, reps), [n, reps] as const)) as Record<string, any>;
    for (const mode of ["live", "catchup"]) {
      const events = r[`${mode}.events`], wasm = r[`${mode}.wasm`], json = r[`${mode}.json`], text = r[`${mode}.text`], plain = r[`${mode}.plain`];
      const s = r[`${mode}.steps`];
      if (!r[`${mode}.same`]) {
        console.error(`DIFFERENT ITEMS (${mode} ${label}): ${JSON.stringify(r[`${mode}.diff`])}`);
        process.exitCode = 1;
      }
      const ns = (wasm * 1e6) / events;
      perEvent[`${mode}.${label}`] = ns;
      console.log(
        `  ${mode.padEnd(8)} ${String(events).padStart(6)} events (${r[`${mode}.items`]} items, same: ${r[`${mode}.same`]}): ` +
        `wasm ${wasm.toFixed(1)} ms packed frames (${ns.toFixed(0)} ns/event), ${json.toFixed(1)} ms JSON as bytes, ${text.toFixed(1)} ms text frames, ` +
        `JS reducer ${plain.toFixed(1)} ms, ratio ${(plain / wasm).toFixed(2)}x (JSON bytes ${(plain / json).toFixed(2)}x, text ${(plain / text).toFixed(2)}x)`,
      );
      console.log(
        `           steps: crossing ${s.crossing.toFixed(1)} ms (bytes ${s.crossingBytes.toFixed(1)}), ingest ${s.ingest.toFixed(1)} ms ` +
        `(decode ${s.decode.toFixed(1)}, as bytes ${s.decodeBytes.toFixed(1)}, packed ${s.decodePacked.toFixed(1)}; apply ${s.apply.toFixed(1)}), ` +
        `drain every 16: drainJson ${s.drainJson.toFixed(1)} ms, drain ${s.drain.toFixed(1)} ms`,
      );
      const id = `projector.${mode === "live" ? "live" : "catchup"}.${label}`;
      BENCH(id, wasm.toFixed(1), "ms", `js reducer ${plain.toFixed(1)} ms`, `${(plain / wasm).toFixed(2)}x`, `chromium, ${events} events, packed frames`);
      BENCH(`${id}.json`, json.toFixed(1), "ms", `js reducer ${plain.toFixed(1)} ms`, `${(plain / json).toFixed(2)}x`, `chromium, ${events} events, JSON frames as bytes`);
      BENCH(`${id}.text`, text.toFixed(1), "ms", `js reducer ${plain.toFixed(1)} ms`, `${(plain / text).toFixed(2)}x`, `chromium, ${events} events, text frames`);
      BENCH(`${id}.per_event`, ns.toFixed(0), "ns", "-", "-", "wasm, per event");
    }
  }
  for (const mode of ["live", "catchup"]) {
    const flat = perEvent[`${mode}.100k`]! / perEvent[`${mode}.10k`]!;
    console.log(`  per-event cost ${mode} 100k / 10k: ${flat.toFixed(2)}`);
    BENCH(`projector.${mode}.flatness`, flat.toFixed(2), "ratio", "100k/10k per event", "-", "1.0 = flat");
  }
  const growth = (mem.memoryGrowth as number) / 2 ** 20;
  const per100k = (growth * 100_000) / (mem.events as number);
  console.log(`  wasm memory growth over ${mem.events} live events: ${growth.toFixed(1)} MiB (${per100k.toFixed(1)} MiB per 100k events)`);
  BENCH("projector.memory.100k", per100k.toFixed(1), "MiB", "-", "-", "wasm memory growth per 100k events");
  const gz = (f: string) => gzipSync(readFileSync(join(pkgDir, f)), { level: 9 }).length;
  const size = gz("agentwire_bg.wasm") + gz("agentwire.js");
  console.log(`  main entry: ${(size / 1000).toFixed(1)} KB gzipped (wasm ${gz("agentwire_bg.wasm")} + glue ${gz("agentwire.js")} bytes)`);
  BENCH("package.main.gzip", (size / 1000).toFixed(1), "KB", "target 100 KB", `${(size / 100_000).toFixed(2)}x`, "wasm + web glue, gzip -9");
} finally {
  await context.close();
  server.close();
  rmSync(dir, { recursive: true, force: true });
}
