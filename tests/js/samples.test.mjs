import assert from "node:assert/strict";
import { test } from "node:test";

import { chartLayout } from "../../js/lib/chart.js";
import { SampleHistory, chartWindow, dueForRedraw } from "../../js/lib/samples.js";

const MiB = 2 ** 20;

test("history keeps samples ordered, unique and within its age", () => {
  const h = new SampleHistory({ maxAge: 10, maxCount: 100 });
  assert.equal(h.push({ t: 5, rss: 1 }, { t: 3, rss: 2 }, { t: 5, rss: 9 }, null, { rss: 3 }), 2);
  assert.deepEqual(h.samples.map((s) => s.t), [3, 5]);
  h.push({ t: 14, rss: 4 });
  assert.deepEqual(h.samples.map((s) => s.t), [5, 14]); // 3 is older than 14 - 10
  assert.equal(h.latest().t, 14);
  assert.equal(h.peak("rss"), 4);
  assert.equal(h.peak("device_used"), null);
});

test("history is bounded in count", () => {
  const h = new SampleHistory({ maxAge: 1e9, maxCount: 3 });
  for (let t = 0; t < 10; t++) h.push({ t });
  assert.deepEqual(h.samples.map((s) => s.t), [7, 8, 9]);
});

test("chart layout scales series into the box and skips absent fields", () => {
  const samples = [
    { t: 100, rss: 100 * MiB },
    { t: 110, rss: 200 * MiB },
    { t: 120, rss: 50 * MiB, allocated: 10 * MiB },
  ];
  const g = chartLayout(samples, { width: 200, height: 100, window: 20 });
  assert.deepEqual(g.series.map((s) => s.field), ["allocated", "rss"]); // no device_used on a CPU machine
  const rss = g.series.find((s) => s.field === "rss");
  assert.ok(g.yMax >= 200 * MiB);
  // t=100 is the left edge, t=120 the right edge; 0 bytes is the bottom.
  assert.match(rss.d, /^M0\.0 \d+\.\dL100\.0 \d+\.\dL200\.0 \d+\.\d$/);
  assert.equal(rss.last, 50 * MiB);
  assert.deepEqual(chartLayout([], {}).series, []);
});

test("a missing value breaks the line instead of drawing it at zero", () => {
  const g = chartLayout([{ t: 0, rss: 1 }, { t: 1 }, { t: 2, rss: 1 }], { window: 2 });
  assert.equal((g.series[0].d.match(/M/g) || []).length, 2);
});

test("redraws follow the refresh setting; 0 is off", () => {
  assert.equal(dueForRedraw(0, 1000, 1), true);
  assert.equal(dueForRedraw(1000, 1500, 1), false);
  assert.equal(dueForRedraw(1000, 2000, 1), true);
  assert.equal(dueForRedraw(0, 1e9, 0), false);
});

test("the chart spans the history it has, within 30 s to 3 minutes", () => {
  assert.equal(chartWindow([]), 30);
  assert.equal(chartWindow([{ t: 0 }, { t: 10 }]), 30);
  assert.equal(chartWindow([{ t: 0 }, { t: 100 }]), 100);
  assert.equal(chartWindow([{ t: 0 }, { t: 1000 }]), 180);
});
