// Bundler test: the package as a frontend gets it. `npm pack` of pkg/, installed (`npm ci`,
// each app's own lockfile) into fresh copies of examples/react-vite (Vite) and
// tests/bundlers/next-app (Next.js, `next build`), neither configured for agentwire; each is
// built, served (Vite's output by a static server, Next by `next start`; and the Vite app by
// its dev server, which pre-bundles the package on its own) and driven in headless
// Chromium against a real `agentwire serve` (demo agent, `--allow-origin` the app's origin,
// the token in the page's URL): a turn streams its reply, an approval is answered from the
// page, and the rows of the first turn did not render again while the second one streamed
// (the page counts each row's renders). Both apps render one App.jsx (the Next app's is a copy,
// checked). The copies live in target/bundlers/, where node_modules stays between runs while
// the app's lockfile is unchanged.

import { strict as assert } from "node:assert";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server } from "node:http";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { extname, join } from "node:path";
import { createInterface } from "node:readline";
import { gzipSync } from "node:zlib";

import type { Page } from "playwright-core";

import { bin, launchChromium, root } from "./fixtures.js";

const TOKEN = "bundlers-test-token-0123";
const DEADLINE_MS = 60_000;
const cache = join(root, "target", "bundlers");
const tmp = mkdtempSync(join(tmpdir(), "agentwire-bundlers-"));
const children: ChildProcess[] = [];
const servers: Server[] = [];

interface App {
  name: string;
  /** The copy in target/bundlers/ (shared by the Vite build and the Vite dev server). */
  copy: string;
  source: string;
  /** The build command, if any (the dev server builds nothing). */
  build?: string[];
  /** Serves the app; resolves to its origin. */
  serve: (dir: string) => Promise<string>;
  /** The built files to measure. */
  output?: string;
  /** Renders of a component per change: React's development build (StrictMode) renders twice. */
  rendersPerChange: number;
}

const apps: App[] = [
  {
    name: "vite",
    copy: "vite",
    source: join(root, "examples", "react-vite"),
    build: ["node_modules/vite/bin/vite.js", "build"],
    serve: (dir) => serveStatic(join(dir, "dist")),
    output: "dist",
    rendersPerChange: 1,
  },
  {
    name: "vite dev",
    copy: "vite",
    source: join(root, "examples", "react-vite"),
    serve: async (dir) => {
      const port = await freePort();
      const vite = spawn(process.execPath, ["node_modules/vite/bin/vite.js", "--host", "127.0.0.1", "--port", String(port), "--strictPort"], {
        cwd: dir, stdio: ["ignore", "pipe", "inherit"], env: env(),
      });
      children.push(vite);
      await lineMatching(vite, /ready in/, "vite dev");
      return `http://127.0.0.1:${port}`;
    },
    rendersPerChange: 2,
  },
  {
    name: "next",
    copy: "next",
    source: join(root, "tests", "bundlers", "next-app"),
    build: ["node_modules/next/dist/bin/next", "build"],
    serve: async (dir) => {
      const port = await freePort();
      const next = spawn(process.execPath, ["node_modules/next/dist/bin/next", "start", "-p", String(port), "-H", "127.0.0.1"], {
        cwd: dir, stdio: ["ignore", "pipe", "inherit"], env: env(),
      });
      children.push(next);
      await lineMatching(next, /Ready in/, "next start");
      return `http://127.0.0.1:${port}`;
    },
    output: ".next/static",
    rendersPerChange: 1,
  },
];

function env(): NodeJS.ProcessEnv {
  return { ...process.env, NEXT_TELEMETRY_DISABLED: "1", npm_config_audit: "false", npm_config_fund: "false", npm_config_update_notifier: "false" };
}

function run(what: string, cmd: string, args: string[], cwd: string): number {
  const start = performance.now();
  const r = spawnSync(cmd, args, { cwd, env: env(), encoding: "utf8", maxBuffer: 1 << 26 });
  assert.equal(r.status, 0, `${what} failed:\n${r.stdout}\n${r.stderr}`);
  return (performance.now() - start) / 1000;
}

/** A fresh copy of the app's sources in target/bundlers/<name>/ (symlinks followed), with its
 * node_modules kept when the lockfile did not change, and the packed package installed. */
function prepare(app: App, tarball: string): { dir: string; install: string } {
  const dir = join(cache, app.copy);
  mkdirSync(dir, { recursive: true });
  for (const name of readdirSync(dir)) {
    if (name === "node_modules") continue;
    if (name === ".next") {
      for (const n of readdirSync(join(dir, name))) if (n !== "cache") rmSync(join(dir, name, n), { recursive: true, force: true });
      continue;
    }
    rmSync(join(dir, name), { recursive: true, force: true });
  }
  for (const name of readdirSync(app.source)) {
    if (["node_modules", "dist", ".next"].includes(name) || name.endsWith(".tgz")) continue;
    cpSync(join(app.source, name), join(dir, name), { recursive: true, dereference: true });
  }
  cpSync(tarball, join(dir, "agentwire-0.1.0.tgz"));
  // The lockfile pins the hash the tarball had when it was written: with it, `npm ci` installs
  // that old tarball from npm's cache, not this one.
  const lock = JSON.parse(readFileSync(join(dir, "package-lock.json"), "utf8"));
  delete lock.packages["node_modules/agentwire"].integrity;
  writeFileSync(join(dir, "package-lock.json"), JSON.stringify(lock, null, 2));
  const key = createHash("sha256").update(JSON.stringify(lock)).update(readFileSync(join(dir, "package.json"))).digest("hex");
  const marker = join(dir, "node_modules", ".agentwire-bundlers-lock");
  let install = "node_modules cached";
  if (!existsSync(marker) || readFileSync(marker, "utf8") !== key) {
    install = `npm ci ${run(`${app.name}: npm ci`, "npm", ["ci"], dir).toFixed(1)} s`;
    writeFileSync(marker, key);
  }
  // Exactly this build's package, whatever the cached node_modules held (and no dependency
  // that Vite's dev server pre-bundled from an earlier one).
  rmSync(join(dir, "node_modules", ".vite"), { recursive: true, force: true });
  const pkg = join(dir, "node_modules", "agentwire");
  rmSync(pkg, { recursive: true, force: true });
  mkdirSync(pkg);
  run("unpack", "tar", ["-xzf", tarball, "-C", pkg, "--strip-components=1"], dir);
  return { dir, install };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createNetServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

function lineMatching(child: ChildProcess, re: RegExp, what: string): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start`)), DEADLINE_MS);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const m = re.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    });
    child.on("exit", (code) => reject(new Error(`${what} exited (${code})`)));
  });
}

const types: Record<string, string> = {
  ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".wasm": "application/wasm",
  ".svg": "image/svg+xml",
};

/** What `vite preview` does for a built app: its files, index.html at `/`. */
function serveStatic(dir: string): Promise<string> {
  const server = createServer((req, res) => {
    let path = join(dir, decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
    if (path.endsWith("/")) path = join(path, "index.html");
    if (!path.startsWith(dir) || !existsSync(path) || !statSync(path).isFile()) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "Content-Type": types[extname(path)] ?? "application/octet-stream" });
    res.end(readFileSync(path));
  });
  servers.push(server);
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${(server.address() as { port: number }).port}`)),
  );
}

async function agentwireServe(origin: string, name: string): Promise<string> {
  const server = spawn(bin, [
    "serve", "--addr", "127.0.0.1:0", "--db", join(tmp, `${name}.db`),
    "--allow-origin", origin, "--demo-delay-ms", "20",
  ], { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, AGENTWIRE_TOKEN: TOKEN } });
  children.push(server);
  return (await lineMatching(server, /^agentwire: serving http:\/\/([^/]+)\//, "agentwire serve"))[1]!;
}

/** Sizes of the built files: total, and gzipped, of the JavaScript and the wasm. */
function sizes(dir: string): string {
  const total: Record<"js" | "wasm", [number, number]> = { js: [0, 0], wasm: [0, 0] };
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith(".js") || name.endsWith(".wasm")) {
        const bytes = readFileSync(p);
        const t = total[name.endsWith(".js") ? "js" : "wasm"];
        t[0] += bytes.length;
        t[1] += gzipSync(bytes, { level: 9 }).length;
      }
    }
  };
  walk(dir);
  const kib = (n: number) => `${(n / 1024).toFixed(0)} KiB`;
  return `js ${kib(total.js[0])} (${kib(total.js[1])} gz), wasm ${kib(total.wasm[0])} (${kib(total.wasm[1])} gz)`;
}

/** The page's render count of each row, by item index. */
const renders = (page: Page) => page.evaluate(() => [...((window as any).agentwireRenders ?? [])] as number[]);
const text = (page: Page, testid: string) =>
  page.locator(`[data-testid=${testid}]`).textContent({ timeout: DEADLINE_MS });
/** Rejects at the page's first uncaught error (a package that does not load fails at once). */
const crashes = new WeakMap<Page, Promise<never>>();
function watch(page: Page): void {
  const crashed = new Promise<never>((_, reject) => page.on("pageerror", (e) => reject(new Error(`page error: ${e.message}`))));
  crashed.catch(() => {});
  crashes.set(page, crashed);
}
const until = (page: Page, what: string, fn: () => boolean) =>
  Promise.race([page.waitForFunction(fn, undefined, { timeout: DEADLINE_MS }), crashes.get(page)!]).catch((e: Error) => {
    throw new Error(`${what}: ${e.message}`);
  });

async function scenario(page: Page, url: string, rendersPerChange: number): Promise<string> {
  await page.goto(url);
  await until(page, "caught up", () => document.querySelector("[data-testid=connection]")?.textContent === "caught_up");
  assert.equal(await text(page, "lifecycle"), "idle");

  // A plain answer, streamed.
  await page.fill("[data-testid=prompt]", "hello there");
  await page.click("[data-testid=send]");
  await until(page, "the answer", () =>
    document.querySelector("[data-testid=lifecycle]")?.textContent === "idle" &&
    document.querySelector("[data-kind=assistant_message][data-streaming=false]") !== null);
  const answer = await page.locator("[data-kind=assistant_message]").first().textContent();
  assert.ok(answer && answer.length > "Agent: ".length + 10, `the answer shows: ${answer}`);
  const firstTurn = await renders(page);
  const rows = await page.locator("[data-testid=row]").count();
  assert.equal(firstTurn.length, rows);
  assert.equal(firstTurn[0], rendersPerChange, "the user message rendered once");

  // A tool call that asks first: answered from the page.
  await page.fill("[data-testid=prompt]", "run a command, with approval");
  await page.click("[data-testid=send]");
  await page.locator("[data-testid=allow]").click({ timeout: DEADLINE_MS });
  await until(page, "the approved tool ran and the turn ended", () =>
    document.querySelector("[data-kind=approval][data-status=granted]") !== null &&
    document.querySelector("[data-kind=tool_call][data-status=completed]") !== null &&
    document.querySelector("[data-testid=lifecycle]")?.textContent === "idle" &&
    document.querySelectorAll("[data-kind=assistant_message][data-streaming=true]").length === 0);
  assert.equal(await page.locator("[data-testid=approval]").count(), 0, "no approval left pending");
  const end = await renders(page);
  assert.deepEqual(end.slice(0, rows), firstTurn, "rows of the first turn rendered again");
  assert.ok(end.length > rows, "the second turn added rows");
  return `${rows} rows rendered [${firstTurn}] in the first turn, not again in the second ` +
    `(whose ${end.length - rows} rows rendered [${end.slice(rows)}])`;
}

try {
  const component = (dir: string) => readFileSync(join(root, dir, "App.jsx"), "utf8");
  assert.equal(component("tests/bundlers/next-app/app"), component("examples/react-vite/src"),
    "tests/bundlers/next-app/app/App.jsx is a copy of examples/react-vite/src/App.jsx");
  mkdirSync(cache, { recursive: true });
  const packed = spawnSync("npm", ["pack", join(root, "pkg"), "--pack-destination", tmp, "--json"], { encoding: "utf8", env: env() });
  assert.equal(packed.status, 0, packed.stderr);
  const info = JSON.parse(packed.stdout)[0] as { filename: string; size: number; unpackedSize: number; entryCount: number };
  const tarball = join(tmp, info.filename);
  console.log(`bundlers: npm pack: ${info.filename}, ${info.entryCount} files, ${(info.size / 1024).toFixed(0)} KiB packed`);
  const context = await launchChromium(join(tmp, "profile"));
  try {
    const prepared = new Map<string, { dir: string; install: string }>();
    for (const app of apps) {
      if (!prepared.has(app.copy)) prepared.set(app.copy, prepare(app, tarball));
      const { dir, install } = prepared.get(app.copy)!;
      const seconds = app.build && run(`${app.name}: build`, process.execPath, app.build, dir);
      const origin = await app.serve(dir);
      const addr = await agentwireServe(origin, app.name);
      const page = await context.newPage();
      watch(page);
      const problems: string[] = [];
      page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
      page.on("console", (m) => {
        if (m.location().url.endsWith("/favicon.ico")) return;
        if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()} ${m.location().url}`);
      });
      const result = await scenario(page, `${origin}/?server=http://${addr}&token=${TOKEN}`, app.rendersPerChange);
      assert.deepEqual(problems, [], `${app.name}: the page logged problems`);
      await page.close();
      const built = app.output ? `, build ${seconds!.toFixed(1)} s, ${sizes(join(dir, app.output))}` : "";
      console.log(`bundlers: ${app.name}: ${install}${built}; ${result}`);
    }
  } finally {
    await context.close();
  }
} finally {
  for (const c of children) c.kill("SIGKILL");
  for (const s of servers) s.close();
  rmSync(tmp, { recursive: true, force: true });
}
