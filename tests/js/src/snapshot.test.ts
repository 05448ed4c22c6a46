// The demo page opens a long session at its end and pages back through all of it, in
// Chromium, against a real `agentwire serve`: a session seeded straight into its SQLite log
// (`agentwire-testkit seed`, SNAPSHOT_EVENTS events, 20,000 by default; the 1M-event figure is
// the hydration benchmark's), opened from a snapshot of its last items; its last item is
// rendered while the page holds a few hundred items, not the session; scrolled to the top
// again and again, the page pages older items in (keeping what was on screen where it was)
// until it holds every item, exactly those one pass over the stored log projects.

import { strict as assert } from "node:assert";
import { rmSync } from "node:fs";

import { Projector } from "../../../pkg-web/agentwire.js";
import type { Item } from "../../../pkg-web/agentwire.js";
import { bin, loadPackage } from "./fixtures.js";
import { browser, open, seed, serve, TOKEN } from "./hydration.js";

loadPackage();
const EVENTS = Number(process.env.SNAPSHOT_EVENTS ?? 20_000);
const DEADLINE_MS = 60_000;

const seeded = seed(EVENTS);
const server = await serve(bin, seeded.db);
const context = await browser(seeded.dir);
try {
  const api = async (path: string) => {
    const r = await fetch(`http://${server.addr}${path}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
    assert.ok(r.ok, `${path}: ${r.status}`);
    return r.json();
  };
  // The stored log, projected in one pass: what the page must end with.
  const reference = new Projector();
  let after = 0;
  let last = "";
  for (;;) {
    const { events, epoch } = await api(`/api/sessions/${seeded.session}/events?after=${after}&limit=10000`);
    if (events.length === 0) break;
    reference.ingest(JSON.stringify({ t: "events", session: seeded.session, epoch, events }), Date.now());
    after = events[events.length - 1].sequence;
    for (const e of events) if (e.type === "message_received") last = e.data.content;
  }
  const want = reference.snapshot(seeded.session) as Item[];
  reference.free();
  const lastText = last.trim().split(" ").slice(-3).join(" ");

  const opened = await open(context, server.addr, seeded.session, lastText, true, DEADLINE_MS);
  const page = opened.page;
  assert.ok(opened.start > 0, "opened from a snapshot: the older items are not held");
  assert.ok(opened.held >= 200 && opened.held < 400, `the page holds ${opened.held} items, not ${want.length}`);
  const frames = await page.evaluate(() => window.hydration.frames);
  assert.ok(frames < 100, `${frames} frames to open ${EVENTS} events`);
  const held = await page.evaluate(() => window.agentwirePage.view.items);
  assert.deepEqual(held, want.slice(opened.start), "the end of the session, as one pass projects it");

  // Scrolled to the top, again and again: older pages come in, the view stays where it was.
  // The page also pages in by itself while the view is near the top (a page that came in
  // may leave it there), so the start to wait past is read as the view is scrolled, not
  // kept from the last page the test saw.
  let start = opened.start;
  let pages = 0;
  while (start > 0) {
    start = await page.evaluate((session) => {
      const t = document.getElementById("timeline")!;
      t.scrollTop = 0;
      t.dispatchEvent(new Event("scroll"));
      return window.agentwirePage.state.models.get(session).start as number;
    }, seeded.session);
    if (start === 0) break;
    await page.waitForFunction(
      ({ session, start }) => (window.agentwirePage.state.models.get(session)?.start ?? 0) < start,
      { session: seeded.session, start },
      { timeout: DEADLINE_MS, polling: "raf" },
    );
    const now = await page.evaluate((session) => ({
      start: window.agentwirePage.state.models.get(session).start as number,
      top: document.getElementById("timeline")!.scrollTop,
    }), seeded.session);
    assert.ok(now.top > 0, "the rows on screen stayed where they were, below the page that came in");
    start = now.start;
    pages += 1;
    assert.ok(pages <= want.length, "paging ends");
  }
  const all = await page.evaluate(() => window.agentwirePage.view.items);
  assert.equal(all.length, want.length);
  assert.deepEqual(all, want, "paged back to the start: every item, once, in order");
  console.log(`snapshot: ${EVENTS} events, ${want.length} items; opened holding ${opened.held} from ${opened.start}; ${pages} pages back to the start`);
  console.log("ok");
} finally {
  await context.close();
  await server.stop();
  rmSync(seeded.dir, { recursive: true, force: true });
}
