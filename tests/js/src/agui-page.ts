// The AG-UI browser test's page (bundled with @ag-ui/client by esbuild, served same-origin by
// `agentwire serve --www`): `window.agui` runs scripted AG-UI runs in the page with the
// official HttpAgent; tests/js/src/agui.test.ts calls it and asserts on what it returns.

import { agent, run, type Run } from "./agui-run.js";

declare global {
  interface Window {
    agui: {
      /** Runs each step on one agent of thread `threadId`: a prompt, or a resume answering the
       * previous run's first interrupt with `approved`. */
      script(threadId: string, steps: ({ prompt: string } | { approved: boolean })[]): Promise<Run[]>;
    };
  }
}

const token = new URLSearchParams(location.search).get("token") ?? "";

window.agui = {
  async script(threadId, steps) {
    const a = agent(`${location.origin}/ag-ui/demo`, token, threadId);
    const runs: Run[] = [];
    for (const step of steps) {
      if ("prompt" in step) {
        runs.push(await run(a, step.prompt));
      } else {
        const interruptId = a.pendingInterrupts[0]?.id ?? "none";
        runs.push(await run(a, null, {
          resume: [{ interruptId, status: "resolved", payload: { approved: step.approved } }],
        }));
      }
    }
    return runs;
  },
};
document.title = "ready";
