// A session with the demo agent, drawn with agentwire/react: the timeline (one memoized row
// per item), the lifecycle, the connection, pending approvals with Allow/Deny, a prompt.
// Open it with ?server=http://127.0.0.1:7777&token=TOKEN (`agentwire serve --allow-origin`
// this page's origin); ?session=ID follows an existing session instead of creating a demo one.
// tests/bundlers/next-app/app/App.jsx is a copy (Next.js renders the same component).

import { memo, useEffect, useState } from "react";
import {
  AgentwireProvider, connect, useCommands, useConnection, useItems, useLifecycle,
  usePendingApprovals,
} from "agentwire/react";

/** How many times each row rendered, by item index (the bundler test reads it). */
function countRender(index) {
  const renders = (window.agentwireRenders ??= []);
  renders[index] = (renders[index] ?? 0) + 1;
}

async function createDemoSession(server, token) {
  const r = await fetch(`${server}/api/sessions`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ provider: "demo" }),
  });
  if (!r.ok) throw new Error(`POST /api/sessions: ${r.status} ${await r.text()}`);
  return (await r.json()).id;
}

/** One session per page load, even when StrictMode runs the effect twice. */
let sessionPromise;

export default function App() {
  const [state, setState] = useState({});
  useEffect(() => {
    const params = new URLSearchParams(location.search);
    const server = params.get("server") ?? "http://127.0.0.1:7777";
    const token = params.get("token") ?? "";
    let store;
    let cancelled = false;
    sessionPromise ??= params.get("session")
      ? Promise.resolve(params.get("session"))
      : createDemoSession(server, token);
    sessionPromise.then(
      (session) => {
        if (cancelled) return;
        const url = `${server.replace(/^http/, "ws")}/ws`;
        store = connect({ url, token, sessions: [session] });
        setState({ store, session });
      },
      (e) => setState({ error: String(e) }),
    );
    return () => {
      cancelled = true;
      store?.close();
    };
  }, []);
  if (state.error) return <p data-testid="error">{state.error}</p>;
  if (!state.store) return <p>Connecting…</p>;
  return (
    <AgentwireProvider store={state.store}>
      <Session session={state.session} />
    </AgentwireProvider>
  );
}

function Session({ session }) {
  return (
    <main style={{ fontFamily: "system-ui, sans-serif", maxWidth: 720, margin: "1rem auto" }}>
      <Status session={session} />
      <Timeline session={session} />
      <Approvals session={session} />
      <Prompt session={session} />
    </main>
  );
}

function Status({ session }) {
  const connection = useConnection();
  const lifecycle = useLifecycle(session);
  return (
    <p>
      <code>{session}</code>: connection <b data-testid="connection">{connection}</b>, agent{" "}
      <b data-testid="lifecycle">{lifecycle?.state ?? "unknown"}</b>
    </p>
  );
}

function Timeline({ session }) {
  const items = useItems(session);
  return (
    <ol data-testid="timeline">
      {items.map((item, index) => (
        <Row key={index} item={item} index={index} />
      ))}
    </ol>
  );
}

/** Renders again only when its item changed: agentwire/react keeps the others' objects. */
const Row = memo(function Row({ item, index }) {
  countRender(index);
  const attrs = { "data-testid": "row", "data-index": index, "data-kind": item.kind };
  switch (item.kind) {
    case "user_message":
      return <li {...attrs}>You: {item.text}</li>;
    case "assistant_message":
      if (item.discarded) return <li {...attrs} hidden />;
      return <li {...attrs} data-streaming={String(item.streaming)}>Agent: {item.text}</li>;
    case "reasoning":
      return <li {...attrs}><i>{item.text}</i></li>;
    case "tool_call":
      return (
        <li {...attrs} data-status={item.status}>
          {item.tool_name} ({item.status}) <pre>{item.output}</pre>
        </li>
      );
    case "approval":
      return <li {...attrs} data-status={item.status}>Approval for {item.tool_name}: {item.status}</li>;
    case "error":
      return <li {...attrs}>Error: {item.message}</li>;
    default:
      return <li {...attrs}>{item.kind}</li>;
  }
});

function Approvals({ session }) {
  const approvals = usePendingApprovals(session);
  const { answerApproval } = useCommands(session);
  return approvals.map((a) => (
    <p key={a.request_id} data-testid="approval">
      {a.tool_name} wants to run <code>{JSON.stringify(a.input)}</code>{" "}
      <button data-testid="allow" onClick={() => answerApproval(a.request_id, "allow")}>Allow</button>{" "}
      <button data-testid="deny" onClick={() => answerApproval(a.request_id, "deny")}>Deny</button>
    </p>
  ));
}

function Prompt({ session }) {
  const [text, setText] = useState("");
  const [error, setError] = useState("");
  const lifecycle = useLifecycle(session);
  const { startTurn, interrupt } = useCommands(session);
  const running = lifecycle?.state === "running";
  const send = (e) => {
    e.preventDefault();
    setError("");
    startTurn(text).then(() => setText(""), (err) => setError(`${err.code}: ${err.message}`));
  };
  return (
    <form onSubmit={send}>
      <input data-testid="prompt" value={text} onChange={(e) => setText(e.target.value)} size={50} />
      <button data-testid="send" disabled={running || !text}>Send</button>{" "}
      <button type="button" data-testid="interrupt" disabled={!running} onClick={() => interrupt()}>
        Interrupt
      </button>
      {error && <p data-testid="command-error">{error}</p>}
    </form>
  );
}
