// Agent text as people read it: Markdown rendered to DOM nodes, never to HTML. Every piece of
// agent output becomes text nodes (textContent) inside elements this file creates, so no tag,
// attribute or script an agent writes is ever live: `<img onerror=…>` shows as those characters.
// Links keep only http(s) and mailto targets. What is covered is what coding agents write:
// headings, paragraphs, fenced and indented code, lists (nested by indentation), quotes, rules,
// tables, and inline code, bold, italic, strike-through, links.

const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

/** Renders `text` as Markdown into a new element (a `div.md`). */
export function markdown(text) {
  const root = el("div", "md");
  blocks(text.replace(/\r\n?/g, "\n").split("\n"), root);
  return root;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

function blocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) {
      i++;
      continue;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const close = new RegExp(`^ {0,3}${m[1][0]}{${m[1].length},}\\s*$`);
      const body = [];
      for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i]);
      i++; // the closing fence (or the end: an open fence runs to the end, as while streaming)
      const code = el("code", m[2] ? `language-${m[2]}` : "", body.join("\n"));
      const pre = el("pre", "code");
      pre.append(code);
      parent.append(pre);
      continue;
    }
    if ((m = HEADING.exec(line))) {
      parent.append(inline(el(`h${m[1].length}`), m[2]));
      i++;
      continue;
    }
    if (RULE.test(line)) {
      parent.append(el("hr"));
      i++;
      continue;
    }
    if (/^( {4}|\t)/.test(line)) {
      const body = [];
      for (; i < lines.length && (/^( {4}|\t)/.test(lines[i]) || !lines[i].trim()); i++) {
        body.push(lines[i].replace(/^( {4}|\t)/, ""));
      }
      while (body.length && !body.at(-1).trim()) body.pop();
      const pre = el("pre", "code");
      pre.append(el("code", "", body.join("\n")));
      parent.append(pre);
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && (m = QUOTE.exec(lines[i])); i++) body.push(m[1]);
      const quote = el("blockquote");
      blocks(body, quote);
      parent.append(quote);
      continue;
    }
    if (ITEM.test(line)) {
      i = list(lines, i, parent);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
      i = table(lines, i, parent);
      continue;
    }
    const para = [];
    for (; i < lines.length && lines[i].trim() && !startsBlock(lines, i); i++) para.push(lines[i].trim());
    if (para.length === 0) para.push(lines[i++].trim());
    const p = el("p");
    para.forEach((text, k) => {
      if (k > 0) p.append(document.createTextNode(" "));
      inline(p, text);
    });
    parent.append(p);
  }
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line) ||
    (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]));
}

/** A list from line `i`; items indented deeper than the first belong to the item above. */
function list(lines, i, parent) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const body = [m[3]];
    for (i++; i < lines.length; i++) {
      const next = lines[i];
      if (!next.trim()) {
        if (i + 1 < lines.length && leading(lines[i + 1]) > indent) continue;
        break;
      }
      const sub = ITEM.exec(next);
      if (sub && sub[1].length <= indent) break;
      if (!sub && leading(next) <= indent && startsBlock(lines, i)) break;
      body.push(next.slice(Math.min(leading(next), indent + 2)));
    }
    const li = el("li");
    if (body.length === 1) inline(li, body[0]);
    else blocks(body, li);
    // A single paragraph inside an item reads as the item itself.
    if (li.childNodes.length === 1 && li.firstChild.tagName === "P") li.replaceChildren(...li.firstChild.childNodes);
    node.append(li);
  }
  parent.append(node);
  return i;
}

const leading = (line) => line.length - line.trimStart().length;

function table(lines, i, parent) {
  const cells = (line) => line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  const head = cells(lines[i]);
  const align = cells(lines[i + 1]).map((c) => (c.endsWith(":") ? (c.startsWith(":") ? "center" : "right") : ""));
  const t = el("table");
  const tr = el("tr");
  head.forEach((c, k) => {
    const th = inline(el("th"), c);
    if (align[k]) th.style.textAlign = align[k];
    tr.append(th);
  });
  t.append(el("thead"));
  t.firstChild.append(tr);
  const body = el("tbody");
  for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim(); i++) {
    const row = el("tr");
    cells(lines[i]).forEach((c, k) => {
      const td = inline(el("td"), c);
      if (align[k]) td.style.textAlign = align[k];
      row.append(td);
    });
    body.append(row);
  }
  t.append(body);
  const wrap = el("div", "table");
  wrap.append(t);
  parent.append(wrap);
  return i;
}

// Inline spans, longest first: code (its content is literal), links, bold, strike, italic.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__|~~(?=\S)([\s\S]*?\S)~~|(?<![\w*])\*(?=[^\s*])([\s\S]*?[^\s*])\*(?![\w*])|(?<![\w_])_(?=[^\s_])([\s\S]*?[^\s_])_(?![\w_])|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/g;

/** Appends `text` with its inline Markdown to `node`; returns `node`. */
function inline(node, text) {
  let at = 0;
  INLINE.lastIndex = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > at) node.append(document.createTextNode(text.slice(at, m.index)));
    at = m.index + m[0].length;
    if (m[2] !== undefined) {
      node.append(el("code", "", m[2].replace(/^ (.*) $/, "$1")));
    } else if (m[3] !== undefined) {
      node.append(link(m[4], m[3]));
    } else if (m[5] !== undefined || m[6] !== undefined) {
      node.append(inline(el("strong"), m[5] ?? m[6]));
    } else if (m[7] !== undefined) {
      node.append(inline(el("del"), m[7]));
    } else if (m[8] !== undefined || m[9] !== undefined) {
      node.append(inline(el("em"), m[8] ?? m[9]));
    } else {
      node.append(link(m[10], m[10]));
    }
  }
  if (at < text.length) node.append(document.createTextNode(text.slice(at)));
  return node;
}

/** A link to an http(s) or mailto URL; anything else (javascript:, data:, relative) is text. */
function link(url, label) {
  if (!SAFE_URL.test(url)) return document.createTextNode(label === url ? url : `${label} (${url})`);
  const a = el("a", "", label);
  a.href = url;
  a.target = "_blank";
  a.rel = "noopener noreferrer nofollow";
  return a;
}
