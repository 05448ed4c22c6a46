// Browser test: a real `agentwire serve` (port 0, a fresh store, the demo agent, `--www` at a
// directory holding tests/js/www, the compiled page and the built web package, so the page is
// same-origin) and Debian's headless Chromium driven by playwright-core. The page (page.ts)
// runs a slow demo turn and has the server drop every WebSocket four times mid-turn; it must
// end with exactly the timeline of an uninterrupted run.

import { strict as assert } from "node:assert";
import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { bin, launchChromium, root } from "./fixtures.js";

const TOKEN = "browser-test-token-0123";

const tmp = mkdtempSync(join(tmpdir(), "agentwire-browser-"));
const www = join(tmp, "www");
cpSync(join(root, "tests", "js", "www"), www, { recursive: true });
for (const f of ["page.js", "shapes.js"]) cpSync(join(root, "tests", "js", "build", f), join(www, f));
cpSync(join(root, "pkg-web"), join(www, "pkg"), { recursive: true });

const server = spawn(bin, [
  "serve", "--addr", "127.0.0.1:0", "--token", TOKEN, "--db", join(tmp, "store.db"), "--www", www,
  "--demo-delay-ms", "20", "--heartbeat-ms", "1000",
], { stdio: ["ignore", "pipe", "inherit"] });
const cleanup = () => {
  server.kill("SIGKILL");
  rmSync(tmp, { recursive: true, force: true });
};

try {
  const addr = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the server did not start")), 30_000);
    createInterface({ input: server.stdout! }).on("line", (line) => {
      const m = /^agentwire: serving http:\/\/([^/]+)\//.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    server.on("exit", (code) => reject(new Error(`the server exited (${code})`)));
  });
  const context = await launchChromium(join(tmp, "profile"));
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    const problems: string[] = [];
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("console", (m) => {
      if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()}`);
    });
    await page.goto(`http://${addr}/?token=${TOKEN}`);
    await page.waitForFunction(() => "scenario" in window);
    const r = (await page.evaluate(() => window.scenario)) as Record<string, any>;

    // Exactly the timeline of an uninterrupted run, seen four ways.
    assert.ok(r.reference.length >= 3, `a real turn: ${JSON.stringify(r.reference)}`);
    assert.deepEqual(r.pageItems, r.reference, "the page's items (from batches) = the uninterrupted run");
    assert.deepEqual(r.snapshot, r.reference, "the client's snapshot = the uninterrupted run");
    assert.deepEqual(r.secondPage, r.reference, "a client that never dropped sees the same");
    assert.deepEqual(r.secondSnapshot, r.reference);
    const answer = r.reference.find((i: { kind: string }) => i.kind === "assistant_message");
    assert.ok(answer && !answer.streaming && answer.text.length > 200, "the whole slow answer");

    // Four server-side drops, all mid-turn, each resumed with no gap.
    assert.ok(r.drops >= 4, `drops: ${r.drops}`);
    assert.deepEqual(r.lifecycleAtDrops, ["running", "running", "running", "running"]);
    assert.ok(!r.notes.includes("gap") && !r.notes.includes("reset") && !r.notes.includes("store"), `notes: ${r.notes}`);
    // The store never failed: the client was told so on every subscription (no note), and
    // the description says the same.
    assert.deepEqual(r.store, { state: "available", unstored: 0 });
    assert.equal(r.describedStore.state, "available");
    // States are coalesced per animation frame: on a fast machine the socket may be open (or
    // the log caught up) before the first frame, so the first state seen is any of these.
    assert.ok(["connecting", "live", "caught_up"].includes(r.states[0]), `first state ${r.states[0]}`);
    assert.equal(r.states.filter((s: string) => s === "reconnecting").length, r.drops);
    assert.equal(r.states.at(-1), "caught_up");

    // Refusals are real Errors with codes.
    assert.deepEqual(r.errors, [
      "AgentwireError:foreground_turn_active",
      "AgentwireError:unknown_request",
      "AgentwireError:bad_decision",
      "AgentwireError:no_active_turn",
      "AgentwireError:unknown_mode",
      "AgentwireError:unsupported",
      "AgentwireError:bad_options",
      "AgentwireError:bad_options",
      "AgentwireError:already_running",
      "AgentwireError:unknown_session",
    ]);
    assert.ok(r.describedLikeTheApi, "describeSession answers what GET /api/sessions/{id} does");
    assert.ok(r.describedNode.length > 0, "the session names its node");
    assert.equal(r.modeSet, "resolved", "setMode resolves with nothing");
    assert.equal(r.currentMode, "dontAsk", "the server has the mode the client set");

    // At most one batch per animation frame, however many frames arrived.
    assert.equal(r.distinctFrames, r.callbacks, "two batches in one animation frame");
    assert.ok(r.framesReceived > r.callbacks, `${r.framesReceived} frames, ${r.callbacks} batches`);
    assert.ok(r.binaryFrames > r.callbacks, `${r.binaryFrames} of ${r.framesReceived} frames binary`);
    assert.equal(r.textAfterBinary, 0, "from the welcome on, every frame came as a binary message (binary_frames)");
    assert.ok(r.packedFrames > 0 && r.packedFrames < r.binaryFrames, `${r.packedFrames} of ${r.binaryFrames} binary frames packed (packed_events: the events frames)`);
    assert.deepEqual(problems, []);
    console.log(
      `browser: ${r.events} events, ${r.drops} drops mid-turn, ${r.framesReceived} frames in ` +
        `${r.callbacks} batches (one per animation frame at most), ${r.reference.length} items ` +
        `identical to an uninterrupted run`,
    );
  } finally {
    await context.close();
  }
} finally {
  cleanup();
}
