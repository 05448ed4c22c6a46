// The AG-UI endpoint (`POST /ag-ui/{provider}`, src/companion/agui.rs) driven by the official
// `@ag-ui/client` HttpAgent (pinned in tests/js/package.json) against a real `agentwire serve`
// on port 0 with a fresh SQLite store:
//
// 1. Node, the demo agent: text, a tool call with its result, an approval as an interrupt and
//    its resume (allowed, denied, cancelled), a failure as RUN_ERROR, an abort that interrupts
//    the turn, a second client reattaching to a running turn, a new message while a turn runs
//    (409), the conversation as MESSAGES_SNAPSHOT for a fresh client, JSON errors before the
//    stream, and the same thread after a server restart.
// 2. Chromium: the same HttpAgent bundled by esbuild into a page served by the server.
// 3. The real Claude Code CLI against `agentwire-testkit fake-model`: text, and a Bash call
//    behind an approval, allowed through resume.
//
// Every run is checked the same way: RUN_STARTED first, exactly one terminal and it is last,
// each message and tool call opened once before its content and closed, ids consistent, and
// the streamed text equal to what the log stored. Every wait is a condition with a deadline.

import { strict as assert } from "node:assert";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { build } from "esbuild";

import { agent, run, type Run } from "./agui-run.js";
import { launchChromium, root, testkitBin } from "./fixtures.js";
import { apiClient, claudeOffline, firstLine, SERVING, start, stop } from "./processes.js";

const TOKEN = "agui-test-token-0123456789";
const DEADLINE_MS = 20_000;
const CLI_DIR = join(root, ".agentwire", "clis", "node_modules", ".bin");

const cleanups: (() => unknown)[] = [];

interface Server {
  base: string;
  api: (method: string, path: string, body?: unknown) => Promise<any>;
  stop: () => Promise<void>;
}

async function serve(dir: string, extra: string[] = [], env?: NodeJS.ProcessEnv): Promise<Server> {
  const child = start([
    "serve", "--addr", "127.0.0.1:0", "--db", join(dir, "store.db"), ...extra,
  ], { ...(env ?? process.env), AGENTWIRE_TOKEN: TOKEN });
  const addr = await firstLine(child, SERVING, "agentwire serve");
  const base = `http://${addr}`;
  const api = apiClient(base, TOKEN);
  const server = { base, api, stop: () => stop(child) };
  cleanups.push(server.stop);
  return server;
}

/** The stored log of a session. */
async function logOf(server: Server, session: string): Promise<any[]> {
  return (await server.api("GET", `/api/sessions/${session}/events?after=0&limit=10000`)).events;
}

/** Waits until the session's log has an event matching `pred`; returns it. */
async function logHas(server: Server, session: string, what: string, pred: (e: any) => boolean): Promise<any> {
  const deadline = Date.now() + DEADLINE_MS;
  let after = 0;
  while (Date.now() < deadline) {
    const page = await server.api("GET", `/api/sessions/${session}/events?after=${after}&wait_ms=1000`);
    const hit = page.events.find(pred);
    if (hit) return hit;
    after = page.next_after;
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** What a checked run streamed. */
interface Checked {
  session: string;
  terminal: any;
  /** Each text message's joined deltas, in the order they started. */
  texts: { id: string; text: string }[];
  toolStarts: string[];
  results: any[];
}

/** The invariants of every run; `outcome` is the terminal's: `success`, `interrupt`,
 * `cancelled` (RUN_FINISHED) or `error` (RUN_ERROR). */
function check(r: Run, outcome: string, what: string): Checked {
  const types = r.events.map((e) => e.type);
  const started = r.events[0];
  assert.equal(started?.type, "RUN_STARTED", `${what}: RUN_STARTED first (${types.join(" ")})`);
  const terminals = r.events.filter((e) => e.type === "RUN_FINISHED" || e.type === "RUN_ERROR");
  assert.equal(terminals.length, 1, `${what}: one terminal (${types.join(" ")})`);
  const terminal = terminals[0];
  assert.equal(r.events.at(-1), terminal, `${what}: the terminal is last`);
  if (terminal.type === "RUN_FINISHED") {
    assert.equal(terminal.outcome?.type ?? "success", outcome, `${what}: ${JSON.stringify(terminal)}`);
    assert.equal(terminal.threadId, started.threadId, `${what}: one thread`);
    assert.equal(terminal.runId, started.runId, `${what}: one run`);
  } else {
    assert.equal("error", outcome, `${what}: ${JSON.stringify(terminal)}`);
  }
  const session = started.metadata?.agentwire?.sessionId;
  assert.match(session, /^ses_[0-9a-f]{32}$/, `${what}: the session id`);
  const open = new Set<string>();
  const texts: { id: string; text: string }[] = [];
  const calls = new Set<string>();
  const toolStarts: string[] = [];
  const results: any[] = [];
  for (const e of r.events) {
    switch (e.type) {
      case "TEXT_MESSAGE_START":
        assert.ok(!texts.some((t) => t.id === e.messageId), `${what}: message ${e.messageId} starts once`);
        texts.push({ id: e.messageId, text: "" });
        open.add(e.messageId);
        break;
      case "TEXT_MESSAGE_CONTENT":
        assert.ok(open.has(e.messageId), `${what}: content of an open message`);
        texts.find((t) => t.id === e.messageId)!.text += e.delta;
        break;
      case "TEXT_MESSAGE_END":
        assert.ok(open.delete(e.messageId), `${what}: the end of an open message`);
        break;
      case "TOOL_CALL_START":
        assert.ok(!calls.has(e.toolCallId), `${what}: call ${e.toolCallId} starts once`);
        calls.add(e.toolCallId);
        toolStarts.push(e.toolCallId);
        break;
      case "TOOL_CALL_ARGS":
      case "TOOL_CALL_END":
        assert.ok(calls.has(e.toolCallId), `${what}: ${e.type} of a started call`);
        break;
      case "TOOL_CALL_RESULT":
        results.push(e);
        break;
    }
  }
  assert.equal(open.size, 0, `${what}: every message closed`);
  return { session, terminal, texts, toolStarts, results };
}

/** The run's texts are the log's: each text message's joined deltas equal the content of the
 * `message_received` of its turn, in order. */
async function sameTextAsStored(server: Server, c: Checked, what: string) {
  const log = await logOf(server, c.session);
  const turns = new Set(c.texts.map((t) => t.id.split("-")[0]));
  const stored = log
    .filter((e) => e.type === "message_received" && turns.has(e.run_id) && !e.data.discarded && e.data.content)
    .map((e) => e.data.content);
  assert.deepEqual(c.texts.map((t) => t.text), stored, `${what}: the streamed text is the stored text`);
  return log;
}

async function post(server: Server, path: string, body: unknown, token = TOKEN): Promise<{ status: number; body: any }> {
  const r = await fetch(`${server.base}${path}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: r.headers.get("content-type")?.startsWith("application/json") ? JSON.parse(text) : text };
}

// ---- 1. Node, the demo agent ----

async function demoRun(dir: string) {
  const server = await serve(dir, ["--demo-delay-ms", "20"]);
  const url = `${server.base}/ag-ui/demo`;
  const a = agent(url, TOKEN, "thread-demo");

  const hello = check(await run(a, "hello"), "success", "text");
  const helloLog = await sameTextAsStored(server, hello, "text");
  assert.ok(hello.texts.length >= 1 && hello.texts[0]!.text.length > 0, "an answer");
  assert.equal(helloLog.filter((e) => e.type === "run_started").length, 1, "one turn");

  const toolRun = await run(a, "run a tool");
  const tool = check(toolRun, "success", "tool");
  assert.equal(tool.session, hello.session, "the same thread, the same session");
  assert.equal(tool.results.length, 1, "one tool result");
  assert.equal(tool.results[0].toolCallId, tool.toolStarts[0], "the result of the call");
  assert.match(tool.results[0].content, /Cargo\.toml/);
  await sameTextAsStored(server, tool, "tool");
  const snapshot = toolRun.events.find((e) => e.type === "MESSAGES_SNAPSHOT");
  assert.equal(toolRun.events[1], snapshot, "the snapshot right after RUN_STARTED");
  assert.deepEqual(snapshot.messages.filter((m: any) => m.role === "user").map((m: any) => m.content),
    ["hello", "run a tool"], "the snapshot holds the conversation");
  assert.equal((await server.api("GET", "/api/sessions")).sessions.length, 1, "one session");

  // An approval is an interrupt; the resume answers it and streams the rest of the turn.
  for (const [status, approved] of [["resolved", true], ["resolved", false], ["cancelled", true]] as const) {
    const what = `approval ${status} ${approved}`;
    const asked = check(await run(a, "please approve"), "interrupt", what);
    const interrupts = asked.terminal.outcome.interrupts;
    assert.equal(interrupts.length, 1, what);
    const [interrupt] = interrupts;
    assert.equal(interrupt.reason, "tool_call", what);
    assert.equal(interrupt.toolCallId, asked.toolStarts.at(-1), `${what}: the interrupt names the call`);
    assert.match(interrupt.message, /Bash/, what);
    assert.deepEqual(a.pendingInterrupts.map((i) => i.id), [interrupt.id], `${what}: the agent holds it`);
    const described = await server.api("GET", `/api/sessions/${asked.session}`);
    assert.deepEqual(described.pending_approvals.map((p: any) => p.request_id), [interrupt.id], what);

    const resumed = await run(a, null, { resume: [{ interruptId: interrupt.id, status, payload: { approved } }] });
    const rest = check(resumed, "success", `${what}: resumed`);
    assert.equal(rest.session, asked.session, what);
    assert.deepEqual(rest.toolStarts, [], `${what}: the call is not started again`);
    assert.deepEqual(rest.results.map((r) => r.toolCallId), [interrupt.toolCallId], `${what}: its result`);
    if (approved && status === "resolved") {
      assert.match(rest.results[0].content, /Cargo\.toml/, what);
    } else {
      assert.match(rest.results[0].content, /doesn't want to proceed/, what);
      assert.match(rest.texts.map((t) => t.text).join(""), /denied/, what);
    }
    assert.deepEqual(a.pendingInterrupts, [], `${what}: nothing pending`);
    const log = await sameTextAsStored(server, { ...rest, texts: [...asked.texts, ...rest.texts] }, what);
    const turn = log.filter((e) => e.type === "run_started").at(-1).run_id;
    const answer = log.find((e) => e.run_id === turn && e.type.startsWith("tool_approval_") && e.type !== "tool_approval_requested");
    assert.equal(answer.type, approved && status === "resolved" ? "tool_approval_granted" : "tool_approval_denied", what);
  }
  // An answer to no interrupt of the thread: a JSON error, before any stream.
  const stray = await post(server, "/ag-ui/demo", { threadId: "thread-demo", runId: "r", messages: [], resume: [{ interruptId: "req_nope", status: "resolved" }] });
  assert.equal(stray.status, 404);
  assert.equal(stray.body.error.code, "unknown_request");

  // A failed turn is RUN_ERROR with the provider error's kind.
  const failedRun = await run(a, "please fail");
  const failed = check(failedRun, "error", "failure");
  assert.equal(failed.terminal.code, "authentication_failed", JSON.stringify(failed.terminal));
  assert.ok(failed.terminal.message.length > 0);

  // A client that aborts interrupts the turn; another client following it sees it cancelled.
  const aborted = agent(url, TOKEN, "thread-abort");
  let abortSession = "";
  let watcher: Promise<Run> | undefined;
  const abortRun = await run(aborted, "slow answer please", {}, (e) => {
    if (e.type === "RUN_STARTED") abortSession = e.metadata.agentwire.sessionId;
    if (e.type === "TEXT_MESSAGE_CONTENT" && !watcher) {
      watcher = run(agent(url, TOKEN, "thread-abort"), null, {}, (w) => {
        if (w.type === "TEXT_MESSAGE_CONTENT") aborted.abortRun();
      });
    }
  });
  assert.ok(abortRun.events.some((e) => e.type === "TEXT_MESSAGE_CONTENT"), "it streamed before the abort");
  await logHas(server, abortSession, "the aborted turn's end", (e) => e.type === "run_cancelled");
  const watched = check(await watcher!, "cancelled", "the follower of an aborted turn");
  assert.equal(watched.session, abortSession);

  // A second client on a running thread, with no new message, reattaches from the turn's start;
  // a new message meanwhile is refused.
  const first = agent(url, TOKEN, "thread-reattach");
  let second: Promise<Run> | undefined;
  let busy: { status: number; body: any } | undefined;
  const firstRun = run(first, "slow answer please", {}, (e) => {
    if (e.type === "TEXT_MESSAGE_CONTENT" && !second) {
      second = run(agent(url, TOKEN, "thread-reattach"), null);
      busy = undefined;
      void post(server, "/ag-ui/demo", {
        threadId: "thread-reattach", runId: "r-busy", messages: [{ id: "m-busy", role: "user", content: "hello" }],
      }).then((r) => (busy = r));
    }
  });
  const one = check(await firstRun, "success", "reattach: the first client");
  assert.ok(second, "the second client ran");
  const two = check(await second!, "success", "reattach: the second client");
  assert.deepEqual(two.texts, one.texts, "both clients got the whole turn, with the same ids");
  await sameTextAsStored(server, two, "reattach");
  const deadline = Date.now() + DEADLINE_MS;
  while (!busy && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.equal(busy?.status, 409, JSON.stringify(busy));
  assert.equal(busy?.body.error.code, "foreground_turn_active");

  // A fresh client on a thread gets its conversation as MESSAGES_SNAPSHOT, and nothing runs.
  const fresh = agent(url, TOKEN, "thread-demo");
  const connect = await run(fresh, null);
  const idle = check(connect, "success", "snapshot");
  assert.deepEqual(connect.events.map((e) => e.type), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]);
  assert.equal(idle.session, hello.session);
  const users = fresh.messages.filter((m) => m.role === "user").map((m) => m.content);
  assert.deepEqual(users.slice(0, 2), ["hello", "run a tool"], "the prompts");
  const texts = fresh.messages.filter((m) => m.role === "assistant" && m.content).map((m) => m.content);
  assert.equal(texts[0], hello.texts[0]!.text, "the first answer");
  assert.ok(fresh.messages.some((m) => m.role === "tool" && /Cargo\.toml/.test(String(m.content))), "a tool result");

  // JSON errors before the stream.
  const unknown = await post(server, "/ag-ui/nope", { threadId: "t-nope", runId: "r", messages: [] });
  assert.equal(unknown.status, 400);
  assert.equal(unknown.body.error.code, "unknown_provider");
  const wrong = await post(server, "/ag-ui/claude", { threadId: "thread-demo", runId: "r", messages: [] });
  assert.equal(wrong.status, 400, JSON.stringify(wrong.body));
  const noToken = await post(server, "/ag-ui/demo", { threadId: "thread-demo", runId: "r", messages: [] }, "wrong-token-0123456789");
  assert.equal(noToken.status, 401);
  const foreign = await fetch(`${server.base}/ag-ui/demo`, {
    method: "POST",
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json", Origin: "http://evil.example" },
    body: JSON.stringify({ threadId: "thread-demo", runId: "r", messages: [] }),
  });
  assert.equal(foreign.status, 403, "a foreign origin");
  assert.equal((await foreign.json()).error.code, "forbidden_origin");
  const badBody = await post(server, "/ag-ui/demo", { runId: "r" });
  assert.equal(badBody.status, 422);
  assert.equal(badBody.body.error.code, "bad_body");
  // HttpAgent logs the failed request with console.error before it rejects: kept quiet here.
  const log0 = console.error;
  console.error = () => {};
  // The whole history comes with every run: a body past the API's 1 MiB is still taken.
  const long = await post(server, "/ag-ui/demo", {
    threadId: "thread-long", runId: "r", messages: [{ id: "m-long", role: "assistant", content: "x".repeat(3 << 20) }],
  });
  assert.equal(long.status, 200, JSON.stringify(long.body).slice(0, 200));
  assert.match(long.body, /"type":"RUN_FINISHED"/);
  const tooLong = await post(server, "/ag-ui/demo", {
    threadId: "thread-long", runId: "r", messages: [{ id: "m-long", role: "assistant", content: "x".repeat(9 << 20) }],
  });
  assert.equal(tooLong.status, 413);
  assert.equal(tooLong.body.error.code, "body_too_large");
  const rejected = await run(agent(`${server.base}/ag-ui/nope`, TOKEN, "t-nope"), "hello").finally(() => (console.error = log0));
  assert.match(rejected.error ?? "", /HTTP 400/, "HttpAgent reports the JSON error");

  // The thread outlives the server: after a restart the same session goes on.
  await server.stop();
  const again = await serve(dir, ["--demo-delay-ms", "20"]);
  const after = agent(`${again.base}/ag-ui/demo`, TOKEN, "thread-demo");
  const restartedRun = await run(after, "hello again");
  const restarted = check(restartedRun, "success", "after a restart");
  assert.equal(restarted.session, hello.session, "the same session after a restart");
  await sameTextAsStored(again, restarted, "after a restart");
  const log = await logOf(again, restarted.session);
  assert.ok(log.some((e) => e.type === "session_resumed"), "the session was resumed");
  const snap = restartedRun.events[1];
  assert.deepEqual(snap.messages.filter((m: any) => m.role === "user").map((m: any) => m.content).slice(0, 2),
    ["hello", "run a tool"], "the earlier conversation");
  await again.stop();
}

// ---- 2. Chromium ----

async function browserRun(dir: string) {
  const www = join(dir, "www");
  mkdirSync(www);
  copyFileSync(join(root, "tests", "js", "www-agui", "index.html"), join(www, "index.html"));
  await build({
    entryPoints: [join(root, "tests", "js", "build", "agui-page.js")],
    bundle: true, format: "esm", platform: "browser", target: "es2022",
    outfile: join(www, "agui-page.js"), logLevel: "warning",
  });
  const server = await serve(dir, ["--www", www]);
  const context = await launchChromium(join(dir, "profile"));
  cleanups.push(() => context.close());
  const page = await context.newPage();
  const problems: string[] = [];
  page.on("pageerror", (e) => problems.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") problems.push(m.text());
  });
  await page.goto(`${server.base}/?token=${TOKEN}`);
  await page.waitForFunction(() => document.title === "ready", undefined, { timeout: DEADLINE_MS });
  const runs = await page.evaluate(() => window.agui.script("thread-browser", [
    { prompt: "hello" }, { prompt: "please approve" }, { approved: true }, { prompt: "please approve" }, { approved: false },
  ]));
  const [hello, ask1, allowed, ask2, denied] = runs.map((r, i) => check(r, ["success", "interrupt", "success", "interrupt", "success"][i]!, `browser run ${i}`));
  await sameTextAsStored(server, hello!, "browser: text");
  assert.equal(ask1!.session, hello!.session, "browser: one session");
  assert.match(allowed!.results[0].content, /Cargo\.toml/, "browser: allowed");
  assert.equal(allowed!.results[0].toolCallId, ask1!.terminal.outcome.interrupts[0].toolCallId);
  assert.match(denied!.results[0].content, /doesn't want to proceed/, "browser: denied");
  assert.equal(denied!.results[0].toolCallId, ask2!.terminal.outcome.interrupts[0].toolCallId);
  assert.deepEqual(problems, [], "the page had no errors");
  await context.close();
  await server.stop();
}

// ---- 3. The real Claude Code CLI against the fake model ----

async function claudeRun(dir: string) {
  if (!existsSync(join(CLI_DIR, "claude"))) throw new Error(`the pinned claude CLI is missing from ${CLI_DIR}: run scripts/install-clis`);
  const home = join(dir, "home");
  const cwd = join(dir, "work");
  mkdirSync(home);
  mkdirSync(cwd);
  const fake = start(["fake-model", "--addr", "127.0.0.1:0"], undefined, testkitBin);
  cleanups.push(() => stop(fake));
  const fakeAddr = await firstLine(fake, /^fake-model: listening http:\/\/(\S+)$/, "the fake model");
  const env = claudeOffline(home, fakeAddr);
  const server = await serve(dir, ["--cli-dir", CLI_DIR], env);
  const a = agent(`${server.base}/ag-ui/claude`, TOKEN, "thread-claude");
  const hello = check(await run(a, "hello", { forwardedProps: { cwd } }), "success", "claude: text");
  assert.deepEqual(hello.texts.map((t) => t.text), ["Hello from the fake model."]);
  const log = await sameTextAsStored(server, hello, "claude: text");
  assert.equal(log.find((e) => e.type === "session_created").data.cwd, cwd, "the session runs in forwardedProps.cwd");

  const asked = check(await run(a, "tool\n$ touch approved.txt && echo hello-from-tool"), "interrupt", "claude: approval");
  assert.equal(asked.session, hello.session, "claude: one session");
  const [interrupt] = asked.terminal.outcome.interrupts;
  assert.equal(interrupt.toolCallId, asked.toolStarts.at(-1));
  assert.ok(!existsSync(join(cwd, "approved.txt")), "nothing ran before the approval");
  const rest = check(await run(a, null, { resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }] }), "success", "claude: resumed");
  assert.ok(rest.results.some((r) => r.toolCallId === interrupt.toolCallId && /hello-from-tool/.test(r.content)), JSON.stringify(rest.results));
  assert.ok(existsSync(join(cwd, "approved.txt")), "the approved command ran in the session's directory");
  await sameTextAsStored(server, { ...rest, texts: [...asked.texts, ...rest.texts] }, "claude: resumed");
  assert.equal((await server.api("GET", "/api/sessions")).sessions.length, 1, "claude: one session");
  await server.stop();
}

const tmp = mkdtempSync(join(tmpdir(), "agentwire-agui-"));
cleanups.push(() => rmSync(tmp, { recursive: true, force: true, maxRetries: 5 }));
const started = Date.now();
let failed = false;
try {
  for (const [name, f] of [["demo", demoRun], ["chromium", browserRun], ["claude", claudeRun]] as const) {
    const dir = join(tmp, name);
    mkdirSync(dir);
    const t = Date.now();
    await f(dir);
    console.log(`agui: ${name} ok (${Date.now() - t} ms)`);
  }
  console.log(`agui: all ok in ${Date.now() - started} ms`);
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  for (const f of cleanups.splice(0).reverse()) {
    try {
      await f();
    } catch (e) {
      console.error(`cleanup: ${(e as Error).message}`);
    }
  }
}
process.exit(failed ? 1 : 0);
