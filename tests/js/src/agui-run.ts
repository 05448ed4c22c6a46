// One AG-UI run through the official `@ag-ui/client` HttpAgent, as an app makes it: shared by
// tests/js/src/agui.test.ts (Node) and agui-page.ts (Chromium, bundled by esbuild), so both
// runtimes are asserted the same way.

import { HttpAgent, type RunAgentParameters } from "@ag-ui/client";

/** What one run gave: every event the agent applied, in order, the error it threw, the
 * agent's messages and pending interrupts afterwards, all as plain JSON. */
export interface Run {
  events: any[];
  error: string | null;
  messages: any[];
  pendingInterrupts: any[];
}

export function agent(url: string, token: string, threadId: string): HttpAgent {
  return new HttpAgent({ url, headers: { Authorization: `Bearer ${token}` }, threadId });
}

/** Runs `agent` once, after adding a user message `prompt` (unless null); `onEvent` sees each
 * event as it arrives (an abort test calls `agent.abortRun()` from it). */
export async function run(
  agent: HttpAgent, prompt: string | null, params: RunAgentParameters = {}, onEvent?: (event: any) => void,
): Promise<Run> {
  if (prompt !== null) {
    agent.addMessage({ id: `user-${Math.random().toString(16).slice(2)}`, role: "user", content: prompt });
  }
  const events: any[] = [];
  let error: string | null = null;
  try {
    await agent.runAgent(params, {
      onEvent: ({ event }) => {
        events.push(JSON.parse(JSON.stringify(event)));
        onEvent?.(event);
      },
    });
  } catch (e) {
    error = (e as Error).message ?? String(e);
  }
  return {
    events, error,
    messages: JSON.parse(JSON.stringify(agent.messages)),
    pendingInterrupts: JSON.parse(JSON.stringify(agent.pendingInterrupts)),
  };
}
