// The demo page: sessions of a live `agentwire serve`, followed through the `agentwire` npm
// package's Client exactly as a frontend would, and saved transcripts projected in the browser.
// The HTTP API creates and lists sessions; everything live rides the Client's WebSocket.

import init, { Client } from "agentwire";
import { SessionModel, TimelineView, silence } from "./timeline.js";

const $ = (id) => document.getElementById(id);
const token = takeToken();

// The token comes in the URL's fragment (`#token=…`, which no server and no referrer ever
// sees) or, from older links, its query; it is kept in this tab's sessionStorage so a reload
// still has it, and taken out of the address bar (and so out of the history) at once.
function takeToken() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const query = new URLSearchParams(location.search);
  const given = fragment.get("token") ?? query.get("token");
  if (given === null) return sessionStorage.getItem("agentwire.token") ?? "";
  sessionStorage.setItem("agentwire.token", given);
  query.delete("token");
  const search = query.size > 0 ? `?${query}` : "";
  const session = fragment.has("token") ? fragment.get("session") : location.hash.slice(1);
  const hash = session ? `#${session}` : "";
  history.replaceState(null, "", `${location.pathname}${search}${hash}`);
  return given;
}

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = response.status === 204 ? null : await response.json();
  if (!response.ok) {
    const error = new Error(data?.error?.message ?? response.statusText);
    error.code = data?.error?.code ?? "http_" + response.status;
    throw error;
  }
  return data;
}

function notice(text) {
  $("notice").textContent = text;
}

function fail(error) {
  notice(error.code ? `${error.code}: ${error.message}` : String(error.message ?? error));
}

const state = {
  sessions: [], // from the API
  lifecycles: new Map(), // session -> lifecycle (from the Client)
  stores: new Map(), // session -> its store status, while the server says it is unavailable
  stalls: new Map(), // session -> its active turn's stall ({silent_ms, at_ms}), while stalled
  models: new Map(), // session -> SessionModel, from the Client's batches
  current: null, // the session shown, or {transcript: name}
  client: null,
  node: null, // this companion's node: a session another node runs is read-only here
  resets: 0, // sessions whose log the server replaced (another epoch): rebuilt from scratch
};

const view = new TimelineView($("timeline"), {
  onAnswer: (requestId, decision) => {
    if (typeof state.current !== "string") return;
    state.client.answerApproval(state.current, requestId, decision).catch(fail);
  },
});

function badge(text, cls) {
  const b = document.createElement("span");
  b.className = `badge ${cls}`;
  b.textContent = text;
  return b;
}

/** The stall of a session's turn, if any: in full in the head, one word in the list. */
function stallBadge(session, short = false) {
  const stall = state.stalls.get(session);
  if (!stall) return [];
  // Silent since the host noticed, too (its clock; never less than what it noticed).
  const silent = stall.silent_ms + Math.max(0, Date.now() - stall.at_ms);
  const text = `stalled: no output for ${silence(silent)}`;
  const b = badge(short ? "stalled" : text, "lifecycle-stalled");
  b.title = text;
  return [b];
}

function renderSessions() {
  const list = $("sessions");
  list.replaceChildren();
  for (const s of state.sessions) {
    const li = document.createElement("li");
    li.dataset.session = s.id;
    if (s.id === state.current) li.classList.add("selected");
    const name = document.createElement("span");
    name.textContent = `${s.provider} · ${s.id.slice(4, 12)}`;
    const lifecycle = state.lifecycles.get(s.id);
    const shown = lifecycle ?? s.state;
    li.append(name, badge(shown, `lifecycle-${shown}`), ...stallBadge(s.id, true));
    li.onclick = () => select(s.id);
    list.append(li);
  }
}

function renderHead() {
  let elsewhere = null;
  const current = state.current;
  if (current === null) {
    $("session-title").textContent = "No session selected";
    $("lifecycle").replaceChildren();
    $("store").replaceChildren();
    $("usage").textContent = "";
    return;
  }
  if (typeof current !== "string") {
    $("session-title").textContent = `Transcript: ${current.transcript}`;
    $("lifecycle").replaceChildren(badge(current.lifecycle ?? "idle", `lifecycle-${current.lifecycle ?? "idle"}`));
  } else {
    const s = state.sessions.find((x) => x.id === current);
    elsewhere = s && hostedElsewhere(s) ? s.node : null;
    $("session-title").textContent =
      (s ? `${s.provider} session ${s.id}` : current) + (elsewhere ? ` · on node ${elsewhere}` : "");
    const lifecycle = state.lifecycles.get(current) ?? "initializing";
    $("lifecycle").replaceChildren(badge(lifecycle, `lifecycle-${lifecycle}`), ...stallBadge(current));
  }
  renderStore(typeof current === "string" ? state.stores.get(current) : undefined);
  const u = view.usage;
  $("usage").textContent = u
    ? `${u.input_tokens} in · ${u.output_tokens} out` + (u.cost_usd ? ` · $${u.cost_usd.toFixed(4)}` : "")
    : "";
  // Commands go to the companion that runs the session: from here, it can only be watched.
  const live = typeof current === "string" && !elsewhere;
  $("send").disabled = !live;
  $("interrupt").disabled = !live;
  $("send").title = elsewhere ? `Node ${elsewhere} runs this session: send prompts from its page` : "";
}

// While the session's store fails (`session_status`), its events wait on the server: say how
// many, and why (nothing is lost; they arrive once it is back).
function renderStore(store) {
  const shown = $("store");
  if (!store || store.state !== "unavailable") {
    shown.replaceChildren();
    return;
  }
  const b = badge(`store unavailable: ${store.unstored} events waiting`, "store-unavailable");
  b.title = `${store.error ?? "the store fails"}` +
    (store.since ? ` (since ${store.since}, ${store.attempts ?? 0} attempts)` : "");
  shown.replaceChildren(b);
}

function hostedElsewhere(s) {
  return Boolean(s.node) && state.node !== null && s.node !== state.node &&
    (s.state === "running" || s.state === "starting");
}

// The permission modes of the session shown, when its agent has any (the session contract).
async function renderModes() {
  const select = $("mode");
  const shown = state.current;
  if (typeof shown !== "string") {
    select.hidden = true;
    return;
  }
  const described = await api("GET", `/api/sessions/${encodeURIComponent(shown)}`).catch(() => null);
  if (state.current !== shown) return;
  const modes = described?.capabilities?.set_mode ? (described.modes ?? []) : [];
  select.replaceChildren(
    ...modes.map((m) => {
      const option = document.createElement("option");
      option.value = m.id;
      option.textContent = m.name;
      option.title = m.description ?? "";
      return option;
    }),
  );
  if (described?.current_mode) select.value = described.current_mode;
  select.hidden = modes.length === 0;
}

function model(session) {
  let m = state.models.get(session);
  if (!m) state.models.set(session, (m = new SessionModel()));
  return m;
}

function select(id) {
  state.current = id;
  // Every followed session's model is kept up to date: mount what its batches added up to.
  view.show(model(id));
  // The session shown survives a reload.
  history.replaceState(null, "", `${location.pathname}${location.search}#${encodeURIComponent(id)}`);
  renderSessions();
  renderHead();
  renderModes();
}

/** Says how many commands wait for the connection (kept by the Client while it is down). */
function showPending() {
  const s = $("connection");
  const waiting = s.dataset.state === "reconnecting" || s.dataset.state === "connecting";
  const n = state.client?.pending ?? 0;
  $("pending").textContent = waiting && n ? `${n} waiting to be sent` : "";
}

function onChange(batch) {
  if (batch.state) {
    const s = $("connection");
    // What the page shows is only as fresh as this: `live` while some session is still
    // catching up (or resyncing after the server fell behind) reads as "catching up".
    const label = { live: "catching up", caught_up: "live" }[batch.state] ?? batch.state;
    s.replaceChildren(badge(label, `conn-${batch.state}`));
    if (state.client?.transport === "sse") s.append(badge("fallback: SSE", "conn-fallback"));
    s.dataset.state = batch.state;
    showPending();
  }
  if (batch.transport) $("connection").dataset.transport = batch.transport;
  let sessionsChanged = false;
  for (const b of batch.sessions) {
    if (b.lifecycle) {
      state.lifecycles.set(b.session, b.lifecycle.state);
      if (b.lifecycle.stalled) state.stalls.set(b.session, b.lifecycle.stalled);
      else state.stalls.delete(b.session);
      sessionsChanged = true;
    }
    // A reset with a `start` is a snapshot (the session opened at its end), not a rebuilt log.
    const snapshot = b.reset && b.start !== undefined;
    const older = b.older?.length ?? 0;
    // A batch that both restores and prepends starts where the restored items began.
    const m = b.reset ? new SessionModel((b.start ?? 0) + older) : model(b.session);
    if (b.reset) {
      state.models.set(b.session, m);
      if (!snapshot) state.resets += 1;
    }
    if (older) m.prepend(b.older, b.start);
    m.apply(b.changes);
    for (const n of b.notes ?? []) {
      if (n.note !== "store") continue;
      if (n.state === "unavailable") state.stores.set(b.session, n);
      else state.stores.delete(b.session);
    }
    if (b.session !== state.current) continue;
    if (b.reset) {
      view.show(m);
      if (!snapshot) notice("The server's log was replaced; the timeline was rebuilt from it.");
    } else {
      if (older) view.prepended(older);
      view.changed(b.changes);
    }
    for (const n of b.notes ?? []) if (n.note === "error") notice(`${n.code}: ${n.message}`);
  }
  if (sessionsChanged) renderSessions();
  renderHead();
  view.flush(); // this batch shows in this animation frame
}

/** At the top of a session opened from a snapshot: pages its older items in, one page at a time. */
let paging = false;
function olderAtTop() {
  const id = state.current;
  if (paging || typeof id !== "string" || $("timeline").scrollTop > 400) return;
  if (!state.models.get(id)?.start) return;
  paging = true;
  state.client.history(id, 200).catch((e) => notice(`history: ${e.message}`)).finally(() => {
    paging = false;
  });
}

async function refreshSessions() {
  const { sessions } = await api("GET", "/api/sessions");
  const known = new Set(state.sessions.map((s) => s.id));
  state.sessions = sessions.reverse();
  for (const s of sessions) if (!known.has(s.id)) state.client.subscribe(s.id);
  renderSessions();
}

async function main() {
  await init();
  const info = await api("GET", "/api/info");
  state.node = info.node ?? null;
  const providers = $("provider");
  for (const p of info.providers) {
    const option = document.createElement("option");
    option.value = option.textContent = p;
    providers.append(option);
  }
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
  // `?fallback=off` keeps the page on the WebSocket (the chaos test that cuts it on purpose).
  const fallback = new URLSearchParams(location.search).get("fallback") !== "off";
  // A session opens at its end (a snapshot of its last items); older ones are paged in when
  // the timeline is scrolled to the top. `?snapshot=off` replays the whole log instead.
  const snapshot = new URLSearchParams(location.search).get("snapshot") !== "off" ? { items: 200 } : undefined;
  state.client = new Client({ url, token, sessions: [], onChange, fallback, snapshot });
  $("timeline").addEventListener("scroll", olderAtTop);
  // Back from the background (or offline): check the connection now, not at the next timer.
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") state.client.wake();
  });
  window.addEventListener("online", () => state.client.wake());
  await refreshSessions();
  const shown = decodeURIComponent(location.hash.slice(1));
  const first = state.sessions.find((s) => s.id === shown) ?? state.sessions[0];
  if (first) select(first.id);
  // Sessions started elsewhere appear; not while a transcript is shown (no server then).
  setInterval(() => {
    if (typeof state.current !== "object" || state.current === null) refreshSessions().catch(() => {});
  }, 3000);
  // A stall's duration keeps counting while it lasts.
  setInterval(() => {
    if (typeof state.current === "string" && state.stalls.has(state.current)) renderHead();
  }, 1000);

  $("create").onclick = async () => {
    try {
      const cwd = $("cwd").value.trim() || undefined;
      const s = await api("POST", "/api/sessions", { provider: providers.value, cwd });
      notice("");
      await refreshSessions();
      select(s.id);
    } catch (e) {
      fail(e);
    }
  };
  // A prompt leaves the box when sent: while disconnected the Client keeps it and sends it
  // once the connection is back (one turn, however often the connection drops on the way);
  // a refused prompt comes back to the box.
  const send = async () => {
    const prompt = $("prompt").value;
    if (!prompt.trim() || typeof state.current !== "string") return;
    $("prompt").value = "";
    const turn = state.client.startTurn(state.current, prompt);
    showPending();
    try {
      await turn;
      notice("");
    } catch (e) {
      if (!$("prompt").value) $("prompt").value = prompt;
      fail(e);
    } finally {
      showPending();
    }
  };
  $("send").onclick = send;
  $("prompt").onkeydown = (e) => {
    if (e.key === "Enter" && (e.metaKey || e.ctrlKey)) send();
  };
  $("interrupt").onclick = () => {
    if (typeof state.current === "string") state.client.interrupt(state.current).catch(fail);
  };
  $("mode").onchange = () => {
    if (typeof state.current !== "string") return;
    state.client.setMode(state.current, $("mode").value).then(
      () => notice(""),
      (e) => {
        fail(e);
        renderModes();
      },
    );
  };
  $("transcript").onchange = async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    try {
      await openTranscript(file.name, await file.text());
    } catch (err) {
      fail(err);
    }
  };
  window.agentwirePage = { state, view }; // for the end-to-end tests
}

// A saved provider transcript, projected entirely in the browser (no server involved).
async function openTranscript(name, text) {
  const transcripts = await import("agentwire/transcripts");
  await transcripts.default();
  const projector = transcripts.Projector.transcript(null, "transcript");
  projector.ingest(text, Date.now());
  projector.finish(Date.now());
  const batch = projector.drain();
  const b = batch.sessions.find((x) => x.session === "transcript");
  state.current = { transcript: name, lifecycle: b?.lifecycle?.state };
  const m = new SessionModel();
  if (b) m.apply(b.changes);
  view.show(m);
  history.replaceState(null, "", `${location.pathname}${location.search}`);
  const diagnostics = (b?.notes ?? []).filter((n) => n.note === "diagnostic").length;
  notice(diagnostics ? `${diagnostics} line(s) of the transcript could not be read` : "");
  projector.free();
  renderSessions();
  renderHead();
  renderModes();
}

main().catch(fail);
