// Shared by the Node tests: the repository's paths, the transcripts, and the package's two
// entry points loaded the way a page loads the `web` build (here from the files, initSync).

import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { chromium, type BrowserContext } from "playwright-core";

import { initSync } from "../../../pkg-web/agentwire.js";
import type { Format } from "../../../pkg-web/agentwire.js";
import { initSync as initTranscripts } from "../../../pkg-web/transcripts/agentwire.js";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** Debian's Chromium (or `$CHROMIUM`), headless, on a fresh profile directory: what every
 * browser test drives. */
export function launchChromium(profile: string, options: { viewport?: { width: number; height: number } } = {}): Promise<BrowserContext> {
  return chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    ...options,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
}

/** The native binary to compare with (scripts/test builds it). */
export const bin = process.env.AGENTWIRE_BIN ?? join(root, "target", "debug", "agentwire");

/** The test tools (`fake-model`, `chaos-proxy`): not in the product binary; `cargo test`
 * builds them (the `testkit` feature). */
export const testkitBin =
  process.env.AGENTWIRE_TESTKIT_BIN ?? join(root, "target", "debug", "agentwire-testkit");

export const formats: Format[] = [
  "claude", "codex", "codex-app-server", "gemini", "gemini-acp", "opencode", "amp", "generic",
];

export interface Transcript {
  format: Format;
  path: string;
  name: string;
  text: string;
}

/** Every transcript under tests/data/<format>/ (what tests/goldens.rs reads too). */
export function transcripts(): Transcript[] {
  const out: Transcript[] = [];
  for (const format of formats) {
    let names: string[];
    try {
      names = readdirSync(join(root, "tests", "data", format));
    } catch {
      continue;
    }
    for (const name of names.sort()) {
      if (name.endsWith(".golden") || name.endsWith(".md")) continue;
      const path = join(root, "tests", "data", format, name);
      out.push({ format, path, name: `${format}/${name}`, text: readFileSync(path, "utf8") });
    }
  }
  if (out.length < 29) throw new Error(`only ${out.length} transcripts found`);
  return out;
}

let loaded = false;
export function loadPackage(): void {
  if (!loaded) {
    initSync({ module: readFileSync(join(root, "pkg-web", "agentwire_bg.wasm")) });
    initTranscripts({ module: readFileSync(join(root, "pkg-web", "transcripts", "agentwire_bg.wasm")) });
    loaded = true;
  }
}
