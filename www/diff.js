// Edit and write tools shown as what they change: a line diff of old and new text, or a patch
// the agent wrote, coloured by line. Built from text nodes only, like everything agent-made.

const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

/** Beyond this many cells (old lines × new lines) the middle is shown as removed, then added. */
const MAX_CELLS = 250_000;

/**
 * The line diff of `before` and `after`: `[op, line]` pairs, op one of " ", "-", "+".
 * Common head and tail first, then a longest common subsequence of what is left.
 */
export function lineDiff(before, after) {
  const a = before === "" ? [] : before.split("\n");
  const b = after === "" ? [] : after.split("\n");
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const x = a.slice(head, a.length - tail);
  const y = b.slice(head, b.length - tail);
  const out = a.slice(0, head).map((l) => [" ", l]);
  if (x.length * y.length > MAX_CELLS) {
    out.push(...x.map((l) => ["-", l]), ...y.map((l) => ["+", l]));
  } else {
    // lcs[i][j]: the longest common subsequence of x[i..] and y[j..].
    const w = y.length + 1;
    const lcs = new Uint32Array((x.length + 1) * w);
    for (let i = x.length - 1; i >= 0; i--) {
      for (let j = y.length - 1; j >= 0; j--) {
        lcs[i * w + j] = x[i] === y[j] ? lcs[(i + 1) * w + j + 1] + 1 : Math.max(lcs[(i + 1) * w + j], lcs[i * w + j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < x.length || j < y.length) {
      if (i < x.length && j < y.length && x[i] === y[j]) {
        out.push([" ", x[i++]]);
        j++;
      } else if (i < x.length && (j === y.length || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])) {
        out.push(["-", x[i++]]); // removals before additions, as diffs read
      } else {
        out.push(["+", y[j++]]);
      }
    }
  }
  out.push(...a.slice(a.length - tail).map((l) => [" ", l]));
  return out;
}

/** Unchanged lines kept around each change; longer unchanged runs fold to a marker. */
const CONTEXT = 3;

/** A `pre.diff` of `[op, line]` pairs. */
export function diffView(lines) {
  const pre = el("pre", "io diff");
  const changed = lines.map(([op]) => op !== " ");
  const near = (k) => {
    for (let d = -CONTEXT; d <= CONTEXT; d++) if (changed[k + d]) return true;
    return false;
  };
  let folded = 0;
  const fold = () => {
    if (folded) pre.append(el("span", "diff-fold", `⋯ ${folded} unchanged line${folded === 1 ? "" : "s"}`));
    folded = 0;
  };
  lines.forEach(([op, line], k) => {
    if (op === " " && !near(k)) {
      folded++;
      return;
    }
    fold();
    pre.append(el("span", op === "+" ? "diff-add" : op === "-" ? "diff-del" : "diff-ctx", `${op} ${line}`));
  });
  fold();
  return pre;
}

/** A patch the agent wrote (unified diff or `*** Begin Patch`), coloured by line. */
export function patchView(patch) {
  const pre = el("pre", "io diff");
  for (const line of patch.replace(/\n$/, "").split("\n")) {
    const cls = /^(\+\+\+|---|\*\*\*)/.test(line) ? "diff-file"
      : line.startsWith("@@") ? "diff-hunk"
      : line.startsWith("+") ? "diff-add"
      : line.startsWith("-") ? "diff-del"
      : "diff-ctx";
    pre.append(el("span", cls, line));
  }
  return pre;
}

const str = (v) => (typeof v === "string" ? v : undefined);

/**
 * What a tool call changes in files, when it is an edit or a write: `{path, view}` with the
 * diff to show, else undefined. Reads the inputs of Claude Code (Edit, MultiEdit, Write),
 * Gemini CLI (replace, write_file), OpenCode (edit, write) and Codex (apply_patch).
 */
export function fileChange(item) {
  const input = item.input;
  if (!input || typeof input !== "object") return undefined;
  const path = str(input.file_path) ?? str(input.filePath) ?? str(input.path) ?? str(input.absolute_path);
  const oldText = str(input.old_string) ?? str(input.oldString);
  const newText = str(input.new_string) ?? str(input.newString);
  if (oldText !== undefined && newText !== undefined) return { path, view: diffView(lineDiff(oldText, newText)) };
  if (Array.isArray(input.edits) && input.edits.length > 0) {
    const lines = [];
    input.edits.forEach((e, k) => {
      if (k > 0) lines.push([" ", "⋯"]);
      lines.push(...lineDiff(str(e?.old_string) ?? str(e?.oldString) ?? "", str(e?.new_string) ?? str(e?.newString) ?? ""));
    });
    return { path, view: diffView(lines) };
  }
  const content = str(input.content);
  if (content !== undefined && path && /write|create/i.test(item.tool_name ?? "")) {
    return { path, view: diffView(lineDiff("", content)) };
  }
  const patch = str(input.patch) ?? str(input.input) ?? str(input.diff);
  if (patch && /^\*\*\* Begin Patch|^(---|\+\+\+|@@) /m.test(patch)) return { path, view: patchView(patch) };
  if (Array.isArray(input.changes)) {
    const text = input.changes.map((c) => str(c?.unified_diff) ?? str(c?.diff) ?? "").filter(Boolean).join("\n");
    if (text) return { path: input.changes.map((c) => c?.path).filter(Boolean).join(", "), view: patchView(text) };
  }
  return undefined;
}
