// The processes a JS test runs (`agentwire serve`, the testkit's tools) and the one way it
// talks to a server's HTTP API: shared by the e2e and AG-UI tests so each has one definition
// of "started", "stopped" and "an API call failed".

import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { createInterface } from "node:readline";

import { bin } from "./fixtures.js";

const children: ChildProcess[] = [];
process.on("exit", () => children.forEach((c) => c.kill("SIGKILL")));

/** Spawns a process that is killed if the test process exits first. */
export function spawnTracked(program: string, args: string[], options: SpawnOptions): ChildProcess {
  const child = spawn(program, args, options);
  children.push(child);
  return child;
}

/** Spawns `program` (the agentwire binary by default) with stdout piped for [`firstLine`]. */
export function start(args: string[], env?: NodeJS.ProcessEnv, program = bin): ChildProcess {
  return spawnTracked(program, args, { stdio: ["ignore", "pipe", "inherit"], ...(env ? { env } : {}) });
}

/** Waits for the first stdout line matching `re`; returns its first group. */
export function firstLine(child: ChildProcess, re: RegExp, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start`)), 30_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const m = re.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.on("exit", (code) => reject(new Error(`${what} exited (${code})`)));
  });
}

/** Stops a process and waits for its exit: SIGINT (a server then stops its agents and drains
 * its store), SIGKILL after 5 s. */
export function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill("SIGINT");
  });
}

/** The line `agentwire serve` prints once it listens; its group is the address. */
export const SERVING = /^agentwire: serving http:\/\/([^/]+)\//;

/** Calls a server's HTTP API with the token; a status that is not 2xx throws with its body. */
export function apiClient(base: string, token: string) {
  return async (method: string, path: string, body?: unknown): Promise<any> => {
    const r = await fetch(`${base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
    return r.status === 204 ? null : r.json();
  };
}

/** The whole environment of a companion hosting the real Claude Code CLI against the fake
 * model at `fakeAddr`: PATH and what the CLI needs to run offline (tests/common/real.rs). */
export function claudeOffline(home: string, fakeAddr: string): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: home,
    TERM: "dumb",
    ANTHROPIC_BASE_URL: `http://${fakeAddr}`,
    ANTHROPIC_API_KEY: "sk-ant-dummy",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    CLAUDE_CODE_MAX_RETRIES: "1",
  };
}
