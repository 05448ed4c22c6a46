// The timeline on the page: each session's items, built from the compact changes the
// `agentwire` package hands over (SessionModel), and the one shown, through a virtualized list
// (TimelineView). Applying a batch costs what changed, not the length of the session.

import { VirtualList } from "./virtual-list.js";
import { markdown } from "./markdown.js";
import { fileChange } from "./diff.js";

const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

const json = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));

/** Tool output longer than this many lines shows its first lines and a button for the rest. */
const OUTPUT_LINES = 30;

/**
 * One session's items, kept up to date from the batches: every followed session has one, shown
 * or not, so that showing a session is mounting what its batches added up to (never a snapshot
 * taken between two batches, which the next batch would then apply a second time).
 */
export class SessionModel {
  constructor(start = 0) {
    this.items = [];
    // The index of items[0]: above 0 when the session was opened from a snapshot and its
    // older items are not all paged in yet (change indices are absolute).
    this.start = start;
    this.usage = undefined;
    this.pending = []; // request ids of the approvals pending
  }

  /** Puts a history page's items before those held (a batch's `older`, from `start`). */
  prepend(older, start) {
    if (start + older.length !== this.start) throw new Error(`older items end at ${start + older.length}, not ${this.start}`);
    this.items = older.concat(this.items);
    this.start = start;
  }

  /** Applies the changes of one session batch, in order. */
  apply(changes) {
    const start = this.start;
    for (const c of changes) {
      switch (c.op) {
        case "insert":
          if (c.index !== start + this.items.length) throw new Error(`insert at ${c.index} of ${start + this.items.length}`);
          this.items.push(c.item);
          break;
        case "append": {
          const item = this.items[c.index - start];
          if (item.kind === "tool_call") item.output += c.text;
          else item.text += c.text;
          break;
        }
        case "update":
          this.items[c.index - start] = c.item;
          break;
        case "approvals":
          this.pending = c.pending;
          break;
        case "usage":
          this.usage = c.totals;
          break;
      }
    }
  }
}

export class TimelineView {
  /**
   * @param {HTMLElement} viewport
   * @param {{onAnswer: (requestId: string, decision: "allow"|"deny") => void}} actions
   */
  constructor(viewport, actions) {
    this.model = new SessionModel();
    this.actions = actions;
    this.open = new Set(); // indexes of expanded rows (of edit tools: of collapsed ones)
    this.full = new Set(); // indexes of tool calls whose whole output is shown
    this.list = new VirtualList(viewport, (item, index) => this.row(item, index));
  }

  /** The items shown. */
  get items() {
    return this.model.items;
  }

  get usage() {
    return this.model.usage;
  }

  /** Shows a model from the start (what its batches added up to). */
  show(model) {
    this.model = model;
    this.open.clear();
    this.full.clear();
    this.list.clear();
    model.items.forEach((item, index) => this.list.insert(index, item));
  }

  /** Lays out what changed now (call at the end of a batch). */
  flush() {
    this.list.flush();
  }

  /** Shows the changes just applied to the model shown: costs what changed. */
  changed(changes) {
    const start = this.model.start;
    for (const c of changes) {
      const i = c.index - start;
      if (c.op === "insert") this.list.insert(i, this.model.items[i]);
      else if (c.op === "append" || c.op === "update") this.list.update(i, this.model.items[i]);
    }
  }

  /** Shows the `count` items just prepended to the model shown, keeping the scroll position. */
  prepended(count) {
    // Row indexes moved: what was expanded is folded again.
    this.open.clear();
    this.full.clear();
    this.list.prepend(this.model.items.slice(0, count));
  }

  toggle(index) {
    if (this.open.has(index)) this.open.delete(index);
    else this.open.add(index);
    this.list.update(index, this.model.items[index]);
  }

  /** A tool's output: its first lines when long, with a button that shows the rest. */
  output(text, index) {
    const lines = text.split("\n");
    if (lines.length <= OUTPUT_LINES + 5 || this.full.has(index)) return el("pre", "io tool-output", text);
    const box = el("div", "collapsed-output");
    box.append(el("pre", "io tool-output", lines.slice(0, OUTPUT_LINES).join("\n")));
    const more = el("button", "more", `show all ${lines.length} lines`);
    more.onclick = () => {
      this.full.add(index);
      this.list.update(index, this.model.items[index]);
    };
    box.append(more);
    return box;
  }

  row(item, index) {
    const row = el("div", `item item-${item.kind}`);
    row.dataset.kind = item.kind;
    switch (item.kind) {
      case "user_message":
        row.append(el("div", "who", "you"), el("div", "text", item.text));
        break;
      case "assistant_message":
        if (item.discarded) {
          row.classList.add("discarded");
          row.append(el("div", "who", "agent"), el("div", "text muted", "(a partial message was discarded)"));
          break;
        }
        row.append(el("div", "who", "agent"), markdown(item.text));
        if (item.streaming) row.classList.add("streaming");
        break;
      case "reasoning": {
        const head = el("button", "toggle", `${this.open.has(index) ? "▾" : "▸"} reasoning`);
        head.onclick = () => this.toggle(index);
        row.append(head);
        if (this.open.has(index)) {
          const text = markdown(item.text);
          text.classList.add("reasoning-text");
          row.append(text);
        }
        if (item.streaming) row.classList.add("streaming");
        break;
      }
      case "tool_call": {
        // An edit or a write shows its diff unless folded; other tools open on demand.
        const change = fileChange(item);
        const expanded = change ? !this.open.has(index) : this.open.has(index);
        const head = el("button", "toggle");
        head.append(
          el("span", "", `${expanded ? "▾" : "▸"} `),
          el("span", "tool-name", item.tool_name),
          el("span", `badge status-${item.status}`, item.status),
        );
        if (item.title) head.append(el("span", "muted", ` ${item.title}`));
        else if (change?.path) head.append(el("span", "muted", ` ${change.path}`));
        head.onclick = () => this.toggle(index);
        row.append(head);
        if (expanded) {
          if (change) row.append(change.view);
          else row.append(el("div", "label", "input"), el("pre", "io tool-input", json(item.input)));
          if (item.output) row.append(el("div", "label", "output"), this.output(item.output, index));
          if (item.error) row.append(el("div", "label", "error"), el("pre", "io tool-error", item.error));
        }
        break;
      }
      case "todo": {
        row.append(el("div", "who", "todo"));
        const list = el("ul", "todos");
        for (const t of Array.isArray(item.items) ? item.items : []) {
          const li = el("li", `todo-${t.status}`, t.text ?? json(t));
          list.append(li);
        }
        row.append(list);
        break;
      }
      case "error": {
        row.append(el("div", "who", "error"), el("div", "text error-text", item.message));
        const stderr = item.provider_error && item.provider_error.stderr;
        if (stderr) {
          const head = el("button", "toggle", `${this.open.has(index) ? "▾" : "▸"} stderr`);
          head.onclick = () => this.toggle(index);
          row.append(head);
          if (this.open.has(index)) row.append(el("pre", "io stderr", stderr));
        }
        break;
      }
      case "approval": {
        row.append(
          el("div", "who", "approval"),
          el("div", "text", `${item.tool_name} wants to run`),
          el("pre", "io", json(item.input)),
        );
        if (item.status === "pending") {
          const allow = el("button", "allow", "Allow");
          const deny = el("button", "deny", "Deny");
          allow.onclick = () => this.actions.onAnswer(item.request_id, "allow");
          deny.onclick = () => this.actions.onAnswer(item.request_id, "deny");
          row.append(el("div", "buttons"));
          row.lastChild.append(allow, deny);
        } else {
          row.append(el("span", `badge approval-${item.status}`, item.status));
        }
        break;
      }
      default:
        row.append(el("pre", "io", json(item)));
    }
    return row;
  }
}

/** "1 min 30 s", "45 s", "2 h 5 min": how long a turn has been silent. */
export function silence(ms) {
  if (ms < 1000) return `${ms} ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
  return m % 60 ? `${Math.floor(m / 60)} h ${m % 60} min` : `${Math.floor(m / 60)} h`;
}
