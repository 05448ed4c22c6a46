// A virtualized list for long timelines: only the rows in (or near) the viewport exist in
// the DOM. Rows have variable heights: each is measured once rendered, unmeasured rows count
// at an estimate, and a Fenwick tree keeps the prefix sums so that finding the row at a
// scroll offset and the offset of a row are O(log n), however long the session. Appending,
// updating a row, and scrolling never touch more than the visible rows.

class Fenwick {
  constructor() {
    this.tree = [0];
    this.values = [];
  }
  get length() {
    return this.values.length;
  }
  push(value) {
    this.values.push(0);
    this.tree.push(0);
    const n = this.values.length;
    // Rebuild the new node from its children: tree[n] covers (n - lowbit(n), n].
    let sum = 0;
    for (let i = n - 1; i > n - (n & -n); i -= i & -i) sum += this.tree[i];
    this.tree[n] = sum;
    this.set(n - 1, value);
  }
  set(index, value) {
    const delta = value - this.values[index];
    if (delta === 0) return;
    this.values[index] = value;
    for (let i = index + 1; i < this.tree.length; i += i & -i) this.tree[i] += delta;
  }
  /** Sum of values[0..index). */
  prefix(index) {
    let sum = 0;
    for (let i = index; i > 0; i -= i & -i) sum += this.tree[i];
    return sum;
  }
  total() {
    return this.prefix(this.values.length);
  }
  /** The largest index whose prefix sum is <= offset. */
  find(offset) {
    let pos = 0;
    let bit = 1;
    while (bit * 2 < this.tree.length) bit *= 2;
    for (; bit > 0; bit >>= 1) {
      const next = pos + bit;
      if (next < this.tree.length && this.tree[next] <= offset) {
        pos = next;
        offset -= this.tree[next];
      }
    }
    return Math.min(pos, this.values.length - 1);
  }
}

export class VirtualList {
  /**
   * @param {HTMLElement} viewport a scrollable element
   * @param {(item: any, index: number) => HTMLElement} render builds one row
   * @param {{estimate?: number, overscan?: number}} options
   */
  constructor(viewport, render, { estimate = 64, overscan = 600 } = {}) {
    this.viewport = viewport;
    this.render = render;
    this.estimate = estimate;
    this.overscan = overscan;
    this.items = [];
    this.heights = new Fenwick();
    this.measured = [];
    this.rows = new Map(); // index -> element
    this.spacer = document.createElement("div");
    this.spacer.className = "vl-spacer";
    this.spacer.style.position = "relative";
    viewport.replaceChildren(this.spacer);
    this.stickToBottom = true;
    this.frame = null; // the animation frame requested for the next layout
    viewport.addEventListener("scroll", () => {
      const { scrollTop, scrollHeight, clientHeight } = viewport;
      this.stickToBottom = scrollHeight - scrollTop - clientHeight < 40;
      this.schedule();
    });
    new ResizeObserver(() => this.schedule()).observe(viewport);
  }

  get length() {
    return this.items.length;
  }

  clear() {
    this.items = [];
    this.heights = new Fenwick();
    this.measured = [];
    for (const el of this.rows.values()) el.remove();
    this.rows.clear();
    this.stickToBottom = true;
    this.schedule();
  }

  insert(index, item) {
    if (index !== this.items.length) throw new Error(`insert at ${index} of ${this.items.length}: items are only appended`);
    this.items.push(item);
    this.heights.push(this.estimate);
    this.measured.push(false);
    this.schedule();
  }

  /** Puts `items` before the first row (older items paged in), keeping what is on screen
   * where it is: the scroll offset grows by their estimated height. */
  prepend(items) {
    const n = items.length;
    if (n === 0) return;
    const heights = new Fenwick();
    for (let i = 0; i < n; i++) heights.push(this.estimate);
    for (let i = 0; i < this.items.length; i++) heights.push(this.heights.values[i]);
    this.items = items.concat(this.items);
    this.measured = new Array(n).fill(false).concat(this.measured);
    this.heights = heights;
    for (const el of this.rows.values()) el.remove();
    this.rows.clear();
    this.stickToBottom = false;
    this.viewport.scrollTop += n * this.estimate;
    this.schedule();
  }

  update(index, item) {
    this.items[index] = item;
    const row = this.rows.get(index);
    if (row) {
      // Replaced in place, never removed until the next layout: a row that streams must not
      // vanish for a frame on each change.
      const fresh = this.place(index);
      fresh.style.top = row.style.top;
      row.replaceWith(fresh);
      this.rows.set(index, fresh);
    }
    this.measured[index] = false;
    this.schedule();
  }

  schedule() {
    if (this.frame !== null) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      this.layout();
    });
  }

  /** Lays out now, e.g. at the end of a batch (already in an animation frame), so that the
   * changes show in this frame, not the next. */
  flush() {
    if (this.frame === null) return;
    cancelAnimationFrame(this.frame);
    this.frame = null;
    this.layout();
  }

  /** Builds row `index`, positioned but not yet placed in the list. */
  place(index) {
    const el = this.render(this.items[index], index);
    el.style.position = "absolute";
    el.style.left = "0";
    el.style.right = "0";
    el.dataset.index = String(index);
    return el;
  }

  layout() {
    const n = this.items.length;
    const viewport = this.viewport;
    if (n === 0) {
      this.spacer.style.height = "0px";
      return;
    }
    if (this.stickToBottom) viewport.scrollTop = this.heights.total();
    const top = Math.max(0, viewport.scrollTop - this.overscan);
    const bottom = viewport.scrollTop + viewport.clientHeight + this.overscan;
    const first = this.heights.find(top);
    let last = first;
    while (last < n - 1 && this.heights.prefix(last + 1) < bottom) last++;
    for (const [index, el] of this.rows) {
      if (index < first || index > last) {
        el.remove();
        this.rows.delete(index);
      }
    }
    for (let i = first; i <= last; i++) {
      let el = this.rows.get(i);
      if (!el) {
        el = this.place(i);
        this.spacer.appendChild(el);
        this.rows.set(i, el);
      }
      if (!this.measured[i]) {
        this.heights.set(i, el.offsetHeight || this.estimate);
        this.measured[i] = true;
      }
    }
    for (let i = first; i <= last; i++) this.rows.get(i).style.top = `${this.heights.prefix(i)}px`;
    this.spacer.style.height = `${this.heights.total()}px`;
    if (this.stickToBottom) viewport.scrollTop = this.heights.total();
  }
}
