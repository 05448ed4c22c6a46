// Differential test: every transcript under tests/data/ through the built npm package (in
// Node) and through the native binary; normalize and project outputs must be identical byte
// for byte, with the provider given and detected.

import { strict as assert } from "node:assert";
import { spawnSync } from "node:child_process";

import { mkdirSync, mkdtempSync, rmSync, symlinkSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { normalize, project } from "../../../pkg-web/transcripts/agentwire.js";
import { bin, loadPackage, root, transcripts } from "./fixtures.js";

const NOW = "2026-01-02T03:04:05.678Z";
const NOW_MS = Date.parse(NOW);

loadPackage();
let compared = 0;
let bytes = 0;
const all = transcripts();
/** Native stdout of `normalize` and `project` with the provider given, for the bundler check. */
const given = new Map<string, Buffer[]>();
for (const t of all) {
  for (const provider of [t.format, null]) {
    for (const [command, run] of [["normalize", normalize], ["project", project]] as const) {
      const args = [command, "--session", "local", "--now", NOW, t.path];
      if (provider) args.splice(1, 0, "--provider", provider);
      const native = spawnSync(bin, args, { maxBuffer: 1 << 28 });
      assert.equal(native.status, 0, `${bin} ${args.join(" ")}: ${native.stderr}`);
      const wasm = Buffer.from(run(provider, t.text, NOW_MS), "utf8");
      if (!wasm.equals(native.stdout)) {
        assert.equal(wasm.toString("utf8"), native.stdout.toString("utf8"), `${command} ${t.name} (provider ${provider})`);
        assert.fail(`${command} ${t.name}: same text, different bytes`);
      }
      compared += 1;
      bytes += wasm.length;
      if (provider) given.set(t.name, [...(given.get(t.name) ?? []), native.stdout]);
    }
  }
}

// The published build (pkg/), installed as node_modules/agentwire and imported by its name
// (`agentwire/transcripts`, through package.json "exports": the `node` condition) by Node's
// ES module loader, with no flag.
const app = mkdtempSync(join(tmpdir(), "agentwire-app-"));
mkdirSync(join(app, "node_modules"));
symlinkSync(join(root, "pkg"), join(app, "node_modules", "agentwire"), "dir");
copyFileSync(join(root, "tests", "js", "build", "bundler-run.js"), join(app, "run.mjs"));
const child = spawnSync(
  process.execPath,
  [join(app, "run.mjs")],
  { input: JSON.stringify({ paths: all.map((t) => [t.format, t.path]), nowMs: NOW_MS }), maxBuffer: 1 << 28 },
);
rmSync(app, { recursive: true, force: true });
assert.equal(child.status, 0, child.stderr.toString());
const outputs = JSON.parse(child.stdout.toString()) as [string, string][];
all.forEach((t, i) => {
  const [normalized, projected] = outputs[i] ?? ["", ""];
  const [nativeNormalized, nativeProjected] = given.get(t.name) ?? [];
  assert.ok(Buffer.from(normalized).equals(nativeNormalized!), `bundler normalize ${t.name}`);
  assert.ok(Buffer.from(projected).equals(nativeProjected!), `bundler project ${t.name}`);
  compared += 2;
});
console.log(`differential: ${compared} outputs (${bytes} bytes) identical to the native binary`);
