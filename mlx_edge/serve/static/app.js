// The live view of a job page: server-sent events update the status, stages, progress, stats and
// the curves (inline SVG). Plain JavaScript shipped in the package: no framework, nothing from a CDN.
"use strict";

(function () {
  // The job list: while a job is queued or running, show fresh statuses every few seconds.
  const list = document.getElementById("jobs");
  if (list && list.dataset.live === "true") setTimeout(() => location.reload(), 3000);
})();

(function () {
  const root = document.getElementById("job");
  if (!root) return;
  const id = root.dataset.id;
  const series = new Map(); // "stage|name" -> Map(step -> value); a resumed attempt's points replace older ones
  const HIDDEN = new Set(["samples/s", "learning_rate", "peak_memory_mb"]);
  const PER_EPOCH = new Set(["dev_accuracy"]);
  const SVG = "http://www.w3.org/2000/svg";

  function add(metrics) {
    for (const m of metrics) {
      const key = m.stage + "|" + m.name;
      if (!series.has(key)) series.set(key, new Map());
      series.get(key).set(m.step, m.value);
    }
    return metrics.length > 0;
  }

  function groups() {
    const out = new Map();
    for (const [key, points] of series) {
      const [stage, name] = key.split("|");
      if (HIDDEN.has(name)) continue;
      let title, label;
      if (PER_EPOCH.has(name)) [title, label] = ["Dev accuracy per epoch", stage === "distill" ? "student" : stage];
      else if (name === "tokens/s") [title, label] = [stage + ": tokens/s per step", name];
      else [title, label] = [stage + ": loss per step", name];
      if (!out.has(title)) out.set(title, []);
      const sorted = [...points.entries()].sort((a, b) => a[0] - b[0]);
      out.get(title).push({ label, points: sorted });
    }
    return out;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmt(v) {
    const a = Math.abs(v);
    if (a !== 0 && (a < 0.01 || a >= 10000)) return v.toExponential(1);
    return a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  function chart(title, lines) {
    const W = 440, H = 240, L = 50, R = 12, T = 12, B = 30;
    const xs = lines.flatMap((s) => s.points.map((p) => p[0]));
    const ys = lines.flatMap((s) => s.points.map((p) => p[1]));
    let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
    if (y0 === y1) [y0, y1] = [y0 - 0.5, y1 + 0.5];
    const pad = (y1 - y0) * 0.06;
    [y0, y1] = [y0 - pad, y1 + pad];
    const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const box = document.createElement("figure");
    box.className = "chart";
    const caption = document.createElement("figcaption");
    caption.textContent = title;
    box.appendChild(caption);
    const plot = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
    for (let i = 0; i <= 4; i++) {
      const y = y0 + ((y1 - y0) * i) / 4;
      plot.appendChild(svg("line", { x1: L, x2: W - R, y1: Y(y), y2: Y(y), class: "grid" }));
      plot.appendChild(svg("text", { x: L - 6, y: Y(y) + 4, class: "tick", "text-anchor": "end" }, fmt(y)));
    }
    for (const x of [x0, (x0 + x1) / 2, x1]) {
      const label = x1 - x0 >= 4 ? String(Math.round(x)) : fmt(x); // steps and epochs are whole numbers
      plot.appendChild(svg("text", { x: X(x), y: H - 10, class: "tick", "text-anchor": "middle" }, label));
    }
    lines.forEach((s, i) => {
      const d = s.points.map((p, j) => `${j ? "L" : "M"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join("");
      plot.appendChild(svg("path", { d, class: `line c${i % 6}` }));
      if (s.points.length < 30) {
        for (const p of s.points) plot.appendChild(svg("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.5, class: `dot c${i % 6}` }));
      }
    });
    box.appendChild(plot);
    const legend = document.createElement("div");
    legend.className = "legend";
    lines.forEach((s, i) => {
      const item = document.createElement("span");
      item.className = `key c${i % 6}`;
      const last = s.points[s.points.length - 1];
      item.textContent = `${s.label} ${last ? fmt(last[1]) : ""}`;
      legend.appendChild(item);
    });
    box.appendChild(legend);
    return box;
  }

  function draw() {
    const target = document.getElementById("charts");
    const all = groups();
    if (all.size === 0) return;
    target.replaceChildren(...[...all].map(([title, lines]) => chart(title, lines)));
  }

  function duration(s) {
    if (s === null || s === undefined) return "…";
    const t = Math.round(s), m = Math.floor(t / 60), r = t % 60;
    return m ? `${m} min ${String(r).padStart(2, "0")} s` : `${r} s`;
  }

  function memory(s) {
    if (s.peak_rss_mb === null || s.peak_rss_mb === undefined) return "…";
    const mlx = s.peak_mlx_mb ? ` (MLX ${Math.round(s.peak_mlx_mb).toLocaleString("en")} MB)` : "";
    return `${Math.round(s.peak_rss_mb).toLocaleString("en")} MB resident${mlx}`;
  }

  function set(idName, text) {
    const node = document.getElementById(idName);
    if (node && node.textContent !== text) node.textContent = text;
  }

  function update(s) {
    const status = document.getElementById("status");
    status.textContent = s.status;
    status.className = `badge big status-${s.status}`;
    root.dataset.status = s.status;
    const list = document.getElementById("stages");
    list.replaceChildren(
      ...Object.entries(s.stages).map(([name, state]) => {
        const li = document.createElement("li");
        li.className = `stage ${state}`;
        li.dataset.stage = name;
        li.textContent = name;
        return li;
      })
    );
    document.getElementById("progress").value = s.progress;
    set("percent", `${(s.progress * 100).toFixed(1)}%`);
    set("detail", (s.stage ? s.stage + ": " : "") + (s.detail || ""));
    set("stat-device", s.device || "…");
    set("stat-memory", memory(s));
    set("stat-speed", s.speed || "…");
    set("stat-elapsed", duration(s.elapsed_s));
    set("stat-attempt", String(s.attempt));
    const error = document.getElementById("error");
    error.textContent = s.error || "";
    error.classList.toggle("hidden", !s.error);
  }

  if (root.dataset.final === "true") {
    fetch(`/api/jobs/${id}`, { credentials: "same-origin" })
      .then((r) => r.json())
      .then((s) => add(s.metrics) && draw());
    return;
  }
  const events = new EventSource(`/jobs/${id}/events`);
  events.onmessage = (message) => {
    const s = JSON.parse(message.data);
    if (add(s.metrics)) draw();
    update(s);
    if (s.final) {
      events.close();
      setTimeout(() => location.reload(), 400); // the finished page carries the report and the download
    }
  };
})();
