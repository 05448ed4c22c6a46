// Runs in a child `node` (no flag), copied next to a node_modules/agentwire that is pkg/ (what
// npm users get): imports the package by its name as an app would (the `node` entries read
// their .wasm file), runs the transcripts named on stdin, prints the outputs as JSON.

import { readFileSync } from "node:fs";

// @ts-ignore: resolved where the test copies this file.
import * as agentwire from "agentwire/transcripts";
// @ts-ignore: likewise; the main entry must load too.
import { Projector } from "agentwire";

new Projector().free();
const pkg = agentwire as typeof import("../../../pkg-web/transcripts/agentwire.js");
const { paths, nowMs } = JSON.parse(readFileSync(0, "utf8")) as { paths: [string, string][]; nowMs: number };
const out = paths.map(([format, path]) => {
  const text = readFileSync(path, "utf8");
  return [pkg.normalize(format as never, text, nowMs), pkg.project(format as never, text, nowMs)];
});
process.stdout.write(JSON.stringify(out));
