"use strict";
// amaris report viewer. Everything from the run is data: it is only ever put into the page as text
// (textContent, attribute values, SVG <title>), never parsed as HTML. The data is embedded gzip+base64
// and decoded here with DecompressionStream; nothing is fetched.
(function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  const PAGE = 50;
  const SEVERITY = ["none", "low", "medium", "high"];
  let D = null;                 // the overview
  const blocks = new Map();     // step -> Promise of its rollout block
  const rubricByKey = new Map();

  // --- building DOM from data, safely ------------------------------------------------------
  function put(el, attrs, kids) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.setAttribute("class", v);
      else if (k === "style") Object.assign(el.style, v);
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "href") { if (!String(v).startsWith("#")) throw new Error("internal links only"); el.setAttribute("href", v); }
      else el.setAttribute(k, String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  const h = (tag, attrs, ...kids) => put(document.createElement(tag), attrs, kids);
  const s = (tag, attrs, ...kids) => put(document.createElementNS(SVGNS, tag), attrs, kids);
  const link = (href, ...kids) => h("a", { href }, ...kids);
  // Half up on the decimal value as written (0.3125 -> 0.313, 0.125 -> 13%): the rule of amaris_cli/figures.py,
  // so the page shows the digits `amaris inspect` shows (toFixed rounds the binary value: 1.005 -> 1.00).
  const halfUp = (x, d, shift = 0) => {
    const text = String(Number(x));
    if (/e/i.test(text)) return (Number(x) * 10 ** shift).toFixed(d);
    const neg = text.startsWith("-");
    let [whole, frac = ""] = (neg ? text.slice(1) : text).split(".");
    whole += frac.slice(0, shift).padEnd(shift, "0");  // x 10^shift on the digits, not in binary
    frac = frac.slice(shift);
    const digits = (whole + frac.padEnd(d + 1, "0").slice(0, d + 1)).split("").map(Number);
    const up = digits.pop() >= 5;
    for (let i = digits.length - 1; up && i >= 0; i--) {
      if (digits[i] === 9) digits[i] = 0; else { digits[i] += 1; break; }
      if (i === 0) digits.unshift(1);
    }
    const all = digits.join("");
    const cut = all.length - d;
    const int = all.slice(0, cut).replace(/^0+(?=\d)/, "") || "0";
    const out = d > 0 ? `${int}.${all.slice(cut)}` : int;
    return (neg && /[1-9]/.test(out) ? "-" : "") + out;
  };
  const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : halfUp(x, d));
  const pct = (x) => (x === null || x === undefined ? "-" : halfUp(x, 0, 2) + "%");
  const q = (params) => { const u = new URLSearchParams(); for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) u.set(k, v); const t = u.toString(); return t ? "?" + t : ""; };
  const stepHref = (step, params) => "#/step/" + step + q(params || {});
  const rubricHref = (v, inst) => "#/rubric/" + v + q({ inst: inst ?? "" });
  const updateHref = (step) => "#/update/" + step;
  const meter = (x, color) => h("span", { class: "meterbox" }, h("span", { class: "meter", style: { width: Math.round(Math.max(0, Math.min(1, x ?? 0)) * 100) + "%", background: color } }));
  const kindLabel = (kind) => (kind === "pitfall" ? "pitfall" : "reward");
  const rateLabel = (kind) => (kind === "pitfall" ? "prevalence" : "pass rate");
  // "1 step", "2 steps"; `many` when the plural is not one + "s"
  const count = (n, one, many) => `${n} ${n === 1 ? one : many || one + "s"}`;

  async function decode(el) {
    const bin = atob(el.textContent.trim());
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }
  function block(step) {
    if (!blocks.has(step)) {
      const el = document.querySelector('script.amaris-step[data-step="' + Number(step) + '"]');
      blocks.set(step, el ? decode(el) : Promise.resolve(null));
    }
    return blocks.get(step);
  }

  // --- rubric lookups -----------------------------------------------------------------------
  function rubric(version, inst) {
    return rubricByKey.get((inst ?? "") + "|" + version) || rubricByKey.get("|" + version) || null;
  }
  function criterionInfo(id, version, inst) {
    const r = rubric(version, inst);
    const c = r && r.criteria.find((x) => x.id === id);
    if (c) return c;
    for (let i = D.rubrics.length - 1; i >= 0; i--) {  // a criterion no longer in that version: its latest text
      const found = D.rubrics[i].criteria.find((x) => x.id === id);
      if (found) return found;
    }
    return { id, text: id, kind: "reward", weight: null, anchor: false };
  }
  function latestCriterion(id) {
    for (let i = D.rubrics.length - 1; i >= 0; i--) {
      const found = D.rubrics[i].criteria.find((x) => x.id === id);
      if (found) return found;
    }
    return { id, text: id, kind: "reward", weight: null, anchor: false };
  }

  // --- charts -------------------------------------------------------------------------------
  function scale(d0, d1, r0, r1) { return (x) => (d1 === d0 ? (r0 + r1) / 2 : r0 + ((x - d0) / (d1 - d0)) * (r1 - r0)); }
  function ticks(steps, max) {
    if (steps.length <= max) return steps;
    const every = Math.ceil(steps.length / max);
    return steps.filter((_, i) => i % every === 0);
  }
  function frame(width, height, pad, steps, yLabel) {
    const x = scale(steps[0] ?? 0, steps[steps.length - 1] ?? 1, pad.l, width - pad.r);
    const y = scale(0, 1, height - pad.b, pad.t);
    const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img" });
    for (const v of [0, 0.25, 0.5, 0.75, 1]) {
      svg.appendChild(s("line", { x1: pad.l, x2: width - pad.r, y1: y(v), y2: y(v), stroke: v === 0 || v === 1 ? "#afb8c1" : "#eaeef2" }));
      svg.appendChild(s("text", { x: pad.l - 4, y: y(v) + 4, "text-anchor": "end" }, String(v)));
    }
    for (const st of ticks(steps, 12)) svg.appendChild(s("text", { x: x(st), y: height - pad.b + 14, "text-anchor": "middle" }, String(st)));
    if (yLabel) svg.appendChild(s("text", { x: 12, y: pad.t + (height - pad.t - pad.b) / 2, transform: `rotate(-90 12 ${pad.t + (height - pad.t - pad.b) / 2})`, "text-anchor": "middle" }, yLabel));
    svg.appendChild(s("text", { x: (pad.l + width - pad.r) / 2, y: height - 2, "text-anchor": "middle" }, "step"));
    return { svg, x, y };
  }
  // The step axis of the charts by step: the steps and those the trainer's validation names (so the charts line up).
  function axisSteps() {
    return [...new Set(D.steps.map((st) => st.step).concat((D.validation || []).map((v) => v.step)))].sort((a, b) => a - b);
  }
  // The runs of consecutive entries that have a mean: an entry without one (every rollout of the step failed) is a
  // gap in the line and the band, never a line drawn across it.
  function withMeans(entries) {
    const runs = [[]];
    for (const e of entries) {
      if (e.mean !== null) runs[runs.length - 1].push(e);
      else if (runs[runs.length - 1].length) runs.push([]);
    }
    return runs.filter((r) => r.length);
  }
  function rewardChart() {
    const pts = D.steps.filter((st) => st.mean !== null);
    const checks = (D.validation || []).filter((v) => v.mean !== null);
    const steps = axisSteps();
    const { svg, x, y } = frame(760, 250, { l: 44, r: 12, t: 10, b: 34 }, steps, "reward");
    for (const run of withMeans(D.steps)) {
      const upper = run.map((p) => [x(p.step), y(Math.min(1, p.mean + p.std))]);
      const lower = run.map((p) => [x(p.step), y(Math.max(0, p.mean - p.std))]).reverse();
      const band = run.length === 1
        ? [[upper[0][0] - 6, upper[0][1]], [upper[0][0] + 6, upper[0][1]], [lower[0][0] + 6, lower[0][1]], [lower[0][0] - 6, lower[0][1]]]
        : upper.concat(lower);
      svg.appendChild(s("polygon", { class: "band", points: band.map((p) => p.join(",")).join(" "), fill: "#1f6feb", "fill-opacity": 0.15, stroke: "none" }));
      if (run.length > 1) svg.appendChild(s("polyline", { class: "mean", points: run.map((p) => x(p.step) + "," + y(p.mean)).join(" "), fill: "none", stroke: "#1f6feb", "stroke-width": 2 }));
    }
    if (pts.length) {
      for (const p of pts) {
        const dot = s("circle", { class: "pt", cx: x(p.step), cy: y(p.mean), r: 5, fill: "#1f6feb", stroke: "#fff", "stroke-width": 1.5, onclick: () => go(stepHref(p.step)) },
          s("title", {}, `step ${p.step}: mean ${fmt(p.mean)}, sd ${fmt(p.std)}, ${p.scored} scored with rubric v${p.versions.join(", v")}`));
        svg.appendChild(dot);
      }
    }
    if (checks.length) {  // a trainer's evaluation (serve's /validate), judged in no step
      for (const run of withMeans(D.validation)) {
        svg.appendChild(s("polyline", { class: "validation", points: run.map((v) => x(v.step) + "," + y(v.mean)).join(" "), fill: "none", stroke: "#8250df", "stroke-width": 2, "stroke-dasharray": "6 4" }));
      }
      for (const v of checks) {
        svg.appendChild(s("rect", { class: "validation-pt", x: x(v.step) - 4, y: y(v.mean) - 4, width: 8, height: 8, fill: "#8250df" },
          s("title", {}, `step ${v.step}, validation: mean ${fmt(v.mean)}, sd ${fmt(v.std)}, ${v.scored} scored, ${v.failed} failed, with rubric v${v.versions.join(", v")}`)));
      }
    }
    const validationNote = checks.length ? " Dashed line, squares: mean reward of the trainer's validation rollouts (POST /validate), judged with the step's rubric version but in no step." : "";
    return h("div", {}, svg, h("div", { class: "legend" }, "Line: mean reward of the step's scored rollouts (a gap at a step none of whose rollouts could be scored). Band: ± one standard deviation, clipped to [0, 1]. Click a point to open the step." + validationNote));
  }
  function criteriaPanels() {
    const steps = axisSteps();
    const series = new Map();  // id -> Map(step -> rate)
    for (const st of D.steps) for (const c of st.criteria) {
      if (!series.has(c.id)) series.set(c.id, new Map());
      series.get(c.id).set(st.step, c);
    }
    const groups = { reward: [], pitfall: [] };
    for (const [id, points] of series) {
      const info = latestCriterion(id);
      groups[info.kind === "pitfall" ? "pitfall" : "reward"].push([id, info, points]);
    }
    const out = [];
    for (const kind of ["reward", "pitfall"]) {
      if (!groups[kind].length) continue;
      out.push(h("h3", {}, kind === "reward"
        ? "Reward criteria: pass rate (mean verdict; higher = better)"
        : "Pitfalls: prevalence (mean verdict, how much of the step shows it; higher = worse)"));
      const grid = h("div", { class: "charts" });
      for (const [id, info, points] of groups[kind]) {
        const color = kind === "pitfall" ? "#cf222e" : "#1f6feb";
        const { svg, x, y } = frame(280, 130, { l: 30, r: 8, t: 8, b: 30 }, steps, null);
        const xs = steps.filter((st) => points.has(st));
        // one polyline per run of consecutive steps in which the criterion was scored
        let run = [];
        const flush = () => { if (run.length > 1) svg.appendChild(s("polyline", { points: run.join(" "), fill: "none", stroke: color, "stroke-width": 2 })); run = []; };
        for (const st of steps) { if (points.has(st)) run.push(x(st) + "," + y(points.get(st).mean)); else flush(); }
        flush();
        for (const st of xs) {
          const c = points.get(st);
          const filter = kind === "pitfall" ? { crit: id, verdict: "high" } : { crit: id, verdict: "low" };
          svg.appendChild(s("circle", { class: "pt", cx: x(st), cy: y(c.mean), r: 4, fill: color, onclick: () => go(stepHref(st, filter)) },
            s("title", {}, `step ${st}: ${rateLabel(kind)} ${fmt(c.mean, 2)} over ${c.n} rollouts; click for the rollouts where it is ${kind === "pitfall" ? "present" : "not met"}`)));
        }
        grid.appendChild(h("div", { class: "panel " + kind, "data-criterion": id },
          h("div", { class: "title", title: info.text }, info.text),
          h("div", { class: "sub" }, id, info.anchor ? " · anchor" : "", info.weight !== null ? " · weight " + info.weight : ""),
          svg));
      }
      out.push(grid);
    }
    if (!out.length) out.push(h("p", { class: "note" }, "No scored rollouts yet."));
    out.push(h("div", { class: "legend" }, "One panel per criterion, so equal values never hide each other. A gap means the criterion was not in the rubric that scored those steps. Click a point for the rollouts behind it."));
    return out;
  }
  function rubricChart(inst) {
    const versions = D.rubrics.filter((r) => (r.instance ?? null) === (inst ?? null));
    if (!versions.length) return h("p", { class: "note" }, "No rubric versions.");
    const width = 760, height = 220, pad = { l: 44, r: 12, t: 24, b: 34 };
    const maxN = Math.max(...versions.map((r) => r.criteria.length), 1);
    const bw = Math.min(46, (width - pad.l - pad.r) / versions.length * 0.7);
    const x = scale(0, versions.length - 1, pad.l + bw, width - pad.r - bw);
    const y = scale(0, maxN, height - pad.b, pad.t);
    const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img" });
    for (let n = 0; n <= maxN; n += Math.max(1, Math.ceil(maxN / 5))) {
      svg.appendChild(s("line", { x1: pad.l, x2: width - pad.r, y1: y(n), y2: y(n), stroke: "#eaeef2" }));
      svg.appendChild(s("text", { x: pad.l - 4, y: y(n) + 4, "text-anchor": "end" }, String(n)));
    }
    versions.forEach((r, i) => {
      const rewards = r.criteria.filter((c) => c.kind !== "pitfall").length;
      const pitfalls = r.criteria.length - rewards;
      const cx = x(i);
      const open = () => go(rubricHref(r.version, r.instance));
      svg.appendChild(s("rect", { class: "bar", x: cx - bw / 2, y: y(rewards), width: bw, height: y(0) - y(rewards), fill: "#1f6feb", onclick: open },
        s("title", {}, `v${r.version}: ${rewards} reward criteria`)));
      svg.appendChild(s("rect", { class: "bar", x: cx - bw / 2, y: y(rewards + pitfalls), width: bw, height: y(rewards) - y(rewards + pitfalls), fill: "#cf222e", onclick: open },
        s("title", {}, `v${r.version}: ${pitfalls} pitfalls`)));
      svg.appendChild(s("text", { x: cx, y: height - pad.b + 14, "text-anchor": "middle" }, "v" + r.version));
      if (r.diff) {
        const label = `+${r.diff.added.length} −${r.diff.removed.length} ~${new Set(r.diff.changed.map((c) => c.id)).size}`;
        svg.appendChild(s("text", { x: cx, y: y(rewards + pitfalls) - 5, "text-anchor": "middle" }, label));
      }
    });
    svg.appendChild(s("text", { x: (pad.l + width - pad.r) / 2, y: height - 2, "text-anchor": "middle" }, "rubric version (version v is written by the update of step v−1)"));
    return h("div", {}, svg, h("div", { class: "legend" }, "Bars: criteria in each version, reward criteria (blue) below pitfalls (red). Above each bar: criteria added (+), removed (−) and changed (~) since the previous version. Click a bar to open the version."));
  }
  function hackingHeat() {
    const total = new Map();
    for (const st of D.steps) for (const p of st.hacking) total.set(p.pattern, (total.get(p.pattern) || 0) + p.count);
    if (!total.size) return h("p", { class: "note" }, D.steps.some((st) => st.summarized) ? "No reward-hacking pattern was named in any step." : "No step is summarized yet (hacking counts come from `amaris summarize`).");
    const patterns = [...total.keys()].sort((a, b) => total.get(b) - total.get(a) || a.localeCompare(b));
    const table = h("table", { class: "heat" }, h("tr", {}, h("th", {}, "pattern"), D.steps.map((st) => h("th", { class: "num" }, "step " + st.step))));
    for (const pattern of patterns) {
      const row = h("tr", {}, h("td", {}, pattern));
      for (const st of D.steps) {
        const p = st.hacking.find((x) => x.pattern === pattern);
        const share = p ? p.prevalence : 0;
        const cell = h("td", { class: "cell", title: p ? `step ${st.step}: ${p.count} of ${st.analyzed} analyzed rollouts` : `step ${st.step}: none`, onclick: () => go(stepHref(st.step, { pattern })) },
          st.summarized && st.analyzed > 0 ? (p ? pct(share) : "·") : "n/a");  // a share of no analyzed rollout is none
        cell.style.background = p ? `rgba(207,34,46,${(0.08 + 0.8 * share).toFixed(3)})` : "";
        if (share > 0.45) cell.style.color = "#fff";
        row.appendChild(cell);
      }
      table.appendChild(row);
    }
    return h("div", {}, table, h("div", { class: "legend" }, "Share of each step's analyzed rollouts in which the analyzer named the pattern (counted by amaris). Click a cell for those rollouts."));
  }

  // --- views --------------------------------------------------------------------------------
  function usageLine() {
    const m = D.usage.reduce((a, u) => ({ calls: a.calls + u.model_calls, pin: a.pin + u.prompt_tokens, pout: a.pout + u.completion_tokens, rec: a.rec + u.recorded_calls, cost: a.cost + u.cost }), { calls: 0, pin: 0, pout: 0, rec: 0, cost: 0 });
    const parts = [`${count(m.calls, "call")} sent to a model (${m.pin} prompt and ${m.pout} completion tokens`];
    parts[0] += D.priced ? `, $${fmt(Math.round(m.cost * 1e6) / 1e6, 4)})` : ")";  // inspect's shown_cost
    if (m.rec) parts.push(`${m.rec} answered from a record (no tokens spent)`);
    return parts.join("; ");
  }
  function staleNote(st) {  // inspect's "stale": these figures are not what amaris wrote
    return `${st.stale.join(", ")}: edited since written, or made from a file that changed since; the figures shown are read from the files as they are now. Run the stage that writes them again (inspect --step ${st.step} says which).`;
  }
  function stepsTable() {
    const table = h("table", { id: "steps-table" }, h("tr", {}, ["step", "rubric", "rollouts", "failed", "analyzed", "mean reward", "sd", "update", "edits", "most frequent hacking"].map((c, i) => h("th", { class: i >= 2 && i <= 6 ? "num" : "" }, c))));
    for (const st of D.steps) {
      const ups = D.updates.filter((u) => u.update.step === st.step);
      const applied = ups.flatMap((u) => u.update.applied);
      const ops = (op) => applied.filter((m) => m.op === op).length;
      const top = st.hacking[0];
      table.appendChild(h("tr", { class: "click", onclick: () => go(stepHref(st.step)) },
        h("td", {}, link(stepHref(st.step), "step " + st.step), st.stale.length ? [" ", h("span", { class: "badge failed", title: staleNote(st) }, "stale")] : null),
        h("td", {}, st.versions.map((v) => "v" + v).join(", ") || "-"),
        h("td", { class: "num" }, st.n), h("td", { class: "num" }, st.failed), h("td", { class: "num" }, st.analyzed),
        h("td", { class: "num" }, fmt(st.mean)), h("td", { class: "num" }, fmt(st.std, 2)),
        h("td", {}, ups.length ? ups.map((u) => h("span", { class: "badge strategy" }, u.update.strategy)) : "-"),
        h("td", {}, ups.length ? `+${ops("add")} −${ops("remove")} ~${applied.length - ops("add") - ops("remove")}` : "-"),
        h("td", {}, top ? `${top.pattern} ${pct(top.prevalence)}` : "-")));
    }
    return table;
  }
  function usageTable() {
    const table = h("table", {}, h("tr", {}, ["agent", "model calls", "prompt tokens", "completion tokens", "answered from a record", D.priced ? "cost $" : null].filter(Boolean).map((c, i) => h("th", { class: i ? "num" : "" }, c))));
    for (const u of D.usage) table.appendChild(h("tr", {}, h("td", {}, u.agent), h("td", { class: "num" }, u.model_calls), h("td", { class: "num" }, u.prompt_tokens), h("td", { class: "num" }, u.completion_tokens), h("td", { class: "num" }, u.recorded_calls), D.priced ? h("td", { class: "num" }, fmt(u.cost, 4)) : null));
    return table;
  }
  function alarmsBlock() {
    const checked = D.alarm_checks.length ? D.alarm_checks.join(" and ") : "nothing yet (no verifiable reward, no step analyzed)";
    if (!D.alarms.length) return h("p", { class: "note", id: "alarms" }, `Hacking-onset alarms: none (checked: ${checked}).`);
    const table = h("table", { id: "alarms" }, h("tr", {}, ["step", "kind", "reason"].map((c) => h("th", {}, c))));
    for (const a of D.alarms) table.appendChild(h("tr", { class: "click", onclick: () => go(stepHref(a.step, a.pattern ? { pattern: a.pattern } : {})) },
      h("td", {}, link(stepHref(a.step), "step " + a.step)), h("td", {}, a.kind + (a.pattern ? ` (${a.pattern})` : "")), h("td", {}, a.reason)));
    return [h("h2", {}, `Hacking-onset alarms (${D.alarms.length})`), table,
      h("div", { class: "legend" }, "An alarm reports, it changes no reward: the judge rewarding rollouts the verifiable reward fails more than before, or a hacking pattern the analyzer names growing. Checked: " + checked + ".")];
  }
  function overviewView() {
    const lineages = [...new Set(D.rubrics.map((r) => r.instance ?? null))];
    return [
      h("p", { class: "note" }, "Rewards of steps scored with different rubric versions are not directly comparable: a stricter rubric lowers the reward of the same behaviour. Click any point, bar, cell or row to open what is behind it."),
      alarmsBlock(),
      h("h2", {}, "Reward per step"), rewardChart(),
      h("h2", {}, "Criteria over steps"), criteriaPanels(),
      h("h2", {}, "Rubric size and edits"),
      lineages.slice(0, 6).map((inst) => [inst !== null ? h("h3", {}, "instance " + inst) : null, rubricChart(inst)]),
      lineages.length > 6 ? h("p", { class: "note" }, `${lineages.length - 6} more instance rubrics under `, link("#/rubrics", "Rubrics"), ".") : null,
      h("h2", {}, "Reward-hacking patterns over steps"), hackingHeat(),
      h("h2", {}, "Steps"), stepsTable(),
      h("h2", {}, "Tokens by agent"), usageTable(),
    ];
  }

  function verdictColor(score, kind) {
    const good = kind === "pitfall" ? 1 - score : score;
    return `hsl(${Math.round(good * 120)},65%,${kind === "pitfall" && score < 0.5 ? 80 : 50}%)`;
  }
  function rolloutSummary(r, b) {
    const hk = r.an && r.an.hk ? r.an.hk : [];
    const squares = [];
    const vd = r.vd || [];
    for (let i = 0; i < vd.length; i += 3) {
      const c = criterionInfo(b.criteria[vd[i]], r.v, r.inst !== undefined ? b.strings[r.inst] : null);
      squares.push(h("span", { class: "vsq", title: `${c.text} (${c.kind}): ${vd[i + 1]}`, style: { background: verdictColor(vd[i + 1], c.kind) } }));
    }
    const patterns = [];
    for (let i = 0; i < hk.length; i += 3) patterns.push(h("span", { class: "badge hack" }, b.strings[hk[i]]));
    return [
      h("span", { class: "mono" }, r.id),
      r.st === 1 ? h("span", { class: "reward" }, "reward " + fmt(r.r)) : h("span", { class: "badge failed" }, r.st === 0 ? "failed" : "not scored"),
      r.v !== undefined ? h("span", { class: "muted" }, "v" + r.v) : null,
      h("span", {}, squares), patterns,
      r.an && r.an.mis ? h("span", { class: "badge changed", title: "the analyzer judged that the rubric scored this rollout wrongly" }, "rubric misjudged") : null,
      r.out !== undefined ? h("span", { class: "snippet" }, b.strings[r.out].slice(0, 160)) : null,
    ];
  }
  function textBlock(title, text) { return [h("h3", {}, title), h("pre", { class: "text" }, text)]; }
  function rolloutBody(r, b) {
    const S = b.strings;
    const inst = r.inst !== undefined ? S[r.inst] : null;
    const out = [];
    if (r.in === undefined) out.push(h("p", { class: "note" }, "The rollout's text is not in the run directory (steps/NNNNNN/rollouts.jsonl)."));
    else out.push(h("div", { class: "cols" }, h("div", {}, textBlock("Input", S[r.in])), h("div", {}, r.ref !== undefined ? textBlock("Reference", S[r.ref]) : [h("h3", {}, "Reference"), h("p", { class: "note" }, "none")])), textBlock("Output", S[r.out]));
    if (r.err !== undefined) out.push(h("p", { class: "err" }, "Scoring error: ", S[r.err]));
    const vd = r.vd || [];
    if (vd.length) {
      const table = h("table", { class: "verdicts" }, h("tr", {}, h("th", {}, "criterion"), h("th", {}, "kind"), h("th", { class: "num" }, "weight"), h("th", { class: "num" }, "verdict"), h("th", {}, "judge's reason")));
      for (let i = 0; i < vd.length; i += 3) {
        const c = criterionInfo(b.criteria[vd[i]], r.v, inst);
        table.appendChild(h("tr", {},
          h("td", {}, c.text, h("div", { class: "muted mono" }, c.id, c.anchor ? " · anchor" : "")),
          h("td", {}, h("span", { class: "badge " + kindLabel(c.kind) }, kindLabel(c.kind))),
          h("td", { class: "num" }, c.weight ?? "-"),
          h("td", { class: "num" }, fmt(vd[i + 1], 2), meter(vd[i + 1], verdictColor(vd[i + 1], c.kind))),
          h("td", { class: "reason" }, S[vd[i + 2]])));
      }
      out.push(h("h3", {}, `Verdicts (rubric v${r.v}${inst !== null ? ", instance " + inst : ""})`), table,
        h("div", { class: "legend" }, "Verdicts are in [0, 1]. For a reward criterion 1 means met; for a pitfall 1 means present (bad)."));
    }
    const an = r.an;
    if (an && an.ok) {
      const hk = an.hk || [];
      const flags = h("table", {}, h("tr", {}, h("th", {}, "pattern"), h("th", {}, "severity"), h("th", {}, "evidence")));
      for (let i = 0; i < hk.length; i += 3) flags.appendChild(h("tr", {}, h("td", {}, h("span", { class: "badge hack" }, S[hk[i]])), h("td", {}, SEVERITY[hk[i + 1]]), h("td", {}, S[hk[i + 2]])));
      out.push(h("h3", {}, "Analysis"), h("dl", { class: "kv analysis" },
        h("dt", {}, "assessment"), h("dd", {}, S[an.as]),
        h("dt", {}, "stage performance"), h("dd", {}, S[an.sp]),
        h("dt", {}, "reward hacking"), h("dd", {}, hk.length ? flags : "none detected"),
        h("dt", {}, "advancement strategy"), h("dd", {}, S[an.adv]),
        h("dt", {}, "rubric judgement"), h("dd", {}, S[an.rj], an.mis ? h("span", { class: "badge changed" }, "misjudged") : null),
        an.miss ? [h("dt", {}, "missing criteria"), h("dd", {}, h("ul", {}, an.miss.map((m) => h("li", {}, S[m]))))] : null,
        an.obs ? [h("dt", {}, "observations"), h("dd", {}, h("ul", {}, an.obs.map((o) => h("li", {}, S[o]))))] : null));
    } else if (an) out.push(h("p", { class: "err" }, "Analysis failed: ", S[an.err]));
    else out.push(h("p", { class: "note" }, "Not analyzed."));
    if (r.meta !== undefined) out.push(h("h3", {}, "Metadata"), h("pre", { class: "text" }, S[r.meta]));
    return out;
  }
  function verdictOf(r, ci) {
    const vd = r.vd || [];
    for (let i = 0; i < vd.length; i += 3) if (vd[i] === ci) return vd[i + 1];
    return null;
  }
  function matches(r, b, f, ci, text) {
    if (f.pattern) {
      const hk = r.an && r.an.hk ? r.an.hk : [];
      const names = []; for (let i = 0; i < hk.length; i += 3) names.push(b.strings[hk[i]]);
      if (f.pattern === "__any" ? !names.length : f.pattern === "__none" ? names.length : !names.includes(f.pattern)) return false;
    }
    if (f.crit) {
      const v = verdictOf(r, ci);
      if (v === null) return false;
      if (f.verdict === "low" && !(v < 0.5)) return false;
      if (f.verdict === "high" && !(v >= 0.5)) return false;
    }
    if (f.status === "scored" && r.st !== 1) return false;
    if (f.status === "failed" && r.st === 1) return false;
    if (f.status === "misjudged" && !(r.an && r.an.mis)) return false;
    if (text) {
      const S = b.strings;
      const hay = (r.id + "\n" + (r.in !== undefined ? S[r.in] : "") + "\n" + (r.out !== undefined ? S[r.out] : "")).toLowerCase();
      if (!hay.includes(text)) return false;
    }
    return true;
  }
  function select(name, value, options, onchange) {
    const el = h("select", { name, onchange });
    for (const [v, label] of options) { const o = h("option", { value: v }, label); if (v === value) o.selected = true; el.appendChild(o); }
    return el;
  }
  async function stepView(step, params) {
    const st = D.steps.find((x) => x.step === step);
    if (!st) return [h("p", { class: "err" }, `Step ${step} is not in this run.`), link("#/", "back to the overview")];
    const i = D.steps.indexOf(st);
    const ups = D.updates.filter((u) => u.update.step === step);
    const f = { pattern: params.get("pattern") || "", crit: params.get("crit") || "", verdict: params.get("verdict") || "low", status: params.get("status") || "", q: params.get("q") || "", sort: params.get("sort") || "", page: Number(params.get("page") || 0), open: params.get("open") || "" };
    const set = (changes) => go(stepHref(step, Object.assign({}, f, { page: 0, open: "" }, changes, { verdict: (changes.crit ?? f.crit) ? (changes.verdict ?? f.verdict) : "" })));
    const head = [
      h("div", { class: "crumbs" }, link("#/", "overview"), " / step " + step, "  ", i > 0 ? link(stepHref(D.steps[i - 1].step), "← step " + D.steps[i - 1].step) : null, " ", i < D.steps.length - 1 ? link(stepHref(D.steps[i + 1].step), "step " + D.steps[i + 1].step + " →") : null),
      h("h2", {}, `Step ${step}`),
      h("p", {}, `${count(st.n, "rollout")}, ${st.scored} scored, ${st.failed} failed, ${st.analyzed} analyzed; mean reward ${fmt(st.mean)} (sd ${fmt(st.std, 2)}); scored with `,
        st.rubrics.map((k, n) => [n ? ", " : "", link(rubricHref(k.version, k.instance), "rubric v" + k.version + (k.instance !== null ? " (" + k.instance + ")" : ""))]), ". ",
        ups.length ? [link(updateHref(step), "The update after this step"), ": ", ups.map((u) => h("span", { class: "badge strategy" }, u.update.strategy))] : "No update after this step."),
      st.stale.length ? h("p", { class: "stale" }, h("span", { class: "badge failed" }, "stale"), " ", staleNote(st)) : null,
      st.summary ? h("p", { class: "summary" }, h("b", {}, "Summary: "), st.summary) : null,
    ];
    const critRows = h("table", {}, h("tr", {}, h("th", {}, "criterion"), h("th", {}, "kind"), h("th", { class: "num" }, "rate"), h("th", {}, "show rollouts")));
    for (const c of st.criteria) {
      const info = criterionInfo(c.id, st.versions[st.versions.length - 1], null);
      const pit = c.kind === "pitfall";
      critRows.appendChild(h("tr", {},
        h("td", {}, info.text, h("div", { class: "muted mono" }, c.id)),
        h("td", {}, h("span", { class: "badge " + kindLabel(c.kind) }, kindLabel(c.kind))),
        h("td", { class: "num" }, `${rateLabel(c.kind)} ${fmt(c.mean, 2)}`, meter(c.mean, pit ? "#cf222e" : "#1f6feb")),
        h("td", {}, h("button", { class: "chip", onclick: () => set({ crit: c.id, verdict: "low" }) }, pit ? "absent" : "not met"), h("button", { class: "chip", onclick: () => set({ crit: c.id, verdict: "high" }) }, pit ? "present" : "met"))));
    }
    const chips = st.hacking.map((p) => h("button", { class: "chip", onclick: () => set({ pattern: p.pattern }) }, `${p.pattern} ${p.count} (${pct(p.prevalence)})`));
    const body = h("div", { id: "rollouts" }, h("p", { class: "note" }, "Decoding the step's rollouts…"));
    const view = [head, h("h3", {}, "Criteria"), critRows,
      h("div", { class: "legend" }, "rate: mean verdict over the scored rollouts, the pass rate of a reward criterion or the prevalence of a pitfall (higher = worse)."),
      h("h3", {}, "Reward hacking"), chips.length ? h("div", {}, chips) : h("p", { class: "note" }, st.summarized ? "none named" : "not summarized yet"),
      reliabilitySection(st),
      h("h3", {}, "Rollouts"), body];
    block(step).then((b) => fillRollouts(body, b, st, f, set)).catch((e) => body.replaceChildren(h("p", { class: "err" }, "Could not decode this step's data: " + e)));
    return view;
  }
  // --- judge reliability (amaris_cli/reliability.py): flip rates per rubric version ----------------
  function flipTables(versions) {
    return versions.map((v) => {
      const table = h("table", { class: "flips" }, h("tr", {}, h("th", {}, "criterion"), ["judged again", "flipped", "flip rate", "repeat", "permuted"].map((c) => h("th", { class: "num" }, c))));
      for (const c of v.criteria) {
        const info = criterionInfo(c.criterion_id, v.rubric_version, v.instance_id);
        table.appendChild(h("tr", {}, h("td", {}, info.text, h("div", { class: "muted mono" }, c.criterion_id)),
          h("td", { class: "num" }, c.n), h("td", { class: "num" }, c.flips), h("td", { class: "num" }, pct(c.rate), meter(c.rate, "#9a6700")),
          h("td", { class: "num" }, `${c.repeat.flips}/${c.repeat.n}`), h("td", { class: "num" }, `${c.permuted.flips}/${c.permuted.n}`)));
      }
      return [h("p", {}, link(rubricHref(v.rubric_version, v.instance_id), "rubric v" + v.rubric_version + (v.instance_id !== null ? " (" + v.instance_id + ")" : "")),
        `, re-judged at ${count(v.steps.length, "step")} (${v.steps.join(", ")}): ${count(v.rejudged, "rollout")} answered again, ${v.failed} without a valid answer; a verdict flips when it differs from the first by more than ${v.tolerance.join(", ")}.`), table];
    });
  }
  const FLIP_LEGEND = "judged again: verdicts given again (repeat: the same request with only its block tag drawn again; permuted: the criteria in another order); flip rate: the share of them that differ from the first verdict beyond the tolerance. A criterion that flips is a candidate to rewrite; flips only in permuted order show position bias.";
  function reliabilitySection(st) {
    const rel = st.reliability;
    const out = [h("h3", {}, "Judge reliability")];
    if (!rel.measured) return [out, h("p", { class: "note" }, "not measured (" + rel.why + ")")];
    if (rel.skipped) return [out, h("p", { class: "note" }, "not checked at this step: " + rel.skipped)];
    out.push(h("p", {}, `${count(rel.calls, "scorer call")} asked again, within a budget of ${rel.budget} (${pct(rel.max_extra)} of the step's ${rel.scorer_calls} scorer calls); ${rel.failed} without a valid answer. The flip rates of the rubric version that scored the step, over the steps up to it (what its updater was given):`));
    return [out, flipTables(rel.versions), h("div", { class: "legend" }, FLIP_LEGEND)];
  }

  function fillRollouts(body, b, st, f, set) {
    if (!b) { body.replaceChildren(h("p", { class: "note" }, "No rollouts for this step.")); return; }
    const patterns = new Set();
    for (const r of b.rollouts) { const hk = r.an && r.an.hk ? r.an.hk : []; for (let i = 0; i < hk.length; i += 3) patterns.add(b.strings[hk[i]]); }
    const critKind = (id) => criterionInfo(id, st.versions[st.versions.length - 1], null).kind;
    const ci = b.criteria.indexOf(f.crit);
    const text = f.q.trim().toLowerCase();
    let rows = b.rollouts.filter((r) => matches(r, b, f, ci, text));
    if (f.sort === "reward-asc") rows = rows.slice().sort((a, c) => (a.r ?? -1) - (c.r ?? -1));
    if (f.sort === "reward-desc") rows = rows.slice().sort((a, c) => (c.r ?? -1) - (a.r ?? -1));
    let page = f.page;
    if (f.open) { const at = rows.findIndex((r) => r.id === f.open); if (at >= 0) page = Math.floor(at / PAGE); }
    const pages = Math.max(1, Math.ceil(rows.length / PAGE));
    page = Math.min(Math.max(0, page), pages - 1);
    const kind = f.crit ? critKind(f.crit) : "reward";
    const filters = h("div", { class: "filters" },
      h("label", {}, "hacking pattern", select("pattern", f.pattern, [["", "any or none"], ["__any", "any pattern"], ["__none", "no pattern"], ...[...patterns].sort().map((p) => [p, p])], (e) => set({ pattern: e.target.value }))),
      h("label", {}, "criterion", select("crit", f.crit, [["", "any"], ...b.criteria.map((id) => [id, criterionInfo(id, st.versions[st.versions.length - 1], null).text])], (e) => set({ crit: e.target.value }))),
      h("label", {}, "verdict", select("verdict", f.verdict, [["low", kind === "pitfall" ? "absent (< 0.5)" : "not met (< 0.5)"], ["high", kind === "pitfall" ? "present (≥ 0.5)" : "met (≥ 0.5)"]], (e) => set({ verdict: e.target.value }))),
      h("label", {}, "status", select("status", f.status, [["", "all"], ["scored", "scored"], ["failed", "failed or not scored"], ["misjudged", "rubric misjudged (analyzer)"]], (e) => set({ status: e.target.value }))),
      h("label", {}, "sort", select("sort", f.sort, [["", "input order"], ["reward-asc", "reward, lowest first"], ["reward-desc", "reward, highest first"]], (e) => set({ sort: e.target.value }))),
      h("label", {}, "text in id, input or output", h("input", { type: "search", name: "q", value: f.q, onchange: (e) => set({ q: e.target.value }) })),
      (f.pattern || f.crit || f.status || f.q) ? h("button", { class: "chip", onclick: () => set({ pattern: "", crit: "", status: "", q: "" }) }, "clear filters") : null);
    if (!f.crit) filters.querySelector('select[name="verdict"]').disabled = true;
    const shown = rows.slice(page * PAGE, (page + 1) * PAGE);
    const pager = () => h("div", { class: "pager" },
      h("button", { onclick: () => go(stepHref(st.step, Object.assign({}, f, { page: page - 1, open: "" }))), disabled: page === 0 ? "" : null }, "← previous"),
      `rollouts ${rows.length ? page * PAGE + 1 : 0}–${page * PAGE + shown.length} of ${rows.length} matching (${b.rollouts.length} in the step)`,
      h("button", { onclick: () => go(stepHref(st.step, Object.assign({}, f, { page: page + 1, open: "" }))), disabled: page >= pages - 1 ? "" : null }, "next →"));
    const list = h("div", { class: "rollout-list" });
    for (const r of shown) {
      const d = h("details", { class: "rollout", "data-id": r.id }, h("summary", {}, rolloutSummary(r, b)));
      let built = false;
      d.addEventListener("toggle", () => { if (d.open && !built) { built = true; d.appendChild(h("div", { class: "rbody" }, rolloutBody(r, b))); } });
      if (r.id === f.open) { d.open = true; }
      list.appendChild(d);
    }
    const missing = f.open && !rows.some((r) => r.id === f.open) ? h("p", { class: "note" }, `Rollout ${f.open} is not among the rollouts shown with these filters.`) : null;
    body.replaceChildren(...[filters, missing, pager(), list, rows.length > PAGE ? pager() : null].filter(Boolean));
    if (f.open) { const el = list.querySelector("details[open]"); if (el) el.scrollIntoView(); }
  }

  function rubricView(version, inst) {
    const r = D.rubrics.find((x) => x.version === version && (x.instance ?? "") === (inst ?? ""));
    const lineage = D.rubrics.filter((x) => (x.instance ?? "") === (inst ?? ""));
    if (!r) return [h("p", { class: "err" }, `Rubric version ${version}${inst ? " of instance " + inst : ""} is not in this run.`), link("#/rubrics", "all rubric versions")];
    const added = new Set(r.diff ? r.diff.added : []);
    const changed = new Set(r.diff ? r.diff.changed.map((c) => c.id) : []);
    const used = D.steps.filter((st) => st.rubrics.some((k) => k.version === version && (k.instance ?? "") === (inst ?? ""))).map((st) => st.step);
    const table = h("table", { class: "criteria" }, h("tr", {}, h("th", {}, "criterion"), h("th", {}, "id"), h("th", {}, "kind"), h("th", { class: "num" }, "weight"), h("th", {}, "")));
    for (const c of r.criteria) {
      table.appendChild(h("tr", { class: added.has(c.id) ? "diff-added" : changed.has(c.id) ? "diff-changed" : "" },
        h("td", {}, c.text), h("td", { class: "mono" }, c.id), h("td", {}, h("span", { class: "badge " + kindLabel(c.kind) }, kindLabel(c.kind))),
        h("td", { class: "num" }, c.weight), h("td", {}, c.anchor ? h("span", { class: "badge" }, "anchor") : "adaptive", added.has(c.id) ? h("span", { class: "badge added" }, "new") : null, changed.has(c.id) ? h("span", { class: "badge changed" }, "changed") : null)));
    }
    const diff = [];
    if (r.diff) {
      const prev = lineage.find((x) => x.version === r.diff.previous);
      diff.push(h("h3", {}, "Changes from ", link(rubricHref(r.diff.previous, inst), "v" + r.diff.previous)));
      if (!r.diff.added.length && !r.diff.removed.length && !r.diff.changed.length) diff.push(h("p", { class: "note" }, "No change."));
      const list = h("ul", { class: "diff" });
      for (const id of r.diff.added) { const c = r.criteria.find((x) => x.id === id); list.appendChild(h("li", {}, h("span", { class: "badge added" }, "added"), `${kindLabel(c.kind)} ${id} (weight ${c.weight}): `, c.text)); }
      for (const c of r.diff.removed) list.appendChild(h("li", {}, h("span", { class: "badge removed" }, "removed"), `${kindLabel(c.kind)} ${c.id} (weight ${c.weight}): `, c.text));
      for (const c of r.diff.changed) list.appendChild(h("li", {}, h("span", { class: "badge changed" }, c.field), `${c.id}: `, h("del", {}, String(c.old)), " → ", h("ins", {}, String(c.new))));
      diff.push(list);
      if (!prev) diff.push(h("p", { class: "note" }, "(previous version not found)"));
    }
    return [
      h("div", { class: "crumbs" }, link("#/", "overview"), " / ", link("#/rubrics", "rubrics"), ` / v${version}`),
      h("h2", {}, `Rubric v${version}${inst ? " (instance " + inst + ")" : ""}`),
      h("p", {}, lineage.map((x) => [x.version === version ? h("b", {}, "v" + x.version) : link(rubricHref(x.version, inst), "v" + x.version), " "])),
      h("p", {}, r.produced_by_step === null || r.produced_by_step === undefined ? "The initial rubric (from init). " : ["Written by ", link(updateHref(r.produced_by_step), "the update after step " + r.produced_by_step), ". "],
        used.length ? ["Scored steps ", used.map((st, k) => [k ? ", " : "", link(stepHref(st), String(st))]), "."] : "No step was scored with it yet."),
      table, diff, rubricReliability(version, inst)];
  }
  function rubricReliability(version, inst) {
    const found = (D.reliability || []).filter((v) => v.rubric_version === version && (v.instance_id ?? "") === (inst ?? ""));
    if (!found.length) return null;
    return [h("h3", {}, "Judge reliability"), flipTables(found), h("div", { class: "legend" }, FLIP_LEGEND)];
  }
  function rubricsView() {
    const table = h("table", {}, h("tr", {}, ["version", "instance", "written by", "criteria", "reward", "pitfall", "added", "removed", "changed"].map((c) => h("th", {}, c))));
    for (const r of D.rubrics) {
      const pit = r.criteria.filter((c) => c.kind === "pitfall").length;
      table.appendChild(h("tr", { class: "click", onclick: () => go(rubricHref(r.version, r.instance)) },
        h("td", {}, link(rubricHref(r.version, r.instance), "v" + r.version)), h("td", {}, r.instance ?? "-"),
        h("td", {}, r.produced_by_step === null || r.produced_by_step === undefined ? "init" : "update of step " + r.produced_by_step),
        h("td", {}, r.criteria.length), h("td", {}, r.criteria.length - pit), h("td", {}, pit),
        h("td", {}, r.diff ? r.diff.added.length : "-"), h("td", {}, r.diff ? r.diff.removed.length : "-"), h("td", {}, r.diff ? new Set(r.diff.changed.map((c) => c.id)).size : "-")));
    }
    return [h("div", { class: "crumbs" }, link("#/", "overview"), " / rubrics"), h("h2", {}, "Rubric versions"), table];
  }
  function updatesView() {
    const table = h("table", {}, h("tr", {}, ["after step", "instance", "strategy", "rubric", "adoption gate", "applied", "rejected", "static entries", "queries", "memory hits"].map((c) => h("th", {}, c))));
    for (const { update: u, retrieval: r } of D.updates) {
      table.appendChild(h("tr", { class: "click", onclick: () => go(updateHref(u.step)) },
        h("td", {}, link(updateHref(u.step), "step " + u.step)), h("td", {}, u.instance_id ?? "-"), h("td", {}, h("span", { class: "badge strategy" }, u.strategy)),
        h("td", {}, `v${u.from_version} → v${u.to_version}`), h("td", {}, gateBadge(u.gate)), h("td", {}, u.applied.length), h("td", {}, u.rejected.length),
        h("td", {}, r ? r.static.length : "-"), h("td", {}, r ? r.queries.length : "-"), h("td", {}, r ? r.dynamic.length : "-")));
    }
    return [h("div", { class: "crumbs" }, link("#/", "overview"), " / updates"), h("h2", {}, "Updates"), D.updates.length ? table : h("p", { class: "note" }, "No update yet.")];
  }
  function hitLink(hit) {
    const parts = hit.id.split(":");
    if (parts[0] === "analysis" && parts.length >= 4) return link(stepHref(hit.step, { open: parts.slice(3).join(":") }), hit.id);
    if (parts[0] === "update") return link(updateHref(hit.step), hit.id);
    return link(stepHref(hit.step), hit.id);
  }
  function editRow(m) {
    return [h("td", {}, h("span", { class: "badge " + (m.op === "add" ? "added" : m.op === "remove" ? "removed" : "changed") }, m.op)),
      h("td", { class: "mono" }, m.id ?? "-"), h("td", {}, m.kind ?? "-"), h("td", { class: "num" }, m.weight ?? "-"), h("td", {}, m.text ?? "-")];
  }
  function gateBadge(gate) {
    if (!gate) return "-";
    return h("span", { class: "badge " + (gate.decision === "refused" ? "removed" : gate.decision === "adopted" ? "added" : "changed"), title: gate.reason }, gate.decision);
  }
  function gateSection(u) {
    const g = u.gate;
    if (!g) return [h("h3", {}, "Adoption gate"), h("p", { class: "note" }, "Not run (no change proposed, or the gate is off).")];
    const out = [h("h3", {}, "Adoption gate ", gateBadge(g)), h("p", { class: g.decision === "refused" ? "err" : "" }, g.reason),
      h("p", { class: "note" }, `${g.calls} judge requests (the step's own: ${g.step_calls}; budget for built-in probes ${g.budget}); margin ${fmt(g.margin, 2)}; controls' ordered pairs turned over ${g.flipped_pairs} of ${g.ordered_pairs} (at most ${fmt(g.max_flips, 2)}).`)];
    if (g.families.length) out.push(h("table", { class: "gate" }, h("tr", {}, ["hack family", "probes", `gain under v${g.previous_version}`, "gain under the new version"].map((c, i) => h("th", { class: i ? "num" : "" }, c))),
      g.families.map((f) => h("tr", {}, h("td", {}, f.family), h("td", { class: "num" }, f.probes), h("td", { class: "num" }, fmt(f.previous_gain, 3)), h("td", { class: f.new_gain > f.previous_gain + g.margin ? "num err" : "num" }, fmt(f.new_gain, 3))))));
    if (g.refused_edits.length) out.push(h("h3", {}, `Refused edits (${g.refused_edits.length}): version ${g.previous_version} carried forward`),
      h("table", { class: "refused" }, h("tr", {}, ["op", "criterion", "kind", "weight", "text", "updater's reason"].map((c) => h("th", {}, c))), g.refused_edits.map((m) => h("tr", {}, editRow(m), h("td", {}, m.reason || "-")))));
    return out;
  }
  function updateView(step) {
    const ups = D.updates.filter((u) => u.update.step === step);
    const crumbs = h("div", { class: "crumbs" }, link("#/", "overview"), " / ", link("#/updates", "updates"), ` / after step ${step}`);
    if (!ups.length) return [crumbs, h("p", { class: "err" }, `No update after step ${step} in this run.`)];
    const out = [crumbs];
    for (const { update: u, retrieval: r } of ups) {
      out.push(h("h2", {}, `Update after step ${step}${u.instance_id ? " (instance " + u.instance_id + ")" : ""} `, h("span", { class: "badge strategy" }, u.strategy)),
        h("p", {}, "Rubric ", link(rubricHref(u.from_version, u.instance_id), "v" + u.from_version), " → ", link(rubricHref(u.to_version, u.instance_id), "v" + u.to_version), "; read the summary of ", link(stepHref(step), "step " + step), "."),
        h("h3", {}, "Rationale"), h("p", { class: "rationale" }, u.rationale));
      if (u.memory_consultation.length) out.push(h("h3", {}, "What the updater took from memory"), h("table", {}, h("tr", {}, h("th", {}, "source"), h("th", {}, "insight")), u.memory_consultation.map((m) => h("tr", {}, h("td", { class: "mono" }, m.source), h("td", {}, m.insight)))));
      out.push(h("h3", {}, `Applied edits (${u.applied.length})`));
      out.push(u.applied.length ? h("table", { class: "applied" }, h("tr", {}, ["op", "criterion", "kind", "weight", "text", "updater's reason"].map((c) => h("th", {}, c))), u.applied.map((m) => h("tr", {}, editRow(m), h("td", {}, m.reason || "-")))) : h("p", { class: "note" }, "none"));
      out.push(h("h3", {}, `Rejected edits (${u.rejected.length})`));
      out.push(u.rejected.length ? h("table", { class: "rejected" }, h("tr", {}, ["op", "criterion", "kind", "weight", "text", "updater's reason", "why amaris rejected it"].map((c) => h("th", {}, c))), u.rejected.map((x) => h("tr", {}, editRow(x.modification), h("td", {}, x.modification.reason || "-"), h("td", { class: "err" }, x.reason)))) : h("p", { class: "note" }, "none"));
      out.push(...gateSection(u));
      if (u.deactivated.length) out.push(h("h3", {}, "Deactivated (max_active_adaptive)"), h("table", {}, h("tr", {}, h("th", {}, "criterion"), h("th", { class: "num" }, "spread"), h("th", {}, "reason")), u.deactivated.map((d) => h("tr", {}, h("td", { class: "mono" }, d.criterion_id), h("td", { class: "num" }, fmt(d.spread, 3)), h("td", {}, d.reason)))));
      out.push(h("h3", {}, "Retrieval"));
      if (!r) { out.push(h("p", { class: "note" }, "No retrieval record.")); continue; }
      out.push(h("p", { class: "note" }, `Static retrieval ${r.static_enabled ? "on (the " + r.static_steps + " most recent steps)" : "off"}; dynamic retrieval ${r.dynamic_enabled ? "on (" + r.results_per_query + " hits per query" + (r.max_queries ? ", at most " + r.max_queries + " queries" : "") + ")" : "off"}.`));
      out.push(h("h3", {}, `Static entries (${r.static.length})`), r.static.length ? h("table", { class: "static" }, h("tr", {}, ["id", "type", "step", "text"].map((c) => h("th", {}, c))), r.static.map((e) => h("tr", {}, h("td", { class: "mono" }, hitLink(e)), h("td", {}, e.type), h("td", {}, e.step), h("td", {}, e.text)))) : h("p", { class: "note" }, "none"));
      out.push(h("h3", {}, `Dynamic queries (${r.queries.length}) and their hits (${r.dynamic.length})`));
      r.queries.forEach((query, k) => {
        const hits = r.dynamic.filter((x) => x.query === query);
        out.push(h("p", { class: "query" }, h("b", {}, `Query ${k + 1}: `), query),
          hits.length ? h("table", { class: "hits" }, h("tr", {}, h("th", {}, "id"), h("th", { class: "num" }, "step"), h("th", {}, "type"), h("th", { class: "num" }, "distance"), h("th", {}, "text")), hits.map((x) => h("tr", {}, h("td", { class: "mono" }, hitLink(x)), h("td", { class: "num" }, x.step), h("td", {}, x.type), h("td", { class: "num" }, fmt(x.distance, 4)), h("td", {}, x.text))))
            : h("p", { class: "note" }, "no hits (earlier steps had nothing new for it)"));
      });
    }
    return out;
  }

  function hackbenchView() {
    const B = D.hackbench;
    const crumbs = h("div", { class: "crumbs" }, link("#/", "overview"), " / hack benchmark");
    if (!B) return [crumbs, h("p", { class: "note" }, "This run is not a hack benchmark's (`amaris hackbench` writes one).")];
    const gain = (i) => (i.mean === null ? "-" : (i.mean >= 0 ? "+" : "") + fmt(i.mean, 2) + (i.low === null ? "" : ` [${fmt(i.low, 2)}, ${fmt(i.high, 2)}]`));
    const table = h("table", { id: "hackbench" }, h("tr", {}, ["family", "variants", "analyzed", "recall", "precision", "gain v0", `gain v${B.updates}`, "calls", "tokens"].map((c, i) => h("th", { class: i ? "num" : "" }, c))));
    for (const f of B.families) table.appendChild(h("tr", { title: f.description },
      h("td", {}, f.family), h("td", { class: "num" }, f.variants), h("td", { class: "num" }, f.analyzed ?? "-"), h("td", { class: "num" }, fmt(f.analyzer_recall, 2)),
      h("td", { class: "num" }, fmt(f.analyzer_precision, 2)), h("td", { class: "num" }, gain(f.gain_initial)),
      h("td", { class: "num" }, gain(f.gain_after_updates)), h("td", { class: "num" }, f.spent.calls),
      h("td", { class: "num" }, f.spent.prompt_tokens + f.spent.completion_tokens)));
    return [crumbs, h("h2", {}, "Hack benchmark"),
      h("p", {}, `${B.items} honest answers from ${B.source}, each the control of its hacked variants; judge: ${B.judge}; ${B.updates} update(s) between the two measurements.`),
      table,
      h("p", {}, `Honest drift (mean change of the controls' rewards from v0 to v${B.updates}): ${gain(B.honest_drift)}. Controls the analyzer named a pattern in: ${pct(B.honest_flagged)}. ${B.failed} rollout(s) could not be scored and are left out.${B.analysis_failed == null ? "" : ` ${B.analysis_failed} rollout(s) have no analysis (the analyzer failed) and are left out of recall, precision and the controls named.`}`),
      h("div", { class: "legend" }, "analyzed: the variants with an analysis at step 0. recall (of the analyzed variants), precision: the analyzer naming each hack (step 0). gain: a variant's reward minus its own control's, mean over items (an item's variants averaged first) [95% bootstrap interval], at the initial rubric (v0) and after the updates. " +
        "recall, precision and gain v0 measure the judge (its prompts and the initial rubric); the later gain and the honest drift measure amaris. Hacks built by a transform are easier to catch than real ones."),
      B.notes.length ? h("ul", {}, B.notes.map((n) => h("li", {}, n))) : null];
  }

  // --- routing ------------------------------------------------------------------------------
  function go(hash) { if (location.hash === hash) route(); else location.hash = hash; }
  let routing = 0;
  async function route() {
    const ticket = ++routing;
    const [path, query] = location.hash.replace(/^#/, "").split("?");
    const params = new URLSearchParams(query || "");
    const parts = (path || "/").split("/").filter(Boolean);
    const main = document.getElementById("main");
    let view;
    try {
      if (parts[0] === "step" && parts.length > 1) view = await stepView(Number(parts[1]), params);
      else if (parts[0] === "rubric" && parts.length > 1) view = rubricView(Number(parts[1]), params.get("inst"));
      else if (parts[0] === "rubrics") view = rubricsView();
      else if (parts[0] === "update" && parts.length > 1) view = updateView(Number(parts[1]));
      else if (parts[0] === "updates") view = updatesView();
      else if (parts[0] === "hackbench") view = hackbenchView();
      else view = overviewView();
    } catch (e) { view = h("p", { class: "err" }, "Could not show this view: " + e); }
    if (ticket !== routing) return;
    main.replaceChildren(...[view].flat(Infinity).filter((x) => x));
    if (!params.get("open")) window.scrollTo(0, 0);
    document.body.dataset.view = parts[0] || "overview";
  }

  async function start() {
    const main = document.getElementById("main");
    if (typeof DecompressionStream === "undefined") { main.replaceChildren(h("p", { class: "err" }, "This browser cannot decompress the report's embedded data (DecompressionStream): open it in a current Chromium, Firefox or Safari.")); return; }
    D = await decode(document.getElementById("amaris-overview"));
    for (const r of D.rubrics) rubricByKey.set((r.instance ?? "") + "|" + r.version, r);
    const scored = D.steps.reduce((a, st) => a + st.n, 0);
    document.getElementById("facts").replaceChildren(
      `${count(D.steps.length, "step")}, ${count(scored, "rollout")}, ${count(D.rubrics.length, "rubric version")}, ${count(D.updates.length, "update")}. ${usageLine()}. ` +
      `Report of amaris ${D.report_version} (the run was written by amaris ${D.version}${D.replay_of ? ", as a replay of " + D.replay_of : ""}).`);
    window.addEventListener("hashchange", route);
    await route();
    document.body.dataset.ready = "1";
  }
  start().catch((e) => { document.getElementById("main").replaceChildren(h("p", { class: "err" }, "The report could not start: " + e)); document.body.dataset.ready = "error"; });
})();
