"""The dashboard's style sheet and script, served from its own path (no build step, no CDN).

Served as files rather than inline, so the pages' Content-Security-Policy can forbid every
inline script and style. The script does two things, and the pages work without it: it swaps
in each live part the server pushes (``EventSource``), keeping open what the operator opened,
and keeps relative times ("12 s left") current between pushes.
"""

from __future__ import annotations

from typing import Final

__all__ = ["SCRIPT", "STYLE"]

STYLE: Final = """
:root {
  --bg: #ffffff; --fg: #1c1e21; --soft: #5f6670; --line: #d9dde3; --panel: #f4f6f8;
  --accent: #2f6fdf; --bad: #c62828; --warn: #b26a00; --ok: #2e7d32; --paused: #6a4fb3;
  --lane-a: #ffffff; --lane-b: #f6f6f6;
  color-scheme: light dark;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #15171a; --fg: #e6e8eb; --soft: #9aa3ad; --line: #2c3036; --panel: #1d2024;
    --accent: #7aa7ff; --bad: #ff6b6b; --warn: #ffb74d; --ok: #81c784; --paused: #b39ddb;
    --lane-a: #15171a; --lane-b: #1d2024;
  }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header { display: flex; flex-wrap: wrap; gap: .5rem 1.5rem; align-items: center;
  padding: .6rem 1.2rem; border-bottom: 1px solid var(--line); background: var(--panel); }
.brand { font-weight: 700; color: var(--fg); text-decoration: none; }
nav { display: flex; gap: 1rem; }
nav a { color: var(--soft); text-decoration: none; padding: .2rem 0; }
nav a[aria-current=page] { color: var(--fg); border-bottom: 2px solid var(--accent); }
.who { margin: 0 0 0 auto; display: flex; gap: .8rem; align-items: center; color: var(--soft); }
.who form { margin: 0; }
main { padding: 1rem 1.2rem 3rem; max-width: 1400px; }
h1 { font-size: 1.35rem; margin: .4rem 0 .8rem; }
h2 { font-size: 1.1rem; margin: 1.6rem 0 .6rem; }
code { font: .9em/1.3 ui-monospace, SFMono-Regular, Menlo, monospace; overflow-wrap: anywhere; }
a { color: var(--accent); }
.store, .status, .counts, .note { color: var(--soft); margin: .2rem 0; }
#conn { font-size: .85em; margin-left: .5rem; }
#conn.live::before { content: "\\25cf "; color: var(--ok); }
.error { color: var(--bad); font-weight: 600; margin: .4rem 0; }
.flash { background: var(--panel); border-left: 4px solid var(--accent); padding: .5rem .8rem; }
.empty { border: 1px dashed var(--line); border-radius: 8px; padding: .8rem 1.2rem;
  max-width: 52rem; }
table { border-collapse: collapse; width: 100%; margin: .6rem 0; }
th, td { text-align: left; padding: .45rem .6rem; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { color: var(--soft); font-weight: 600; font-size: .9em; }
td.num { font-variant-numeric: tabular-nums; }
.abs { color: var(--soft); font-size: .85em; white-space: nowrap; }
.actions { white-space: nowrap; text-align: right; }
.button, button { display: inline-block; font: inherit; cursor: pointer; border-radius: 6px;
  border: 1px solid var(--line); background: var(--panel); color: var(--fg);
  padding: .35rem .8rem;
  text-decoration: none; margin: .1rem; }
.button.small, button.small { padding: .15rem .55rem; font-size: .9em; }
.danger { border-color: var(--bad); color: var(--bad); }
button.danger { background: var(--bad); color: #fff; }
button.link { border: 0; background: none; color: var(--accent); padding: 0; }
.tag { display: inline-block; border-radius: 4px; padding: 0 .35rem; font-size: .85em;
  font-weight: 600; border: 1px solid currentColor; }
.tag.ok { color: var(--ok); } .tag.bad { color: var(--bad); } .tag.warn { color: var(--warn); }
.tag.paused { color: var(--paused); }
.outcome.ok { color: var(--ok); } .outcome.error, .outcome.lost { color: var(--bad); }
.outcome.cancelled { color: var(--warn); }
details summary { color: var(--soft); cursor: pointer; font-size: .9em; }
details ul { margin: .3rem 0; padding-left: 1.1rem; }
.pauses li { margin: .3rem 0; }
form.stack { display: grid; gap: .8rem; max-width: 28rem; }
form.stack label { display: grid; gap: .25rem; }
form.inline, form.filter { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end;
  margin: .6rem 0; }
input { font: inherit; padding: .35rem .5rem; border-radius: 6px; border: 1px solid var(--line);
  background: var(--bg); color: var(--fg); }
.confirm { max-width: 44rem; }
.buttons { display: flex; gap: .6rem; }
.timeline { overflow-x: auto; border: 1px solid var(--line); border-radius: 8px; }
.timeline svg { width: 100%; min-width: 640px; height: auto; display: block; }
.timeline svg g.lane:nth-of-type(odd) > rect:first-child { fill: var(--lane-a); }
.timeline svg g.lane:nth-of-type(even) > rect:first-child { fill: var(--lane-b); }
.timeline svg text:not(.token):not(.mark):not(.legend-expired) { fill: var(--fg); }
.timeline svg line.tick { stroke: var(--line); }
@media (max-width: 700px) {
  header { padding: .5rem .8rem; } main { padding: .8rem; }
  table, thead, tbody, tr, td { display: block; width: 100%; }
  thead { display: none; }
  tr { border: 1px solid var(--line); border-radius: 8px; margin: .6rem 0; padding: .3rem .6rem; }
  td { border: 0; padding: .2rem 0; }
  td[data-label]::before { content: attr(data-label); display: block; color: var(--soft);
    font-size: .8em; }
  .actions { text-align: left; }
}
"""

SCRIPT: Final = """
"use strict";
(() => {
  const units = [[86400, " days", 1], [3600, " h", 1], [60, " min", 0]];
  function relative(atMs, kind) {
    let s = (kind === "left" ? atMs - Date.now() : Date.now() - atMs) / 1000;
    if (kind === "left" && s <= 0) return "expiring";
    s = Math.max(s, 0);
    for (const [size, name, digits] of units) {
      if (s >= size) return (s / size).toFixed(digits) + name + " " + kind;
    }
    return (s < 10 && kind === "left" ? s.toFixed(1) : s.toFixed(0)) + " s " + kind;
  }
  function tick() {
    for (const time of document.querySelectorAll("time[data-at]")) {
      time.textContent = relative(Number(time.dataset.at), time.dataset.kind);
    }
  }
  setInterval(tick, 1000);
  const live = document.getElementById("live");
  const conn = document.getElementById("conn");
  if (!live || !live.dataset.stream || !window.EventSource) return;
  const source = new EventSource(live.dataset.stream);
  source.addEventListener("part", (event) => {
    const part = JSON.parse(event.data);
    // what the operator opened stays open when the part is drawn again
    const opened = new Set([...live.querySelectorAll("details[open]")]
      .map((d) => d.closest("[data-job]")?.dataset.job));
    live.innerHTML = part.html;
    for (const row of live.querySelectorAll("[data-job]")) {
      if (opened.has(row.dataset.job)) row.querySelector("details")?.setAttribute("open", "");
    }
    live.dataset.version = String(part.version);
    live.dataset.updated = String(Date.now());
    tick();
  });
  function say(text, name) {
    if (conn) { conn.textContent = text; conn.className = name; }
  }
  source.addEventListener("open", () => say("live", "live"));
  source.addEventListener("error", () => say("reconnecting…", ""));
})();
"""
