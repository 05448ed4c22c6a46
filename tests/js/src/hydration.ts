// Shared by the snapshot test and the hydration benchmark: a session seeded straight into a
// SQLite log (`agentwire-testkit seed`), a real `agentwire serve` serving the real page
// (www/), and Chromium opening that session on it, with the time from the page's subscribe to
// its last item rendered measured inside the page.

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import type { BrowserContext, Page } from "playwright-core";

import { launchChromium, root, testkitBin } from "./fixtures.js";

declare global {
  interface Window {
    agentwirePage: any;
    hydration: { subscribedAt?: number; frames: number; bytes: number };
  }
}

export const TOKEN = "hydration-token-0123456789abcdef";

export interface Seeded {
  dir: string;
  db: string;
  session: string;
  events: number;
}

/** Seeds `events` events of session `session` into a fresh SQLite log, with its projection
 * stored as a companion would have (`projection` false: without, as a log from before). */
export function seed(events: number, session = "ses_4d0a7e", projection = true): Seeded {
  const dir = mkdtempSync(join(tmpdir(), "agentwire-hydration-"));
  const db = join(dir, "log.db");
  const args = ["seed", "--db", db, "--session", session, "--events", String(events)];
  const out = execFileSync(testkitBin, projection ? args : [...args, "--no-projection"]);
  return { dir, db, session, events: Number(out.toString().trim().split(/\s+/)[0]) || events };
}

export interface Served {
  addr: string;
  child: ChildProcess;
  stop: () => Promise<void>;
}

/** `agentwire serve` (the binary `program`) on port 0 over `db`, serving www/. */
export async function serve(program: string, db: string): Promise<Served> {
  const child = spawn(program, ["serve", "--addr", "127.0.0.1:0", "--db", db, "--www", join(root, "www")], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, AGENTWIRE_TOKEN: TOKEN },
  });
  const addr = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("agentwire serve did not start")), 60_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const m = /^agentwire: serving http:\/\/([^/]+)\//.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once("exit", (code) => reject(new Error(`agentwire serve exited with ${code}`)));
  });
  const stop = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      child.once("exit", () => {
        clearTimeout(timer);
        resolve();
      });
      child.kill("SIGINT");
    });
  return { addr, child, stop };
}

/** Chromium with a hook that notes when the page first subscribes, and counts what it receives. */
export async function browser(dir: string): Promise<BrowserContext> {
  const context = await launchChromium(join(dir, "profile"), { viewport: { width: 1280, height: 800 } });
  await context.addInitScript(() => {
    window.hydration = { frames: 0, bytes: 0 };
    const Native = window.WebSocket;
    window.WebSocket = class extends Native {
      constructor(url: string | URL, protocols?: string | string[]) {
        super(url, protocols);
        this.addEventListener("message", (e) => {
          window.hydration.frames += 1;
          window.hydration.bytes += typeof e.data === "string" ? e.data.length : 0;
        });
      }
      override send(data: string | ArrayBufferLike | Blob | ArrayBufferView) {
        if (typeof data === "string" && data.includes('"t":"subscribe"') && window.hydration.subscribedAt === undefined) {
          window.hydration.subscribedAt = performance.now();
        }
        super.send(data);
      }
    };
  });
  return context;
}

export interface Opened {
  page: Page;
  /** From the page's subscribe to the session's last item rendered, in the page's clock. */
  ms: number;
  /** Items the page holds then, and the index of the first. */
  held: number;
  start: number;
}

/** Opens the page on `session` (`snapshot` off: the whole log replayed) and waits until the
 * session's last item (`lastText` in its row) is rendered. A page that cannot get there (an
 * error thrown on it, a script it could not load: the npm package not installed into www/)
 * fails at once, not at `timeoutMs`. */
export async function open(
  context: BrowserContext, addr: string, session: string, lastText: string, snapshot: boolean, timeoutMs: number,
): Promise<Opened> {
  const page = await context.newPage();
  const problems: string[] = [];
  let fail = (_: Error) => {};
  const failed = new Promise<never>((_, reject) => (fail = reject));
  failed.catch(() => {}); // also when nothing waits on it any more
  const problem = (what: string) => {
    problems.push(what);
    fail(new Error(problems.join("; ")));
  };
  page.on("pageerror", (e) => problem(e.message));
  page.on("response", (r) => {
    if (r.status() >= 400 && r.request().resourceType() === "script") problem(`${r.status()} for ${r.url()}`);
  });
  const query = `token=${TOKEN}${snapshot ? "" : "&snapshot=off"}`;
  await page.goto(`http://${addr}/?${query}#${session}`);
  try {
    await Promise.race([failed, page.waitForFunction(
      ({ session, lastText }) => {
        const p = window.agentwirePage;
        if (!p || p.state.current !== session) return false;
        const n = p.view.items.length;
        const row = document.querySelector(`#timeline [data-index="${n - 1}"]`);
        if (!row || !row.textContent?.includes(lastText)) return false;
        (window as any).renderedAt ??= performance.now();
        return true;
      },
      { session, lastText },
      { timeout: timeoutMs, polling: "raf" },
    )]);
  } catch (e) {
    const why = problems.length ? problems.join("; ") : (e as Error).message.split("\n")[0];
    throw new Error(`the last item was not rendered: ${why}`);
  }
  const got = await page.evaluate((session) => ({
    ms: (window as any).renderedAt - (window.hydration.subscribedAt ?? 0),
    held: window.agentwirePage.view.items.length,
    start: window.agentwirePage.state.models.get(session)?.start ?? 0,
  }), session);
  if (problems.length) throw new Error(`page errors: ${problems.join("; ")}`);
  return { page, ...got };
}
