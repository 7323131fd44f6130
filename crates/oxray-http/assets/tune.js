// A Tune experiment's page: a parameter against a metric (a point per trial,
// its last value) and the metric's curve per trial against its iterations;
// refreshed every 2 seconds while the experiment goes on. Every text a user
// chose (parameter, metric and trial names) reaches the page as text, never
// as markup.
"use strict";

function numeric(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

// Fills a <select> with `names`, keeping the choice made (else `preferred`, else the first).
function fill(select, names, preferred) {
  const kept = select.value;
  const current = [...select.options].map((o) => o.value);
  if (current.join("\n") !== names.join("\n")) {
    select.replaceChildren(...names.map((n) => new Option(n, n)));
  }
  select.value = names.includes(kept) ? kept : names.includes(preferred) ? preferred : names[0] || "";
}

let paramPlot = null;
let paramSignature = "";
let curvePlot = null;
let curveSignature = "";

function drawParam(box, trials, param, metric) {
  // Numbers stay numbers; other values (a choice of optimizer, say) are categories in first-seen order.
  const values = trials.map((t) => (t.config || {})[param]);
  const categorical = values.some((v) => v !== undefined && v !== null && numeric(v) === null);
  const categories = categorical ? [...new Set(values.map((v) => JSON.stringify(v)))] : [];
  const points = trials
    .map((t, i) => {
      const x = categorical ? categories.indexOf(JSON.stringify(values[i])) : numeric(values[i]);
      return [x, numeric((t.last_result || {})[metric])];
    })
    .filter(([x, y]) => x !== null && y !== null)
    .sort((a, b) => a[0] - b[0]);
  const data = [points.map((p) => p[0]), points.map((p) => p[1])];
  const signature = `${param}|${metric}|${categories.join(",")}`;
  if (signature !== paramSignature) {
    if (paramPlot) paramPlot.destroy();
    box.replaceChildren();
    const axisX = { label: param };
    if (categorical) {
      axisX.splits = () => categories.map((_, i) => i);
      const label = (key) => {
        const value = JSON.parse(key);
        return typeof value === "string" ? value : key;
      };
      axisX.values = (_, splits) => splits.map((i) => (categories[i] === undefined ? "" : label(categories[i])));
    }
    paramPlot = new uPlot(
      {
        title: `${metric} against ${param}, one point per trial`,
        width: Math.min(560, box.parentElement.clientWidth - 20),
        height: 240,
        scales: { x: { time: false, range: categorical ? [-0.5, categories.length - 0.5] : undefined } },
        axes: [axisX, { label: metric }],
        series: [{ label: param }, { label: metric, stroke: "#b7410e", paths: () => null, points: { show: true, size: 8 } }],
      },
      data,
      box,
    );
    paramSignature = signature;
  } else {
    paramPlot.setData(data);
  }
  box.dataset.points = String(points.length);
}

function drawCurves(box, trials, results, metric) {
  const names = new Map(trials.map((t) => [t.trial_id, t.trial_name]));
  const byTrial = new Map();
  for (const r of results) {
    const y = numeric((r.metrics || {})[metric]);
    if (y === null || typeof r.iteration !== "number") continue;
    if (!byTrial.has(r.trial_id)) byTrial.set(r.trial_id, new Map());
    byTrial.get(r.trial_id).set(r.iteration, y);
  }
  const ids = [...byTrial.keys()].sort();
  const xs = [...new Set(ids.flatMap((id) => [...byTrial.get(id).keys()]))].sort((a, b) => a - b);
  const data = [xs, ...ids.map((id) => xs.map((x) => byTrial.get(id).get(x) ?? null))];
  const signature = `${metric}|${ids.join(",")}`;
  if (signature !== curveSignature) {
    if (curvePlot) curvePlot.destroy();
    box.replaceChildren();
    const palette = ["#b7410e", "#1f6fb2", "#2e8b57", "#8a4fbf", "#c08a00", "#444", "#d1495b", "#00798c"];
    curvePlot = new uPlot(
      {
        title: `${metric} per trial`,
        width: Math.min(560, box.parentElement.clientWidth - 20),
        height: 240,
        scales: { x: { time: false } },
        // Iterations are whole numbers: no tick between two of them.
        axes: [{ label: "training_iteration", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] }, { label: metric }],
        series: [
          { label: "iteration" },
          ...ids.map((id, i) => ({
            label: names.get(id) || id,
            stroke: palette[i % palette.length],
            width: 1.5,
            spanGaps: true,
            points: { show: xs.length < 40 },
          })),
        ],
      },
      data,
      box,
    );
    curveSignature = signature;
  } else {
    curvePlot.setData(data);
  }
  box.dataset.trials = String(ids.length);
  box.dataset.points = String(ids.reduce((n, id) => n + byTrial.get(id).size, 0));
}

async function poll(root, paramSelect, metricSelect) {
  const reply = await fetch(`/api/oxray/tune/experiments/${encodeURIComponent(root.dataset.experiment)}`, {
    credentials: "same-origin",
  });
  if (!reply.ok) return;
  const { experiment, results } = await reply.json();
  const trials = experiment.trials || [];
  const params = [...new Set(trials.flatMap((t) => Object.keys(t.config || {})))].sort();
  const metrics = [
    ...new Set(results.flatMap((r) => Object.keys(r.metrics || {}).filter((k) => numeric(r.metrics[k]) !== null))),
  ].sort();
  fill(paramSelect, params, params[0]);
  fill(metricSelect, metrics, experiment.metric);
  if (paramSelect.value && metricSelect.value) {
    drawParam(document.getElementById("param-chart"), trials, paramSelect.value, metricSelect.value);
  }
  if (metricSelect.value) {
    drawCurves(document.getElementById("curve-chart"), trials, results, metricSelect.value);
  }
  root.dataset.results = String(results.length);
}

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("tune-charts");
  const paramSelect = document.getElementById("param");
  const metricSelect = document.getElementById("metric");
  if (!root || !paramSelect || !metricSelect) return;
  const redraw = () => poll(root, paramSelect, metricSelect);
  paramSelect.addEventListener("change", redraw);
  metricSelect.addEventListener("change", redraw);
  redraw();
  setInterval(redraw, 2000);
});
