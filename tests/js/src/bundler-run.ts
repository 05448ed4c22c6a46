// Runs in a child `node --experimental-wasm-modules`: the `bundler` build (pkg/, what npm
// users get) imported as a bundler would, over the transcripts named on stdin; prints the
// outputs as JSON.

import { readFileSync } from "node:fs";

// @ts-ignore: the bundler build's glue imports its .wasm as an ES module (Node needs the flag).
import * as agentwire from "../../../pkg/agentwire.js";

const pkg = agentwire as typeof import("../../../pkg-web/agentwire.js");
const { paths, nowMs } = JSON.parse(readFileSync(0, "utf8")) as { paths: [string, string][]; nowMs: number };
const out = paths.map(([format, path]) => {
  const text = readFileSync(path, "utf8");
  return [pkg.normalize(format as never, text, nowMs), pkg.project(format as never, text, nowMs)];
});
process.stdout.write(JSON.stringify(out));
