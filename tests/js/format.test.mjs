import assert from "node:assert/strict";
import { test } from "node:test";

import { escapeHtml, formatBytes, formatSeconds } from "../../js/lib/format.js";

test("formatBytes picks binary units and marks missing values", () => {
  assert.equal(formatBytes(0), "0 B");
  assert.equal(formatBytes(1536), "1.5 KiB");
  assert.equal(formatBytes(8 * 2 ** 30), "8.0 GiB");
  assert.equal(formatBytes(150 * 2 ** 20), "150 MiB");
  assert.equal(formatBytes(-2 * 2 ** 20), "-2.0 MiB");
  assert.equal(formatBytes(null), "–");
  assert.equal(formatBytes(undefined), "–");
  assert.equal(formatBytes(Number.NaN), "–");
});

test("formatSeconds reads like a person would say it", () => {
  assert.equal(formatSeconds(0.0042), "4 ms");
  assert.equal(formatSeconds(3.5), "3.5 s");
  assert.equal(formatSeconds(42), "42 s");
  assert.equal(formatSeconds(125), "2 min 5 s");
  assert.equal(formatSeconds(null), "–");
});

test("escapeHtml neutralises markup", () => {
  assert.equal(escapeHtml(`<img src=x onerror="a">&'`), "&#60;img src=x onerror=&#34;a&#34;&#62;&#38;&#39;");
});
