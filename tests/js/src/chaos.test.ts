// Reconnect chaos in the browser: the demo page (www/, the real one) is loaded through
// `agentwire-testkit chaos-proxy`, which lets its HTTP requests through and cuts, stalls and delays
// its WebSocket at seeded random points. Several slow demo turns stream while the proxy cuts
// the socket at least 100 times; at the end the page's timeline equals that of a page that
// followed the same session directly, with no duplicate and no gap.

import { strict as assert } from "node:assert";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { type Page } from "playwright-core";
import { bin, launchChromium, root, testkitBin } from "./fixtures.js";

const TOKEN = "chaos-test-token-0123";
const DEADLINE_MS = 120_000;
const tmp = mkdtempSync(join(tmpdir(), "agentwire-chaos-"));
const children: ChildProcess[] = [];

/** Spawns `agentwire …` (the test tools' binary for `chaos-proxy`) and resolves with the
 * first stdout line matching `pattern`. */
function start(args: string[], pattern: RegExp, onLine?: (line: string) => void): Promise<string> {
  const program = args[0] === "chaos-proxy" ? testkitBin : bin;
  const child = spawn(program, args, { stdio: ["ignore", "pipe", "inherit"] });
  children.push(child);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${args[0]} did not start`)), 30_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const m = pattern.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
      onLine?.(line);
    });
    child.on("exit", (code) => reject(new Error(`${args[0]} exited (${code})`)));
  });
}

async function api(addr: string, method: string, path: string, body?: unknown): Promise<any> {
  const r = await fetch(`http://${addr}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? null : JSON.stringify(body),
  });
  const data = r.status === 204 ? null : await r.json();
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${JSON.stringify(data)}`);
  return data;
}

async function until<T>(what: string, probe: () => Promise<T | undefined | false>): Promise<T> {
  const start = Date.now();
  for (;;) {
    const v = await probe();
    if (v) return v;
    assert.ok(Date.now() - start < DEADLINE_MS, `timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const items = (page: Page) => page.evaluate(() => (window as any).agentwirePage.view.items);

/** A port free a moment ago, for the proxy: the server must know its name beforehand. */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

/** A proxy that answers every WebSocket upgrade 403 and stalls, delays and cuts the event
 * streams it lets through: the page falls back to Server-Sent Events and HTTP by itself, says
 * so, sends its prompts over HTTP, and ends with the direct page's timeline. */
async function throughAProxyThatRefusesWebSockets() {
  const proxyListen = `127.0.0.1:${await freePort()}`;
  const addr = await start(
    ["serve", "--addr", "127.0.0.1:0", "--token", TOKEN, "--db", join(tmp, "refused.db"),
      "--www", join(root, "www"), "--demo-delay-ms", "20", "--heartbeat-ms", "500",
      "--sse-recycle-ms", "2000", "--allow-host", proxyListen],
    /^agentwire: serving http:\/\/([^/]+)\//,
  );
  let refused = 0;
  let cuts = 0;
  const proxy = await start(
    ["chaos-proxy", "--listen", proxyListen, "--upstream", addr, "--seed", "5", "--cut-min-ms", "300", "--cut-max-ms", "2500",
      "--stall-per-mille", "50", "--max-delay-ms", "20", "--refuse-upgrades"],
    /^chaos-proxy: listening (.+)$/,
    (line) => {
      if (line.startsWith("refused ")) refused++;
      if (line.startsWith("cut ")) cuts++;
    },
  );
  const session = (await api(addr, "POST", "/api/sessions", { provider: "demo" })).id as string;
  const context = await launchChromium(join(tmp, "refused-profile"));
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`http://${proxy}/?token=${TOKEN}`);
    await page.waitForSelector(`#sessions li[data-session="${session}"].selected`, { timeout: 30_000 });
    await until("the page is on the fallback and says so", async () =>
      page.evaluate(() => (window as any).agentwirePage.state.client.transport === "sse" &&
        document.querySelector("#connection")!.textContent!.includes("fallback: SSE") &&
        ["live", "caught_up"].includes(document.querySelector("#connection")!.getAttribute("data-state")!)));
    // Prompts typed on the page travel as HTTP requests.
    const turns = 3;
    for (let t = 1; t <= turns; t++) {
      await page.fill("#prompt", "a slow answer please");
      await page.click("#send");
      await until(`turn ${t} to end`, async () => {
        const { events } = await api(addr, "GET", `/api/sessions/${session}/events?type=run_completed`);
        return events.length === t;
      });
    }
    const { events: prompts } = await api(addr, "GET", `/api/sessions/${session}/events?type=message_sent`);
    assert.equal(prompts.length, turns, "each prompt started one turn");
    const direct = await context.newPage();
    await direct.goto(`http://${addr}/?token=${TOKEN}`);
    await direct.waitForSelector(`#sessions li[data-session="${session}"].selected`, { timeout: 30_000 });
    const reference = await until("the direct page to hold every turn", async () => {
      const got = await items(direct);
      return got.filter((i: any) => i.kind === "assistant_message" && !i.streaming).length === turns ? got : undefined;
    });
    const settled = await until("the page on the fallback to catch up", async () => {
      const got = await items(page);
      return JSON.stringify(got) === JSON.stringify(reference) ? got : undefined;
    });
    assert.deepEqual(settled, reference, "the fallback page's timeline = the direct page's");
    const drops = await page.evaluate(() => (window as any).agentwirePage.state.client.drops);
    assert.ok(refused >= 2, `upgrades refused: ${refused}`);
    // Streams end every 2 s (recycled) and when the proxy cuts one (it can only cut those
    // opened on a connection of their own: a browser may reuse one that served a fetch).
    assert.ok(drops > 0, `streams ended and resumed: ${drops} drops (${cuts} cuts)`);
    assert.deepEqual(errors, [], "no page errors");
    console.log(`chaos (browser, no WebSocket): ${refused} upgrades refused, ${turns} turns sent over HTTP, ${cuts} stream cuts, ${drops} reconnects, ${settled.length} items, identical to the direct page`);
  } finally {
    await context.close();
  }
}

try {
  // The page is loaded through the proxy, so the proxy's address is a name of the server (its
  // Host and its Origin), given to it as a reverse proxy's would be.
  const proxyListen = `127.0.0.1:${await freePort()}`;
  const addr = await start(
    ["serve", "--addr", "127.0.0.1:0", "--token", TOKEN, "--db", join(tmp, "store.db"),
      "--www", join(root, "www"), "--demo-delay-ms", "20", "--heartbeat-ms", "500",
      "--allow-host", proxyListen],
    /^agentwire: serving http:\/\/([^/]+)\//,
  );
  let cuts = 0;
  const proxy = await start(
    ["chaos-proxy", "--listen", proxyListen, "--upstream", addr, "--seed", "11", "--cut-min-ms", "40", "--cut-max-ms", "200",
      "--stall-per-mille", "30", "--max-delay-ms", "3"],
    /^chaos-proxy: listening (.+)$/,
    (line) => {
      if (line.startsWith("cut ")) cuts++;
    },
  );
  const session = (await api(addr, "POST", "/api/sessions", { provider: "demo" })).id as string;

  const context = await launchChromium(join(tmp, "profile"));
  try {
    const shaken = context.pages()[0] ?? (await context.newPage());
    const errors: string[] = [];
    shaken.on("pageerror", (e) => errors.push(e.message));
    // On the WebSocket throughout: this scenario is about its reconnects (the fallback has
    // its own below).
    await shaken.goto(`http://${proxy}/?token=${TOKEN}&fallback=off`);
    await shaken.waitForSelector(`#sessions li[data-session="${session}"].selected`, { timeout: 30_000 });

    // Slow turns, one after the other, until the proxy has cut the socket 100 times.
    let turns = 0;
    while (cuts < 100) {
      const { turnId } = await api(addr, "POST", `/api/sessions/${session}/turns`, { prompt: "a slow answer please" });
      turns++;
      await until("the turn to end", async () => {
        const { events } = await api(addr, "GET", `/api/sessions/${session}/events?run_id=${turnId}&type=run_completed`);
        return events.length > 0;
      });
    }

    // A page that follows the same session directly, with no proxy in between.
    const direct = await context.newPage();
    await direct.goto(`http://${addr}/?token=${TOKEN}`);
    await direct.waitForSelector(`#sessions li[data-session="${session}"].selected`, { timeout: 30_000 });
    const reference = await until("the direct page to hold every turn", async () => {
      const got = await items(direct);
      const answers = got.filter((i: any) => i.kind === "assistant_message" && !i.streaming);
      return answers.length === turns ? got : undefined;
    });
    const settled = await until("the shaken page to catch up", async () => {
      const got = await items(shaken);
      return JSON.stringify(got) === JSON.stringify(reference) ? got : undefined;
    });
    assert.deepEqual(settled, reference, "the shaken page's timeline = the direct page's");
    const messageIds = settled.filter((i: any) => i.kind === "assistant_message").map((i: any) => i.message_id);
    assert.equal(new Set(messageIds).size, messageIds.length, "no message twice");
    const drops = await shaken.evaluate(() => (window as any).agentwirePage.state.client.drops);
    assert.ok(cuts >= 100, `cuts: ${cuts}`);
    // Only this page's WebSocket goes through the proxy, so every cut was one of its sockets;
    // a cut that lands before the handshake completes is a failed attempt, not a counted drop.
    assert.ok(drops > 0, `the client saw the cuts: ${drops} drops for ${cuts} cuts`);
    assert.deepEqual(errors, [], "no page errors");
    console.log(`chaos (browser): ${turns} slow turns, ${cuts} cuts, ${drops} client reconnects, ${settled.length} items, identical to the direct page`);
  } finally {
    await context.close();
  }
  await throughAProxyThatRefusesWebSockets();
} finally {
  for (const c of children) c.kill("SIGKILL");
  rmSync(tmp, { recursive: true, force: true });
}
