// The Metrics page: one uPlot chart per measure, one line per node, from the
// head's samples (`/api/oxray/metrics`), extended every 2 seconds.
"use strict";

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

// What each chart shows: a value from a sample, or a rate between two samples.
const CHARTS = [
  { id: "cpu", title: "CPU (% of all cores)", value: (s) => s.cpu_percent },
  { id: "memory", title: "Memory used (GiB)", value: (s) => s.memory_used / GiB },
  { id: "store", title: "Object store used (MiB)", value: (s) => s.store_used / MiB },
  { id: "spilled", title: "Object store spilled (MiB)", value: (s) => s.store_spilled / MiB },
  { id: "net-in", title: "Network received (MiB/s)", rate: (s) => s.network_received / MiB },
  { id: "net-out", title: "Network sent (MiB/s)", rate: (s) => s.network_sent / MiB },
  { id: "disk", title: "Disk used (% of the session dir's)", value: (s) => (s.disk_total ? (100 * s.disk_used) / s.disk_total : 0) },
  { id: "tasks", title: "Tasks running", value: (s) => s.tasks_running },
  { id: "gpu", title: "GPU use (%, mean of the node's GPUs)", gpu: true, value: (s) => mean(s.gpus.map((g) => g.utilization_percent)) },
  { id: "gram", title: "GPU memory used (GiB)", gpu: true, value: (s) => s.gpus.reduce((t, g) => t + g.memory_used, 0) / GiB },
];

const COLORS = ["#b7410e", "#0969da", "#1a7f37", "#8250df", "#bf3989", "#9a6700", "#57606a"];

function mean(xs) {
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
}

// node id -> { ip, samples: [...] }, and the newest time seen.
const nodes = new Map();
let newest = 0;
const plots = new Map();

function points(chart, samples) {
  const xs = [];
  const ys = [];
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i];
    if (chart.rate) {
      if (i === 0) continue;
      const prev = samples[i - 1];
      const seconds = (s.time_ms - prev.time_ms) / 1000;
      if (seconds <= 0) continue;
      xs.push(s.time_ms / 1000);
      ys.push(Math.max(0, (chart.rate(s) - chart.rate(prev)) / seconds));
    } else {
      xs.push(s.time_ms / 1000);
      ys.push(chart.value(s));
    }
  }
  return [xs, ys];
}

function draw(root) {
  const ids = [...nodes.keys()].sort();
  const hasGpus = ids.some((id) => nodes.get(id).samples.some((s) => s.gpus.length));
  for (const chart of CHARTS) {
    if (chart.gpu && !hasGpus) continue;
    const tables = ids.map((id) => points(chart, nodes.get(id).samples));
    const data = tables.length ? uPlot.join(tables) : [[]];
    let plot = plots.get(chart.id);
    if (plot && plot.series.length - 1 !== ids.length) {
      plot.destroy();
      plots.delete(chart.id);
      plot = undefined;
    }
    if (!plot) {
      const box = document.getElementById(`chart-${chart.id}`) || document.createElement("div");
      box.id = `chart-${chart.id}`;
      box.className = "chart";
      root.appendChild(box);
      const series = [{}].concat(
        ids.map((id, i) => ({ label: `${nodes.get(id).ip} ${id.slice(0, 8)}`, stroke: COLORS[i % COLORS.length], width: 1.5 })),
      );
      plot = new uPlot({ title: chart.title, width: Math.min(640, root.clientWidth - 20), height: 220, series }, data, box);
      plots.set(chart.id, plot);
    } else {
      plot.setData(data);
    }
  }
}

async function poll(root, windowMs) {
  const since = newest || Date.now() - windowMs;
  const reply = await fetch(`/api/oxray/metrics?since_ms=${since}`, { credentials: "same-origin" });
  if (!reply.ok) return;
  for (const node of await reply.json()) {
    const known = nodes.get(node.node_id) || { ip: node.node_ip, samples: [] };
    known.samples.push(...node.samples);
    const oldest = Date.now() - windowMs;
    known.samples = known.samples.filter((s) => s.time_ms >= oldest);
    nodes.set(node.node_id, known);
    for (const s of node.samples) newest = Math.max(newest, s.time_ms);
  }
  draw(root);
  root.dataset.samples = String([...nodes.values()].reduce((t, n) => t + n.samples.length, 0));
}

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("charts");
  if (!root) return;
  const windowMs = Number(root.dataset.windowMs);
  poll(root, windowMs);
  setInterval(() => poll(root, windowMs), 2000);
});
