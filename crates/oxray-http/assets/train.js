// A Train run's page: one uPlot chart per numeric metric its reports carry,
// against the report number, the epoch or step a report names, or time;
// refreshed every 2 seconds while the run goes on.
"use strict";

const X_AXES = {
  index: (r) => r.index,
  epoch: (r) => numeric(r.metrics.epoch),
  step: (r) => numeric(r.metrics.step),
  time: (r) => r.time_ms / 1000,
};

function numeric(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

let charts = new Map();
let drawnFor = "";

function draw(root, reports, axis) {
  const keys = [...new Set(reports.flatMap((r) => Object.keys(r.metrics).filter((k) => numeric(r.metrics[k]) !== null)))]
    .filter((k) => k !== axis)
    .sort();
  const signature = `${axis}|${keys.join(",")}`;
  if (signature !== drawnFor) {
    for (const plot of charts.values()) plot.destroy();
    charts = new Map();
    root.replaceChildren();
    drawnFor = signature;
  }
  const x = X_AXES[axis];
  for (const key of keys) {
    const rows = reports.map((r) => [x(r), numeric(r.metrics[key])]).filter(([a, b]) => a !== null && b !== null);
    rows.sort((a, b) => a[0] - b[0]);
    const data = [rows.map((r) => r[0]), rows.map((r) => r[1])];
    let plot = charts.get(key);
    if (!plot) {
      const box = document.createElement("div");
      box.className = "chart";
      box.dataset.metric = key;
      root.appendChild(box);
      plot = new uPlot(
        {
          title: key,
          width: Math.min(560, root.clientWidth - 20),
          height: 220,
          scales: { x: { time: axis === "time" } },
          series: [{ label: axis }, { label: key, stroke: "#b7410e", width: 1.5, points: { show: rows.length < 60 } }],
        },
        data,
        box,
      );
      charts.set(key, plot);
    } else {
      plot.setData(data);
    }
  }
  root.dataset.reports = String(reports.length);
}

async function poll(root, select) {
  const reply = await fetch(`/api/oxray/train/runs/${root.dataset.run}`, { credentials: "same-origin" });
  if (!reply.ok) return;
  const body = await reply.json();
  draw(root, body.reports, select.value);
}

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("run-charts");
  const select = document.getElementById("x-axis");
  if (!root || !select) return;
  select.addEventListener("change", () => poll(root, select));
  poll(root, select);
  setInterval(() => poll(root, select), 2000);
});
