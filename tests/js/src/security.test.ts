// Security in a real browser: a real `agentwire serve` with `--allow-origin` set to a page on
// another port, a second page on a port it does not allow, and the demo page itself.
// - the allowed page calls the API (CORS: a preflighted POST with the token, then a GET) and
//   opens the WebSocket; the other page gets neither (the browser blocks the response, the
//   server refuses the handshake);
// - the demo page, opened with the token in the fragment, takes it out of the address bar,
//   works, and still works after a reload; its Content-Security-Policy blocks nothing it needs.

import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { bin, launchChromium, root } from "./fixtures.js";

const TOKEN = "security-test-token-0123";
const tmp = mkdtempSync(join(tmpdir(), "agentwire-security-"));

/** A page that tries the API and the WebSocket of `api` and reports on `window.result`. */
function probePage(api: string): string {
  return `<!doctype html><script type="module">
const api = ${JSON.stringify(api)};
const token = ${JSON.stringify(TOKEN)};
const result = {};
try {
  const created = await fetch(api + "/api/sessions", {
    method: "POST",
    headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
    body: JSON.stringify({ provider: "demo" }),
  });
  result.create = created.status;
  const session = (await created.json()).id;
  const got = await fetch(api + "/api/sessions/" + session, { headers: { Authorization: "Bearer " + token } });
  result.get = got.status;
  result.session = (await got.json()).session?.id;
} catch (e) {
  result.fetchError = String(e.name);
}
result.websocket = await new Promise((resolve) => {
  const ws = new WebSocket(api.replace("http", "ws") + "/ws?token=" + encodeURIComponent(token));
  ws.onopen = () => ws.send(JSON.stringify({ t: "hello", protocols: [1] }));
  ws.onmessage = (m) => { resolve(JSON.parse(m.data).t); ws.close(); };
  ws.onerror = () => resolve("error");
});
window.result = result;
</script>`;
}

function listen(html: () => string): Promise<{ server: Server; origin: string }> {
  const server = createServer((_, res) => {
    res.writeHead(200, { "Content-Type": "text/html" });
    res.end(html());
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve({ server, origin: `http://127.0.0.1:${port}` });
    }),
  );
}

let apiBase = "";
const allowed = await listen(() => probePage(apiBase));
const foreign = await listen(() => probePage(apiBase));

const agentwire = spawn(bin, [
  "serve", "--addr", "127.0.0.1:0", "--token", TOKEN, "--db", join(tmp, "store.db"),
  "--www", join(root, "www"), "--allow-origin", allowed.origin,
], { stdio: ["ignore", "pipe", "inherit"] });
const cleanup = () => {
  agentwire.kill("SIGKILL");
  allowed.server.close();
  foreign.server.close();
  rmSync(tmp, { recursive: true, force: true });
};

try {
  const printed = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the server did not start")), 30_000);
    createInterface({ input: agentwire.stdout! }).on("line", (line) => {
      const m = /^agentwire: serving (http:\/\/[^ ]+)$/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    agentwire.on("exit", (code) => reject(new Error(`the server exited (${code})`)));
  });
  assert.ok(printed.endsWith(`/#token=${TOKEN}`), `the printed URL keeps the token in its fragment: ${printed}`);
  apiBase = new URL(printed).origin;

  const context = await launchChromium(join(tmp, "profile"));
  try {
    const page = await context.newPage();
    await page.goto(allowed.origin);
    await page.waitForFunction(() => "result" in window, null, { timeout: 30_000 });
    const ok = (await page.evaluate(() => (window as any).result)) as Record<string, unknown>;
    assert.equal(ok.create, 201, `the allowed origin creates a session: ${JSON.stringify(ok)}`);
    assert.equal(ok.get, 200);
    assert.match(String(ok.session), /^ses_[0-9a-f]+$/);
    assert.equal(ok.websocket, "welcome");

    await page.goto(foreign.origin);
    await page.waitForFunction(() => "result" in window, null, { timeout: 30_000 });
    const refused = (await page.evaluate(() => (window as any).result)) as Record<string, unknown>;
    assert.equal(refused.fetchError, "TypeError", `another origin reads nothing: ${JSON.stringify(refused)}`);
    assert.equal(refused.websocket, "error");
    const sessions = await (await fetch(`${apiBase}/api/sessions`, { headers: { Authorization: `Bearer ${TOKEN}` } })).json();
    assert.equal(sessions.sessions.length, 1, "the refused page's POST created nothing (its preflight failed)");
    // The other page guesses tokens with images (no Origin, no preflight): the server refuses
    // them by their Sec-Fetch-Site before looking at the token, so the real user is not
    // locked out by the wrong-token limit.
    await page.evaluate(async (api) => {
      const loads = [];
      for (let i = 0; i < 60; i++) {
        const img = new Image();
        loads.push(new Promise((r) => { img.onload = img.onerror = r; }));
        img.src = `${api}/api/info?token=guess-${i}-0123456789abcdef`;
      }
      await Promise.all(loads);
    }, apiBase);
    const after = await fetch(`${apiBase}/api/info`, { headers: { Authorization: `Bearer ${TOKEN}` } });
    assert.equal(after.status, 200, "60 guesses from another page left the real token working");

    // The demo page: token in the fragment, out of the address bar, kept across a reload.
    const problems: string[] = [];
    page.on("console", (m) => {
      if (m.type() === "error") problems.push(m.text());
    });
    page.on("pageerror", (e) => problems.push(e.message));
    await page.goto(`${printed}`);
    const live = () => page.waitForFunction(() => {
      const state = document.querySelector("#connection")?.getAttribute("data-state");
      return (state === "live" || state === "caught_up") && document.querySelectorAll("#sessions li").length > 0;
    }, null, { timeout: 30_000 });
    await live();
    assert.ok(!page.url().includes("token"), `the token left the address bar: ${page.url()}`);
    await page.reload();
    await live();
    assert.ok(!page.url().includes("token"));
    // An old link with the token in the query still works, and is cleaned the same way.
    await page.goto(`${apiBase}/?token=${TOKEN}`);
    await live();
    assert.ok(!page.url().includes("token"), page.url());
    assert.deepEqual(problems, [], "no CSP violation or error on the demo page");
  } finally {
    await context.close();
  }
  console.log("security: the allowed origin uses the API and the WebSocket, another does not; the demo page keeps its token out of the URL");
} finally {
  cleanup();
}
