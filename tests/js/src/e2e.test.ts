// End-to-end tests of the demo page (www/) in a real browser: a real `agentwire serve` on port
// 0 serving the page same-origin (`--www <repo>/www`, with the built package installed in
// www/node_modules by scripts/setup.sh's setup_page), a fresh SQLite store, and Debian's
// headless Chromium driven by playwright-core through the page's own controls.
//
// Run 1, the demo agent: create a session, stream an answer, open a tool call, answer an
// approval, interrupt a turn, switch sessions and reload the page mid-turn, have the server drop
// every WebSocket mid-turn, show a provider crash with its stderr, open a saved transcript with
// no server request, and keep a 100k-event transcript virtualized. Run 2, the same core flow
// with the real Claude Code CLI against `agentwire-testkit fake-model`. Run 3, two companions on one
// throwaway PostgreSQL: the page served by node B follows a session hosted on node A, through
// node B's kill -9 and restart mid-turn, while B appends a session of its own. Every wait is a
// condition with a deadline. Run 4, the store fails mid-turn (a tmpfs the test mounts, fills,
// then frees): the session head says how many events wait, and the answer ends whole. Each step saves a screenshot under target/e2e/<run>/ (UPDATE_SCREENSHOTS=1 copies
// the README's three to docs/screenshots/).

import { strict as assert } from "node:assert";
import { execFileSync, type ChildProcess } from "node:child_process";
import {
  closeSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync,
  writeFileSync, writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { type BrowserContext, type Page } from "playwright-core";

import { Projector } from "../../../pkg-web/agentwire.js";
import type { Item } from "../../../pkg-web/agentwire.js";
import { normalize, Projector as TranscriptProjector } from "../../../pkg-web/transcripts/agentwire.js";
import { bin, launchChromium, loadPackage, root, testkitBin } from "./fixtures.js";
import { apiClient, claudeOffline, firstLine, SERVING, spawnTracked, start as startProcess, stop } from "./processes.js";

declare global {
  interface Window {
    agentwirePage: any;
    e2eSeen: number[];
    e2eRecording: boolean;
    e2eAfterFrame: (() => void) | undefined;
    e2eChosen: number | undefined;
  }
}

const TOKEN = "e2e-test-token-0123456789";
const DEADLINE_MS = 20_000;
const ARTIFACTS = join(root, "target", "e2e");
const CLI_DIR = join(root, ".agentwire", "clis", "node_modules", ".bin");
const TRANSCRIPT = join(root, "tests", "data", "claude", "takopi__claude_stream_json_session.jsonl");

for (const [what, path] of [
  ["the web package (scripts/build-wasm)", join(root, "pkg-web", "agentwire.js")],
  ["the page's copy of it (scripts/setup.sh: setup_page)", join(root, "www", "node_modules", "agentwire", "agentwire.js")],
]) {
  if (!existsSync(path!)) throw new Error(`${what} is missing: ${path}`);
}
loadPackage();

const started = Date.now();
const timings: string[] = [];
/** Undone in reverse order at the end, pass or fail; processes are killed on exit too. */
const cleanups: (() => unknown)[] = [];
async function cleanup() {
  for (const f of cleanups.splice(0).reverse()) {
    try {
      await f();
    } catch (e) {
      console.error(`cleanup: ${(e as Error).message}`);
    }
  }
}

// ---- processes ----

/** [`startProcess`], stopped at the end of the run. */
function start(args: string[], env?: NodeJS.ProcessEnv, program = bin): ChildProcess {
  const child = startProcess(args, env, program);
  cleanups.push(() => stop(child));
  return child;
}

interface Server {
  addr: string;
  url: string;
  api: (method: string, path: string, body?: unknown) => Promise<any>;
  stop: () => Promise<void>;
  child: ChildProcess;
}

/** A real `agentwire serve` serving the real page: on port 0 unless `at.addr`, with a fresh
 * SQLite store in `dir` unless `at.store` names a PostgreSQL one. */
async function serve(
  dir: string, extra: string[], env?: NodeJS.ProcessEnv, at: { addr?: string; store?: string } = {},
): Promise<Server> {
  const child = start([
    "serve", "--addr", at.addr ?? "127.0.0.1:0", "--token", TOKEN,
    ...(at.store ? ["--store", at.store] : ["--db", join(dir, "store.db")]),
    "--www", join(root, "www"), ...extra,
  ], env);
  const addr = await firstLine(child, SERVING, "agentwire serve");
  const api = apiClient(`http://${addr}`, TOKEN);
  return { addr, url: `http://${addr}/?token=${TOKEN}`, api, stop: () => stop(child), child };
}

/** The whole stored log of a session, projected in one pass (an uninterrupted client). */
async function storedItems(server: Server, session: string): Promise<{ items: Item[]; events: any[] }> {
  const { events, epoch } = await server.api("GET", `/api/sessions/${session}/events?after=0&limit=10000`);
  const p = new Projector();
  p.ingest(JSON.stringify({ t: "events", session, epoch, events }), Date.now());
  const items = p.snapshot(session) as Item[];
  p.free();
  return { items, events };
}

/** Waits until the server reports `mode` as the session's current mode. */
async function modeIs(server: Server, session: string, mode: string) {
  const deadline = Date.now() + DEADLINE_MS;
  let described = await server.api("GET", `/api/sessions/${session}`);
  while (described.current_mode !== mode && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    described = await server.api("GET", `/api/sessions/${session}`);
  }
  assert.equal(described.current_mode, mode, "the mode the page set");
}

// ---- the browser ----

async function browser(dir: string): Promise<BrowserContext> {
  const context = await launchChromium(join(dir, "profile"), { viewport: { width: 1280, height: 800 } });
  cleanups.push(() => context.close());
  // A hook to act right after the page's client took in a WebSocket frame, before the
  // animation frame that delivers its batch: `window.e2eAfterFrame`, called once.
  await context.addInitScript(() => {
    const Native = window.WebSocket;
    window.WebSocket = class extends Native {
      set onmessage(handler: ((e: MessageEvent) => void) | null) {
        super.onmessage = handler && ((e: MessageEvent) => {
          handler.call(this, e);
          const f = window.e2eAfterFrame;
          window.e2eAfterFrame = undefined;
          f?.();
        });
      }
      get onmessage() {
        return super.onmessage;
      }
    };
  });
  return context;
}

/** A run's screenshots: target/e2e/<run>/<nn>-<step>.png, one per step. */
function recorder(run: string) {
  const dir = join(ARTIFACTS, run);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  let n = 0;
  let last = Date.now();
  return async (page: Page, name: string) => {
    n += 1;
    await page.screenshot({ path: join(dir, `${String(n).padStart(2, "0")}-${name}.png`) });
    timings.push(`${run}/${name} ${Date.now() - last} ms`);
    last = Date.now();
  };
}

/** Every watched page's problems, printed when a step fails. */
const allProblems: string[][] = [];

/** A page with what it did: page and console errors, the path of every request it made. */
type Watched = Page & { problems: string[]; seen: string[] };

/** Opens the page in a new tab and watches it: page errors, console errors, every request. */
async function open(context: BrowserContext, url: string): Promise<Watched> {
  const page = (await context.newPage()) as Watched;
  const problems: string[] = (page.problems = []);
  allProblems.push(problems);
  const requests: string[] = (page.seen = []);
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on("request", (r) => requests.push(new URL(r.url()).pathname));
  page.on("websocket", (ws) => requests.push(new URL(ws.url()).pathname));
  await page.goto(url);
  await until(page, "the page is up", () => window.agentwirePage !== undefined);
  await connected(page);
  return page;
}

/** A condition evaluated in the page on every animation frame, with a deadline; resolves to
 * the condition's (truthy) value. */
async function until(page: Page, what: string, fn: (arg: any) => unknown, arg?: unknown, ms = DEADLINE_MS) {
  try {
    return await page.waitForFunction(fn, arg, { timeout: ms, polling: "raf" });
  } catch (e) {
    throw new Error(`timed out: ${what} (${(e as Error).message.split("\n")[0]})`);
  }
}

const connected = (page: Page) =>
  until(page, "the connection is live", () =>
    ["live", "caught_up"].includes(document.querySelector("#connection")!.getAttribute("data-state")!));

const lifecycle = (page: Page, state: string) =>
  until(page, `lifecycle ${state}`, (s) => document.querySelector("#lifecycle .badge")?.textContent === s, state);

/** The page's items for the session shown (its own copy, built from the batches). */
const items = (page: Page): Promise<Item[]> => page.evaluate(() => window.agentwirePage.view.items);

const current = (page: Page): Promise<string> => page.evaluate(() => window.agentwirePage.state.current);

async function createSession(page: Page, provider: string, cwd = "") {
  const before = await page.locator("#sessions li").count();
  const shown = await current(page);
  await page.selectOption("#provider", provider);
  await page.fill("#cwd", cwd);
  await page.click("#create");
  await until(page, "the new session is listed and selected", ([n, shown]) => {
    const id = window.agentwirePage.state.current;
    return typeof id === "string" && id !== shown && document.querySelectorAll("#sessions li").length === n + 1 &&
      document.querySelector(`#sessions li.selected[data-session="${id}"]`) !== null;
  }, [before, shown]);
  const id = await current(page);
  await lifecycle(page, "idle");
  return id;
}

async function send(page: Page, prompt: string) {
  await page.fill("#prompt", prompt);
  await page.click("#send");
  await until(page, "the prompt is accepted", () => (document.querySelector("#prompt") as HTMLTextAreaElement).value === "");
}

/** The index of the last item of `kind`, once there is one for which `test` (a JavaScript
 * expression over `item`) holds. The test runs here in Node, not in the page: the page's
 * Content-Security-Policy allows no eval there. */
async function lastItem(page: Page, kind: string, test = "true"): Promise<number> {
  const holds = new Function("item", `return ${test}`) as (item: unknown) => boolean;
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const all = (await items(page)) as any[];
    for (let i = all.length - 1; i >= 0; i--) {
      if (all[i].kind === kind && holds(all[i])) return i;
    }
    if (Date.now() > deadline) throw new Error(`timed out: a ${kind} item (${test})`);
    await new Promise((r) => setTimeout(r, 30));
  }
}

/** The row of item `index`. The list renders only the rows in view; the steps look at rows
 * near the end, where it sticks while new items arrive. */
function row(page: Page, index: number) {
  return page.locator(`#timeline .item[data-index="${index}"]`);
}

/** No id twice: tool calls, messages, approvals. */
function assertNoDuplicates(items: Item[], what: string) {
  const seen = new Set<string>();
  for (const item of items) {
    const id =
      item.kind === "tool_call" ? `tool ${item.tool_call_id}` :
      item.kind === "approval" ? `approval ${item.request_id}` :
      (item.kind === "assistant_message" || item.kind === "reasoning") && item.message_id ? `${item.kind} ${item.message_id}` :
      undefined;
    if (!id) continue;
    assert.ok(!seen.has(id), `${what}: ${id} twice`);
    seen.add(id);
  }
}

/** The page, a fresh load of it, and the stored log projected agree on the session's items. */
async function assertSameTimeline(context: BrowserContext, page: Page, server: Server, session: string, what: string) {
  const shown = await items(page);
  const { items: stored } = await storedItems(server, session);
  assert.deepEqual(shown, stored, `${what}: the page's items = the stored log projected`);
  assertNoDuplicates(shown, what);
  const fresh = await open(context, `${server.url}#${session}`);
  await until(fresh, "the fresh page shows the session", (s) => window.agentwirePage.state.current === s, session);
  await until(fresh, "the fresh page has every item", (n) => window.agentwirePage.view.items.length === n, shown.length);
  const reloaded = await items(fresh);
  await fresh.close();
  assert.deepEqual(reloaded, stored, `${what}: a fresh load's items = the stored log projected`);
  assert.deepEqual(fresh.problems, [], `${what}: the fresh page had problems`);
}

/** Records, once per animation frame, the text length of the streaming assistant row (-1: none). */
async function recordStreaming(page: Page) {
  await page.evaluate(() => {
    window.e2eSeen = [];
    window.e2eRecording = true;
    const tick = () => {
      const text = document.querySelector("#timeline .item-assistant_message.streaming .md");
      window.e2eSeen.push(text ? text.textContent!.length : -1);
      if (window.e2eRecording) requestAnimationFrame(tick);
    };
    tick();
  });
}

const stopRecording = (page: Page): Promise<number[]> =>
  page.evaluate(() => ((window.e2eRecording = false), window.e2eSeen));

/** The row grew while streaming, frame after frame, and never left the DOM meanwhile. */
function assertStreamed(seen: number[]) {
  const from = seen.findIndex((n) => n >= 0);
  const to = seen.length - 1 - [...seen].reverse().findIndex((n) => n >= 0);
  const streaming = seen.slice(from, to + 1);
  const lengths = [...new Set(streaming)];
  assert.ok(from >= 0 && lengths.length >= 2, `the text grew while streaming: ${JSON.stringify(seen)}`);
  assert.ok(!streaming.includes(-1), `the streaming row vanished for a frame: ${JSON.stringify(streaming)}`);
  assert.deepEqual(lengths, [...lengths].sort((a, b) => a - b), "the streaming text only grows");
}

// ---- run 1: the demo agent ----

/** The answer of the demo agent's `slow` scenario (src/companion/demo_agent.rs). */
const SLOW = Array.from({ length: 200 }, (_, i) => `Slow chunk ${String(i + 1).padStart(3)}/200.`).join(" ");

async function demoRun() {
  const shot = recorder("demo");
  const dir = mkdtempSync(join(tmpdir(), "agentwire-e2e-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }));
  const server = await serve(dir, ["--demo-delay-ms", "20", "--stall-ms", "1500"]);
  const context = await browser(dir);
  const page = await open(context, server.url);
  assert.equal(await page.locator("#sessions li").count(), 0, "a fresh store");
  await shot(page, "empty");

  // Create a session through the UI.
  const session = await createSession(page, "demo");
  await shot(page, "session-created");

  // A prompt: the answer is streamed in (the long answer below is watched frame by frame).
  await send(page, "hello agentwire");
  const answer = await lastItem(page, "assistant_message", "!item.streaming && item.text.length > 0");
  await lifecycle(page, "idle");
  const hello = (await storedItems(server, session)).events.filter((e) => e.type === "message_streamed");
  assert.ok(hello.length >= 5, `streamed in deltas: ${hello.length}`);
  await row(page, answer).waitFor();
  assert.match(await row(page, answer).innerText(), /You said: "hello agentwire"/);
  assert.match(await page.locator("#usage").innerText(), /\d+ in · \d+ out/);
  await shot(page, "streamed-answer");

  // A tool call: open it, see its input and output.
  await send(page, "please use a tool");
  const tool = await lastItem(page, "tool_call", "item.status === 'completed'");
  await lifecycle(page, "idle");
  await row(page, tool).locator("button.toggle").click();
  await row(page, tool).locator(".tool-output").waitFor();
  assert.match(await row(page, tool).locator(".tool-input").innerText(), /"command": "ls"/);
  assert.match(await row(page, tool).locator(".tool-output").innerText(), /Cargo\.toml\s+README\.md/);
  await shot(page, "tool-call-open");

  // An approval: Allow, and the tool runs.
  await send(page, "approve a command, please");
  const approval = await lastItem(page, "approval", "item.status === 'pending'");
  await row(page, approval).locator("button.allow").waitFor();
  await shot(page, "approval-pending");
  await row(page, approval).locator("button.allow").click();
  await lastItem(page, "approval", "item.status === 'granted'");
  const asked = (await items(page))[approval] as Extract<Item, { kind: "approval" }>;
  assert.ok(asked.tool_call_id, "the approval names its tool call");
  await lastItem(page, "tool_call", `item.tool_call_id === ${JSON.stringify(asked.tool_call_id)} && item.status === 'completed' && item.output.includes('Cargo.toml')`);
  await lifecycle(page, "idle");
  await shot(page, "approval-granted");

  // The permission mode, from the session head: in "Don't ask" a tool that would ask is
  // refused without a question; back in "Default" it asks again.
  await until(page, "the mode selector", () => !(document.getElementById("mode") as HTMLSelectElement).hidden);
  assert.equal(await page.locator("#mode").inputValue(), "default");
  await page.selectOption("#mode", "dontAsk");
  await modeIs(server, session, "dontAsk");
  const approvalsBefore = (await items(page)).filter((i) => i.kind === "approval").length;
  await send(page, "approve a command, please");
  await lastItem(page, "tool_call", "item.status === 'failed' && (item.error ?? item.output).includes('denied')");
  await lifecycle(page, "idle");
  assert.equal((await items(page)).filter((i) => i.kind === "approval").length, approvalsBefore, "no question asked");
  await shot(page, "mode-dont-ask");
  await page.selectOption("#mode", "default");
  await modeIs(server, session, "default");

  // A slow answer streams in: its row grows frame after frame. Interrupt it: back to idle,
  // the turn cancelled.
  await recordStreaming(page);
  await send(page, "a slow answer, please");
  const slow = await lastItem(page, "assistant_message", "item.streaming && item.text.length > 600");
  const seen = await stopRecording(page);
  await page.click("#interrupt");
  assertStreamed(seen);
  await lifecycle(page, "idle");
  const interrupted = (await items(page))[slow] as Extract<Item, { kind: "assistant_message" }>;
  assert.ok(!interrupted.streaming && interrupted.text.length < SLOW.length, "the answer stopped part-way");
  const { events } = await storedItems(server, session);
  const lastRun = events.filter((e) => e.type === "run_started").at(-1).run_id;
  const terminal = events.filter((e) => e.run_id === lastRun && /^run_(completed|failed|cancelled|timeout)$/.test(e.type));
  assert.deepEqual(terminal.map((e) => e.type), ["run_cancelled"], "the interrupted turn was cancelled");
  await shot(page, "interrupted");

  // Mid-turn: switch to another session and back, several times; the same timeline.
  const other = await createSession(page, "demo");
  assert.notEqual(other, session);
  await page.click(`#sessions li[data-session="${session}"]`);
  await until(page, "the first session is shown", (s) => window.agentwirePage.state.current === s, session);
  await send(page, "another slow answer");
  const streaming = await lastItem(page, "assistant_message", "item.streaming && item.text.length > 0");
  // Back and forth, in the page: each click lands right after the client took in a frame,
  // before the animation frame that delivers its batch.
  const { switches, wrong } = await page.evaluate(async ([a, b, index, slow]) => {
    const afterFrame = () => new Promise<void>((resolve) => (window.e2eAfterFrame = resolve));
    const nextAnimationFrame = () => new Promise((resolve) => requestAnimationFrame(resolve));
    const click = (id: string) => (document.querySelector(`#sessions li[data-session="${id}"]`) as HTMLElement).click();
    const wrong: string[] = [];
    let switches = 0;
    for (; switches < 20; switches++) {
      await afterFrame();
      click(b);
      await afterFrame();
      click(a);
      await nextAnimationFrame();
      await nextAnimationFrame();
      const item = window.agentwirePage.view.items[index];
      if (!slow.startsWith(item.text)) wrong.push(item.text.slice(-100));
      if (!item.streaming) break;
    }
    return { switches, wrong };
  }, [session, other, streaming, SLOW] as const);
  assert.deepEqual(wrong, [], "switched back mid-turn: each chunk once, in order");
  assert.ok(switches >= 5, `${switches} switches mid-turn`);
  assert.equal(await current(page), session);
  assert.deepEqual(page.problems, [], "no problem while switching sessions");
  assertNoDuplicates(await items(page), "switching sessions");
  await shot(page, "switched-mid-turn");
  await lastItem(page, "assistant_message", "!item.streaming && item.text.includes('200/200')");
  await lifecycle(page, "idle");
  await assertSameTimeline(context, page, server, session, "after switching sessions");

  // Mid-turn: reload the page; the same session, the same timeline.
  await send(page, "one more slow answer");
  const reloading = await lastItem(page, "assistant_message", "item.streaming && item.text.length > 600");
  await page.reload();
  await until(page, "the page is up again", () => window.agentwirePage?.state.client);
  await connected(page);
  await until(page, "the reload shows the same session", (s) => window.agentwirePage.state.current === s, session);
  await until(page, "the answer is back", (i) => window.agentwirePage.view.items[i]?.text.length > 600, reloading);
  await shot(page, "reloaded-mid-turn");
  await lastItem(page, "assistant_message", "!item.streaming && item.text.includes('200/200')");
  await lifecycle(page, "idle");
  await assertSameTimeline(context, page, server, session, "after the reload");

  // Drop every WebSocket several times mid-turn: the page resumes with no duplicate.
  await send(page, "slow again, while the server drops us");
  let text = await lastItem(page, "assistant_message", "item.streaming && item.text.length > 0");
  let drops = 0;
  while (drops < 4) {
    const at = await page.evaluate((i) => window.agentwirePage.view.items[i].text.length, text);
    await until(page, "the answer streams", ([i, at]) => {
      const item = window.agentwirePage.view.items[i];
      return item.text.length > at + 40 || !item.streaming;
    }, [text, at]);
    const before = await page.evaluate(() => window.agentwirePage.state.client.drops);
    if (!(await page.evaluate((i) => window.agentwirePage.view.items[i].streaming, text))) break;
    const { dropped } = await server.api("POST", "/api/connections/drop");
    assert.ok(dropped >= 1, "a socket was dropped");
    drops += 1;
    await until(page, "the page reconnected", (d) => window.agentwirePage.state.client.drops > d, before);
    await connected(page);
    const shown = ((await items(page))[text] as { text: string }).text;
    assert.ok(SLOW.startsWith(shown), `resumed mid-turn: each chunk once, in order: ${JSON.stringify(shown.slice(-120))}`);
  }
  assert.ok(drops >= 3, `${drops} drops mid-turn`);
  text = await lastItem(page, "assistant_message", "!item.streaming && item.text.includes('200/200')");
  await lifecycle(page, "idle");
  await until(page, "caught up", () => document.querySelector("#connection")!.getAttribute("data-state") === "caught_up");
  assert.equal((await items(page))[text]!.kind, "assistant_message");
  assert.equal(((await items(page))[text] as { text: string }).text, SLOW, "every chunk exactly once");
  await shot(page, "resumed-after-drops");
  await assertSameTimeline(context, page, server, session, `after ${drops} drops`);

  // A provider crash: the error with its exit code, its stderr behind a toggle.
  await page.click(`#sessions li[data-session="${other}"]`);
  await until(page, "the second session is shown", (s) => window.agentwirePage.state.current === s, other);
  await send(page, "crash, please");
  const error = await lastItem(page, "error");
  await lifecycle(page, "error");
  assert.match(await row(page, error).locator(".error-text").innerText(), /exited with code 3/);
  assert.equal(await row(page, error).locator(".stderr").count(), 0, "stderr starts folded");
  await row(page, error).locator("button.toggle").click();
  assert.match(await row(page, error).locator(".stderr").innerText(), /crashed on purpose/);
  await shot(page, "provider-crash");

  // A turn that goes silent is shown stalled (`--stall-ms 1500`), not as work; the interrupt
  // ends it.
  await createSession(page, "demo");
  await send(page, "hang, please");
  await until(page, "the stall is shown", () =>
    /^stalled: no output for \d+ s$/.test(document.querySelector("#lifecycle .lifecycle-stalled")?.textContent ?? ""));
  await lifecycle(page, "running");
  await shot(page, "stalled");
  await page.click("#interrupt");
  await lifecycle(page, "idle");
  assert.equal(await page.locator("#lifecycle .lifecycle-stalled").count(), 0, "the stall ends with the turn");

  // Open a saved transcript: projected in the browser, no request to the server.
  const before = page.seen.length;
  await page.setInputFiles("#transcript", TRANSCRIPT);
  await until(page, "the transcript is shown", () => window.agentwirePage.state.current?.transcript !== undefined);
  const expected = projectTranscript(readFileSync(TRANSCRIPT, "utf8"));
  await until(page, "every transcript item", (n) => window.agentwirePage.view.items.length === n, expected.length);
  assert.deepEqual(await items(page), expected, "the transcript projected in the page = in Node");
  const tools = expected.findIndex((i) => i.kind === "tool_call");
  await row(page, tools).locator("button.toggle").click();
  await row(page, tools).locator(".tool-input").waitFor();
  const during = page.seen.slice(before).filter((p) => p.startsWith("/api") || p.startsWith("/ws"));
  assert.deepEqual(during, [], "no server request while opening the transcript");
  assert.match(await page.locator("#session-title").innerText(), /takopi__claude_stream_json_session\.jsonl/);
  await shot(page, "transcript");

  // 100k events: the timeline stays virtualized.
  await bigTranscript(page, dir, shot);

  assert.deepEqual(page.problems, [], "the page had problems");
  await context.close();
  await server.stop();
}

/** What the page shows for a transcript: the same projection, in Node. */
/** Fills the filesystem of `path` with that one file until no byte more fits. */
function fill(path: string) {
  const fd = openSync(path, "w");
  const zeros = Buffer.alloc(1 << 20);
  for (let size = zeros.length; size > 0;) {
    try {
      if (writeSync(fd, zeros, 0, size) === 0) size >>= 1;
    } catch {
      size >>= 1;
    }
  }
  closeSync(fd);
}

/** Run 4: the SQLite log on a tmpfs that fills mid-turn and then frees. While it is full the
 * session head says the store is unavailable and how many events wait; once it is back the
 * badge goes and the answer is whole, as stored. */
async function storeRun() {
  const shot = recorder("store");
  const dir = mkdtempSync(join(tmpdir(), "agentwire-e2e-store-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }));
  const disk = join(dir, "disk");
  mkdirSync(disk);
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=16m", "tmpfs", disk], { stdio: "pipe" });
  } catch (e) {
    console.log(`e2e: store run SKIPPED: cannot mount a tmpfs (root only): ${(e as Error).message.split("\n")[0]}`);
    return;
  }
  cleanups.push(() => execFileSync("umount", ["-l", disk]));
  // A small queue: the session stops reading the agent while the disk is full.
  const server = await serve(disk, ["--demo-delay-ms", "10", "--store-queue-events", "40"]);
  const context = await browser(dir);
  const page = await open(context, server.url);
  const session = await createSession(page, "demo");
  await send(page, "a slow answer, please");
  // Conditions as functions, not `lastItem`'s strings: the page's CSP allows no eval.
  const streaming = await until(page, "the slow answer streams", () => {
    const items = window.agentwirePage.view.items as any[];
    for (let i = items.length - 1; i >= 0; i--) {
      const item = items[i];
      if (item.kind === "assistant_message" && item.streaming && item.text.length > 200) return i + 1;
    }
    return 0;
  });
  const slow = ((await streaming.jsonValue()) as number) - 1;
  const filler = join(disk, "filler");
  fill(filler);
  await until(page, "the head says events wait for the store", () =>
    /^store unavailable: [1-9]\d* events waiting$/.test(document.querySelector("#store .badge")?.textContent ?? ""));
  assert.match(await page.locator("#store .badge").getAttribute("title") ?? "", /full/);
  await shot(page, "store-unavailable");
  rmSync(filler);
  await until(page, "the store is back", () => document.querySelector("#store")!.childElementCount === 0);
  await until(page, "the slow answer ends whole", ([i, n]) => {
    const item = window.agentwirePage.view.items[i];
    return item && !item.streaming && item.text.length === n;
  }, [slow, SLOW.length]);
  await lifecycle(page, "idle");
  const answer = (await items(page))[slow] as Extract<Item, { kind: "assistant_message" }>;
  assert.equal(answer.text, SLOW, "the answer is whole, in order");
  await shot(page, "store-back");
  await assertSameTimeline(context, page, server, session, "after the store came back");
  assert.deepEqual(page.problems, [], "the page had problems");
}

function projectTranscript(text: string): Item[] {
  const p = TranscriptProjector.transcript(null, "transcript");
  p.ingest(text, Date.now());
  p.finish(Date.now());
  const items = p.snapshot("transcript") as Item[];
  p.free();
  return items;
}

/** A Claude Code stream-json transcript of `turns` turns: a question, an answer streamed in
 * deltas, a tool call and its result, a result record. */
function synthetic(turns: number): string {
  const S = "synthetic-session";
  const lines: string[] = [];
  const push = (o: unknown) => lines.push(JSON.stringify(o));
  const se = (event: unknown) => push({ type: "stream_event", session_id: S, parent_tool_use_id: null, event });
  const assistant = (id: string, content: unknown[]) => push({
    type: "assistant", session_id: S, parent_tool_use_id: null,
    message: { id, type: "message", role: "assistant", model: "demo-1", content, usage: { input_tokens: 10, output_tokens: 20 } },
  });
  push({ type: "system", subtype: "init", session_id: S, cwd: "/tmp/big", model: "demo-1", tools: ["Bash"], permissionMode: "default" });
  for (let i = 0; i < turns; i++) {
    const msg = `msg_big_${i}`;
    const tool = `toolu_big_${i}`;
    const text = `Answer ${i}: ${"streamed words ".repeat(6).trim()}.`;
    push({ type: "user", session_id: S, parent_tool_use_id: null, message: { role: "user", content: [{ type: "text", text: `Question ${i}` }] } });
    se({ type: "message_start", message: { id: msg, type: "message", role: "assistant", model: "demo-1", content: [], usage: { input_tokens: 10, output_tokens: 1 } } });
    se({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });
    for (let k = 0; k < text.length; k += 10) se({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: text.slice(k, k + 10) } });
    assistant(msg, [{ type: "text", text }]);
    se({ type: "content_block_stop", index: 0 });
    assistant(msg, [{ type: "tool_use", id: tool, name: "Bash", input: { command: `echo ${i}` } }]);
    se({ type: "message_stop" });
    push({ type: "user", session_id: S, parent_tool_use_id: null, message: { role: "user", content: [{ type: "tool_result", tool_use_id: tool, content: `${i}`, is_error: false }] } });
    push({ type: "result", subtype: "success", is_error: false, session_id: S, result: text, num_turns: 1, duration_ms: 10, total_cost_usd: 0.0001, usage: { input_tokens: 10, output_tokens: 20 } });
  }
  return lines.join("\n") + "\n";
}

async function bigTranscript(page: Watched, dir: string, shot: (page: Page, name: string) => Promise<void>) {
  // Events per turn, exactly: the generator is linear in its turns.
  const count = (turns: number) => normalize("claude", synthetic(turns), 0).split("\n").filter(Boolean).length;
  const perTurn = count(2) - count(1);
  const TURNS = Math.ceil((100_000 - count(1) + perTurn) / perTurn);
  const events = count(1) + (TURNS - 1) * perTurn;
  const file = join(dir, "synthetic-100k.jsonl");
  writeFileSync(file, synthetic(TURNS));
  const n = TURNS * 3;
  /** Turn i is three items: the question, the answer, the tool call. */
  const want = (index: number) => {
    const turn = Math.floor(index / 3);
    return [`Question ${turn}`, `Answer ${turn}: streamed words`, `Bash`][index % 3]!;
  };

  // Time to render: from the file chosen to its last row in the DOM, on the page's clock.
  await page.evaluate(() => {
    document.querySelector("#transcript")!.addEventListener("change", () => {
      window.e2eChosen = performance.now();
    }, { once: true });
  });
  await page.setInputFiles("#transcript", file);
  const rendered = await until(page, "the last item is rendered", (n) =>
    window.agentwirePage.view.items.length === n &&
    document.querySelector(`#timeline .item[data-index="${n - 1}"]`) !== null &&
    performance.now() - window.e2eChosen!, n, 60_000);
  const renderMs = Math.round((await rendered.jsonValue()) as number);

  const rows = () => page.evaluate(() => Array.from(document.querySelectorAll("#timeline .item")).map((r) => ({
    index: Number((r as HTMLElement).dataset.index),
    text: r.textContent ?? "",
    top: r.getBoundingClientRect().top,
    bottom: r.getBoundingClientRect().bottom,
  })));
  const viewport = () => page.evaluate(() => {
    const r = document.querySelector("#timeline")!.getBoundingClientRect();
    return { top: r.top, bottom: r.bottom };
  });
  /** Bounded, contiguous rows covering the viewport, each showing its own item. */
  const check = async (where: string) => {
    const shown = await rows();
    assert.ok(shown.length > 0 && shown.length < 200, `${where}: ${shown.length} rows in the DOM`);
    const indexes = shown.map((r) => r.index).sort((a, b) => a - b);
    assert.equal(indexes.at(-1)! - indexes[0]! + 1, indexes.length, `${where}: contiguous rows`);
    for (const r of shown) {
      assert.ok(r.text.includes(want(r.index)), `${where}: row ${r.index} shows ${JSON.stringify(r.text)}, not ${JSON.stringify(want(r.index))}`);
    }
    const v = await viewport();
    const visible = shown.filter((r) => r.bottom > v.top && r.top < v.bottom).sort((a, b) => a.top - b.top);
    assert.ok(visible.length > 0, `${where}: rows in the viewport`);
    for (let i = 1; i < visible.length; i++) {
      assert.equal(visible[i]!.index, visible[i - 1]!.index + 1, `${where}: rows in order`);
      assert.ok(Math.abs(visible[i]!.top - visible[i - 1]!.bottom) < 2, `${where}: rows touch (${visible[i - 1]!.bottom} then ${visible[i]!.top})`);
    }
    return visible;
  };
  const end = await check("at the end");
  assert.equal(end.at(-1)!.index, n - 1, "the end shows the last item");
  await shot(page, "100k-end");

  // The middle: scroll to the offset of the middle item, as the list lays it out.
  const t1 = Date.now();
  await page.evaluate(() => {
    const timeline = document.querySelector("#timeline")!;
    timeline.scrollTop = timeline.scrollHeight / 2;
  });
  await until(page, "rows around the middle", (n) => {
    const shown = Array.from(document.querySelectorAll("#timeline .item")).map((r) => Number((r as HTMLElement).dataset.index));
    return shown.some((i) => Math.abs(i - n / 2) < n / 10) && !shown.includes(n - 1);
  }, n);
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  const scrollMs = Date.now() - t1;
  const middle = await check("in the middle");
  assert.ok(middle.every((r) => Math.abs(r.index - n / 2) < n / 10), `the middle shows middle items: ${middle.map((r) => r.index)}`);
  await shot(page, "100k-middle");

  // Back to the end.
  await page.evaluate(() => {
    const timeline = document.querySelector("#timeline")!;
    timeline.scrollTop = timeline.scrollHeight;
  });
  await until(page, "the last row again", (n) => {
    const last = document.querySelector(`#timeline .item[data-index="${n - 1}"]`);
    const v = document.querySelector("#timeline")!.getBoundingClientRect();
    return last !== null && last.getBoundingClientRect().bottom <= v.bottom + 1;
  }, n);
  const again = await check("at the end again");
  assert.equal(again.at(-1)!.index, n - 1);
  timings.push(`100k: ${events} events, ${n} items: rendered in ${renderMs} ms (file chosen to last row), scrolled to the middle in ${scrollMs} ms, ${end.length}-${middle.length} rows visible`);
}

// ---- run 2: the real Claude Code CLI against the fake model ----

async function claudeRun() {
  const shot = recorder("claude");
  if (!existsSync(join(CLI_DIR, "claude"))) throw new Error(`the pinned claude CLI is missing from ${CLI_DIR}: run scripts/install-clis`);
  const dir = mkdtempSync(join(tmpdir(), "agentwire-e2e-claude-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }));
  const home = join(dir, "home");
  const cwd = join(dir, "work");
  mkdirSync(home);
  mkdirSync(cwd);
  const fake = start(["fake-model", "--addr", "127.0.0.1:0"], undefined, testkitBin);
  const fakeAddr = await firstLine(fake, /^fake-model: listening http:\/\/(\S+)$/, "the fake model");
  // Cleared down to PATH and what the CLI needs to run offline (tests/common/real.rs).
  const env = claudeOffline(home, fakeAddr);
  const server = await serve(dir, ["--cli-dir", CLI_DIR], env);
  const context = await browser(dir);
  const page = await open(context, server.url);
  assert.ok((await page.locator("#provider option").allTextContents()).includes("claude"), "the server offers claude");
  const session = await createSession(page, "claude", cwd);
  await shot(page, "session-created");

  // The fake model streams its answer in a few deltas at once: the page may well get them in
  // one batch; the log shows they were streamed.
  await send(page, "hello");
  const answer = await lastItem(page, "assistant_message", "!item.streaming && item.text.length > 0");
  await lifecycle(page, "idle");
  assert.equal(((await items(page))[answer] as { text: string }).text, "Hello from the fake model.");
  const { events } = await storedItems(server, session);
  const deltas = events.filter((e) => e.type === "message_streamed").map((e) => e.data.delta);
  assert.ok(deltas.length >= 2, `streamed in deltas: ${JSON.stringify(deltas)}`);
  assert.equal(deltas.join(""), "Hello from the fake model.");
  await shot(page, "answer");

  // `touch` is not read-only: Claude Code asks before running it.
  await send(page, "tool\n$ touch approved.txt && echo hello-from-tool");
  const approval = await lastItem(page, "approval", "item.status === 'pending'");
  assert.equal(((await items(page))[approval] as { tool_name: string }).tool_name, "Bash");
  await row(page, approval).locator("button.allow").waitFor();
  assert.ok(!existsSync(join(cwd, "approved.txt")), "nothing ran before the approval");
  await shot(page, "approval-pending");
  await row(page, approval).locator("button.allow").click();
  const tool = await lastItem(page, "tool_call", "item.status === 'completed' && item.output.includes('hello-from-tool')");
  await lastItem(page, "assistant_message", "!item.streaming && item.text.includes('hello-from-tool')");
  await lifecycle(page, "idle");
  assert.ok(existsSync(join(cwd, "approved.txt")), "the approved command ran in the session's directory");
  await row(page, tool).locator("button.toggle").click();
  assert.match(await row(page, tool).locator(".tool-output").innerText(), /hello-from-tool/);
  await shot(page, "tool-call-open");
  await assertSameTimeline(context, page, server, session, "claude");

  // The CLI reached the fake model and nothing else.
  const requests = (await (await fetch(`http://${fakeAddr}/_requests`)).json()) as { method: string; path: string }[];
  assert.ok(requests.some((r) => r.method === "POST" && r.path.startsWith("/v1/messages")), "the CLI asked the model");
  for (const r of requests) {
    assert.ok((r.method === "POST" && r.path.startsWith("/v1/messages")) || (r.method === "HEAD" && r.path === "/"), `unexpected request ${r.method} ${r.path}`);
  }
  assert.deepEqual(page.problems, [], "the page had problems");
  await context.close();
  await server.stop();
  await stop(fake);
}

// ---- run 3: two companions on one PostgreSQL; the page on node B follows node A ----

/** A throwaway PostgreSQL server (scripts/throwaway-postgres) for this run; its URL. */
async function throwawayPostgres(): Promise<string> {
  // Its stdin stays open: the script serves until it closes.
  const child = spawnTracked(join(root, "scripts", "throwaway-postgres"), [], { stdio: ["pipe", "pipe", "inherit"] });
  cleanups.push(() => stop(child));
  const port = await firstLine(child, /^ready (\d+) /, "throwaway-postgres");
  return `postgres://postgres@127.0.0.1:${port}/postgres`;
}

/** The events of a session through one node's API, whole. */
async function logOf(server: Server, session: string): Promise<any[]> {
  return (await server.api("GET", `/api/sessions/${session}/events?after=0&limit=10000`)).events;
}

function assertContiguous(events: { sequence: number }[], what: string) {
  assert.deepEqual(events.map((e) => e.sequence), events.map((_, i) => i + 1), `${what}: sequences 1..n`);
}

async function multiNodeRun() {
  const shot = recorder("multinode");
  const dir = mkdtempSync(join(tmpdir(), "agentwire-e2e-nodes-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }));
  const store = await throwawayPostgres();
  const node = (name: string) => ["--node", name, "--demo-delay-ms", "30"];
  const a = await serve(dir, node("a"), undefined, { store });
  let b = await serve(dir, node("b"), undefined, { store });

  // A session hosted on node A, shown by the page that node B serves.
  const session: string = (await a.api("POST", "/api/sessions", { provider: "demo" })).id;
  const context = await browser(dir);
  const page = await open(context, `${b.url}#${session}`);
  await until(page, "B's page shows A's session", (s) => window.agentwirePage.state.current === s, session);
  // Watched, not driven, from B: A runs it, and the page says so.
  await until(page, "the page names node A", () =>
    document.getElementById("session-title")!.textContent!.endsWith("on node a") &&
    (document.getElementById("send") as HTMLButtonElement).disabled);
  await a.api("POST", `/api/sessions/${session}/turns`, { prompt: "hello from node A" });
  await lastItem(page, "assistant_message", "!item.streaming && item.text.includes('hello from node A')");
  await lifecycle(page, "idle");
  await shot(page, "followed-from-node-b");

  // A slow turn on A. Mid-turn, node B is killed (-9); the page loses its server, and B comes
  // back on the same address while A goes on appending.
  await a.api("POST", `/api/sessions/${session}/turns`, { prompt: "a slow answer, please" });
  await lastItem(page, "assistant_message", "item.streaming && item.text.length > 300");
  const dropsBefore: number = await page.evaluate(() => window.agentwirePage.state.client.drops);
  const exited = new Promise((r) => b.child.once("exit", r));
  b.child.kill("SIGKILL");
  await exited;
  await until(page, "the page lost node B", () =>
    document.querySelector("#connection")!.getAttribute("data-state") === "reconnecting");
  await shot(page, "node-b-down");
  b = await serve(dir, node("b"), undefined, { store, addr: b.addr });
  // Node B hosts a session of its own meanwhile: both nodes append to the store at once.
  const other: string = (await b.api("POST", "/api/sessions", { provider: "demo" })).id;
  const { turnId: otherTurn } = await b.api("POST", `/api/sessions/${other}/turns`, { prompt: "please use a tool" });
  await connected(page);
  const slow = await lastItem(page, "assistant_message", "!item.streaming && item.text.includes('200/200')");
  await lifecycle(page, "idle");
  await shot(page, "resumed-after-node-b-restart");

  // Nothing lost or repeated: every chunk once, in order; no reset; the stored log's items.
  assert.equal(((await items(page))[slow] as { text: string }).text, SLOW, "the whole slow answer, once");
  const { drops, resets } = await page.evaluate(() => ({
    drops: window.agentwirePage.state.client.drops,
    resets: window.agentwirePage.state.resets,
  }));
  assert.ok(drops > dropsBefore, `the page reconnected (${dropsBefore} -> ${drops} drops)`);
  assert.equal(resets, 0, "one log across both nodes and B's restart: resumed, never reset");
  await assertSameTimeline(context, page, b, session, "after node B's restart");

  // One log, whichever node serves it; both sessions contiguous; the appends interleaved.
  const viaA = await logOf(a, session);
  assert.deepEqual(await logOf(b, session), viaA, "both nodes serve the same log");
  assertContiguous(viaA, "A's session");
  let theirs = await logOf(b, other);
  for (let i = 0; i < 200 && !theirs.some((e) => e.run_id === otherTurn && /^run_/.test(e.type) && e.type !== "run_started"); i++) {
    await new Promise((r) => setTimeout(r, 50));
    theirs = await logOf(b, other);
  }
  assert.ok(theirs.some((e) => e.run_id === otherTurn && e.type === "run_completed"), "B's own turn completed");
  assertContiguous(theirs, "B's session");
  assert.deepEqual(await logOf(a, other), theirs);
  const slowEnd = Date.parse(viaA.at(-1).timestamp);
  const theirStart = Date.parse(theirs.find((e) => e.type === "run_started").timestamp);
  assert.ok(theirStart < slowEnd, "B appended while A's turn was still being appended");
  const described = await b.api("GET", `/api/sessions/${session}`);
  assert.deepEqual([described.session.node, described.session.state], ["a", "running"], "B's restart left A's session to A");
  // The browser reports each refused connection while node B was down; nothing else.
  const down = /net::ERR_CONNECTION_REFUSED/;
  assert.deepEqual(page.problems.filter((p) => !down.test(p)), [], "the page had problems");
  await context.close();
  await b.stop();
  await a.stop();
}

/** A prompt typed while the companion is down: it leaves the box, the page says it waits,
 * and once the companion is back (killed with -9, restarted on the same address and log) the
 * Client sends it and the session, whose agent died with the companion, wakes for it: one
 * turn, with the prompt once in the log. */
async function offlineRun() {
  const shot = recorder("offline");
  const dir = mkdtempSync(join(tmpdir(), "agentwire-e2e-offline-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }));
  let server = await serve(dir, ["--demo-delay-ms", "5"]);
  const context = await browser(dir);
  const page = await open(context, server.url);
  const session = await createSession(page, "demo");
  await send(page, "hello before the outage");
  await lastItem(page, "assistant_message", "!item.streaming && item.text.includes('hello before the outage')");
  await lifecycle(page, "idle");
  const exited = new Promise((r) => server.child.once("exit", r));
  server.child.kill("SIGKILL");
  await exited;
  await until(page, "the page lost the server", () =>
    document.querySelector("#connection")!.getAttribute("data-state") === "reconnecting");
  const prompt = "typed while the server was down";
  await page.fill("#prompt", prompt);
  await page.click("#send");
  await until(page, "the prompt waits for the connection", () =>
    (document.querySelector("#prompt") as HTMLTextAreaElement).value === "" &&
    document.querySelector("#pending")!.textContent === "1 waiting to be sent");
  await shot(page, "prompt-waiting");
  server = await serve(dir, ["--demo-delay-ms", "5"], undefined, { addr: server.addr });
  await connected(page);
  await lastItem(page, "assistant_message", `!item.streaming && item.text.includes(${JSON.stringify(prompt)})`);
  await lifecycle(page, "idle");
  await until(page, "nothing waits any more", () => document.querySelector("#pending")!.textContent === "");
  await shot(page, "prompt-sent-after-restart");
  const log = await logOf(server, session);
  const sent = log.filter((e) => e.type === "message_sent" && e.data.content === prompt);
  assert.equal(sent.length, 1, "the prompt reached the log once");
  const runs = log.filter((e) => e.type === "run_started" && e.run_id === sent[0].run_id);
  assert.equal(runs.length, 1, "one turn for it");
  assert.ok(log.some((e) => e.type === "run_completed" && e.run_id === sent[0].run_id), "and it completed");
  assert.ok(log.some((e) => e.type === "session_resumed"), "the session woke for it");
  assertContiguous(log, "the session");
  await assertSameTimeline(context, page, server, session, "after the offline prompt");
  const down = /net::ERR_CONNECTION_REFUSED/;
  assert.deepEqual(page.problems.filter((p) => !down.test(p)), [], "the page had problems");
  await context.close();
  await server.stop();
}

/** A transcript whose agent writes Markdown, hostile HTML, an edit, a write and a long
 * output: the page renders the Markdown as elements, none of the agent's markup as live HTML,
 * the edit and the write as diffs, and the long output folded. */
function hostileTranscript(): string {
  const S = "render-session";
  const lines: string[] = [];
  const push = (o: unknown) => lines.push(JSON.stringify(o));
  const assistant = (id: string, content: unknown[]) => push({
    type: "assistant", session_id: S, parent_tool_use_id: null,
    message: { id, type: "message", role: "assistant", model: "demo-1", content, usage: { input_tokens: 1, output_tokens: 1 } },
  });
  const result = (tool: string, content: string) => push({
    type: "user", session_id: S, parent_tool_use_id: null,
    message: { role: "user", content: [{ type: "tool_result", tool_use_id: tool, content, is_error: false }] },
  });
  push({ type: "system", subtype: "init", session_id: S, cwd: "/w", model: "demo-1", tools: ["Edit", "Write", "Bash"], permissionMode: "default" });
  push({ type: "user", session_id: S, parent_tool_use_id: null, message: { role: "user", content: [{ type: "text", text: "render <b>this</b>" }] } });
  assistant("msg_1", [{ type: "text", text: MARKDOWN }]);
  assistant("msg_2", [{ type: "tool_use", id: "toolu_edit", name: "Edit", input: { file_path: "/w/src/lib.rs", old_string: "fn a() {}\nold line\nfn b() {}", new_string: "fn a() {}\nnew line\nfn b() {}" } }]);
  result("toolu_edit", "The file /w/src/lib.rs has been updated.");
  assistant("msg_3", [{ type: "tool_use", id: "toolu_write", name: "Write", input: { file_path: "/w/notes.md", content: "one\ntwo\nthree" } }]);
  result("toolu_write", "File created successfully");
  assistant("msg_4", [{ type: "tool_use", id: "toolu_bash", name: "Bash", input: { command: "seq 200" } }]);
  result("toolu_bash", Array.from({ length: 200 }, (_, i) => `${i + 1}`).join("\n"));
  push({ type: "result", subtype: "success", is_error: false, session_id: S, result: "done", num_turns: 1, duration_ms: 1, total_cost_usd: 0, usage: { input_tokens: 1, output_tokens: 1 } });
  return lines.join("\n") + "\n";
}

const MARKDOWN = [
  "## The plan",
  "",
  "Some **bold**, some *italic* and `inline code`; see [the docs](https://example.com/) and [this](javascript:window.pwned=1).",
  "",
  "- first <img src=x onerror=\"window.pwned=1\">",
  "- second",
  "  - nested",
  "",
  "```rust",
  "fn main() { println!(\"<script>window.pwned=1</script>\"); }",
  "```",
  "",
  "| file | lines |",
  "|---|---:|",
  "| a.rs | 10 |",
  "",
  "<script>window.pwned = 1</script><iframe src=\"https://example.com\"></iframe>",
].join("\n");

async function renderRun() {
  const shot = recorder("render");
  const dir = mkdtempSync(join(tmpdir(), "agentwire-e2e-render-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }));
  const server = await serve(dir, []);
  const context = await browser(dir);
  const page = await open(context, server.url);
  await connected(page);
  const file = join(dir, "render.jsonl");
  writeFileSync(file, hostileTranscript());
  await page.setInputFiles("#transcript", file);
  await until(page, "the transcript's items are shown", () =>
    window.agentwirePage.view.items.length === 5 && document.querySelectorAll("#timeline .item-tool_call").length === 3);
  // Edits and writes show their diffs at once; another tool opens on a click.
  await page.click("#timeline .item-tool_call[data-index='4'] button.toggle");
  await until(page, "the long output is folded", () =>
    document.querySelector("#timeline .item-tool_call .collapsed-output") !== null);
  await shot(page, "markdown-and-diffs");
  const seen = await page.evaluate(() => {
    const timeline = document.querySelector("#timeline")!;
    const md = timeline.querySelector(".item-assistant_message .md")!;
    const rows = Array.from(timeline.querySelectorAll(".item-tool_call"));
    const texts = (row: Element, sel: string) => Array.from(row.querySelectorAll(sel)).map((e) => e.textContent);
    return {
      heading: md.querySelector("h2")?.textContent,
      bold: md.querySelector("strong")?.textContent,
      italic: md.querySelector("em")?.textContent,
      code: md.querySelector("p code")?.textContent,
      links: Array.from(md.querySelectorAll("a")).map((a) => [a.getAttribute("href"), a.getAttribute("rel"), a.textContent]),
      items: texts(md, ":scope > ul > li"),
      nested: texts(md, "ul ul > li"),
      block: [md.querySelector("pre.code code")?.className, md.querySelector("pre.code code")?.textContent],
      table: [texts(md, "th"), texts(md, "td"), (md.querySelector("td:last-child") as HTMLElement | null)?.style.textAlign],
      live: timeline.querySelectorAll("script, img, iframe, b, object, embed").length,
      pwned: (window as any).pwned,
      shownAsText: md.textContent!.includes("<script>window.pwned = 1</script>") && md.textContent!.includes("<img src=x"),
      user: timeline.querySelector(".item-user_message .text")?.textContent,
      edit: [texts(rows[0]!, ".tool-name, .muted"), texts(rows[0]!, ".diff-del"), texts(rows[0]!, ".diff-add"), texts(rows[0]!, ".diff-ctx")],
      write: texts(rows[1]!, ".diff-add"),
      folded: [rows[2]!.querySelector(".collapsed-output pre")?.textContent!.split("\n").length, rows[2]!.querySelector("button.more")?.textContent],
    };
  });
  assert.deepEqual(seen, {
    heading: "The plan",
    bold: "bold",
    italic: "italic",
    code: "inline code",
    // The javascript: link is text; a bare https URL (the iframe's, as text) is a link.
    links: [
      ["https://example.com/", "noopener noreferrer nofollow", "the docs"],
      ["https://example.com", "noopener noreferrer nofollow", "https://example.com"],
    ],
    items: ["first <img src=x onerror=\"window.pwned=1\">", "secondnested"],
    nested: ["nested"],
    block: ["language-rust", "fn main() { println!(\"<script>window.pwned=1</script>\"); }"],
    table: [["file", "lines"], ["a.rs", "10"], "right"],
    live: 0,
    pwned: undefined,
    shownAsText: true,
    user: "render <b>this</b>",
    edit: [["Edit", " /w/src/lib.rs"], ["- old line"], ["+ new line"], ["  fn a() {}", "  fn b() {}"]],
    write: ["+ one", "+ two", "+ three"],
    folded: [30, "show all 200 lines"],
  });
  await page.click("#timeline .item-tool_call button.more");
  await until(page, "the whole output is shown", () =>
    Array.from(document.querySelectorAll("#timeline .item-tool_call .tool-output"))
      .some((p) => p.textContent!.split("\n").length === 200));
  assert.deepEqual(page.problems, [], "the page had problems");
  await context.close();
  await server.stop();
}

/** With UPDATE_SCREENSHOTS=1, the README's screenshots are refreshed from this run's. */
function updateScreenshots() {
  if (!process.env.UPDATE_SCREENSHOTS) return;
  const docs = join(root, "docs", "screenshots");
  mkdirSync(docs, { recursive: true });
  for (const [run, step, to] of [
    ["demo", "tool-call-open", "live-session.png"],
    ["claude", "approval-pending", "approval.png"],
    ["demo", "transcript", "transcript.png"],
  ] as const) {
    const from = readdirSync(join(ARTIFACTS, run)).find((f) => f.endsWith(`-${step}.png`))!;
    copyFileSync(join(ARTIFACTS, run, from), join(docs, to));
  }
}

// E2E_RUNS=offline,store runs only those (while working on one); scripts/test runs all.
const runs = { demo: demoRun, claude: claudeRun, "multi-node": multiNodeRun, store: storeRun, offline: offlineRun,
  render: renderRun };
const only = process.env.E2E_RUNS?.split(",");
try {
  for (const [name, run] of Object.entries(runs)) {
    if (!only || only.includes(name)) await run();
  }
  if (!only) updateScreenshots();
} catch (e) {
  const problems = allProblems.flat();
  if (problems.length > 0) console.error(`the pages reported:\n  ${problems.join("\n  ")}`);
  throw e;
} finally {
  await cleanup();
}
console.log(`e2e: ${only ?? Object.keys(runs).join(", ")} runs passed in ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in target/e2e/`);
for (const t of timings) console.log(`  ${t}`);
