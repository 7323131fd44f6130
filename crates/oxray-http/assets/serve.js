// The Serve page's charts: each application's requests per second, errors per second and mean
// latency, from every proxy's counters (`/api/oxray/serve/counters`) read every 2 seconds; a rate
// is the change between two reads. Application names reach the page as text, never as markup.
"use strict";

const WINDOW = 150; // reads kept: 5 minutes
const history = []; // [{time_ms, applications}]
const plots = {};

function rates(key) {
  const apps = [...new Set(history.flatMap((h) => Object.keys(h.applications)))].sort();
  const times = [];
  const series = apps.map(() => []);
  for (let i = 1; i < history.length; i++) {
    const [before, now] = [history[i - 1], history[i]];
    const seconds = (now.time_ms - before.time_ms) / 1000;
    if (seconds <= 0) continue;
    times.push(now.time_ms / 1000);
    apps.forEach((app, j) => {
      const a = before.applications[app] || {};
      const b = now.applications[app] || {};
      const requests = (b.requests || 0) - (a.requests || 0);
      let value;
      if (key === "latency") {
        value = requests > 0 ? ((b.latency_sum_ms || 0) - (a.latency_sum_ms || 0)) / requests : null;
      } else {
        value = Math.max(0, ((b[key] || 0) - (a[key] || 0)) / seconds);
      }
      series[j].push(value);
    });
  }
  return { apps, data: [times, ...series] };
}

const COLORS = ["#1f6feb", "#b7410e", "#2da44e", "#8250df", "#bf8700", "#cf222e"];

function draw(id, title, unit, key) {
  const box = document.getElementById(id);
  if (!box) return;
  const { apps, data } = rates(key);
  const signature = apps.join("\n");
  let entry = plots[id];
  if (!entry || entry.signature !== signature) {
    if (entry) entry.plot.destroy();
    box.replaceChildren();
    const plot = new uPlot(
      {
        title,
        width: Math.min(560, box.parentElement.clientWidth - 20),
        height: 220,
        axes: [{}, { label: unit }],
        series: [{}, ...apps.map((app, i) => ({ label: app, stroke: COLORS[i % COLORS.length], spanGaps: true }))],
      },
      data,
      box,
    );
    entry = plots[id] = { plot, signature };
  } else {
    entry.plot.setData(data);
  }
  box.dataset.apps = String(apps.length);
  box.dataset.points = String(data[0].length);
  // The latest value of each application, for readers (and tests) without the canvas.
  box.dataset.latest = JSON.stringify(Object.fromEntries(apps.map((app, i) => [app, data[i + 1].at(-1) ?? null])));
}

async function poll() {
  const reply = await fetch("/api/oxray/serve/counters", { credentials: "same-origin" });
  if (!reply.ok) return;
  history.push(await reply.json());
  while (history.length > WINDOW) history.shift();
  draw("serve-qps-chart", "Requests per second, per application", "requests/s", "requests");
  draw("serve-errors-chart", "Errors (4xx, 5xx) per second, per application", "errors/s", "errors");
  draw("serve-latency-chart", "Mean latency, per application", "ms", "latency");
}

document.addEventListener("DOMContentLoaded", () => {
  if (!document.getElementById("serve-charts")) return;
  poll();
  setInterval(poll, 2000);
});
