import assert from "node:assert/strict";
import { test } from "node:test";

import { WorkflowIds } from "../../js/lib/workflow_ids.js";

function memoryStorage() {
  const items = new Map();
  return { getItem: (k) => items.get(k) ?? null, setItem: (k, v) => items.set(k, String(v)) };
}

test("M1: a workflow keeps its first key when the frontend gives its graph a new id, after F5 too", () => {
  const storage = memoryStorage();
  const ids = new WorkflowIds(storage);
  const tab = { changeTracker: { activeState: { id: "old" } } };
  assert.equal(ids.key("old", tab), "old");
  tab.changeTracker.activeState.id = "new"; // the first tab switch of a workflow opened from an API prompt
  assert.equal(ids.key("new", tab), "old");
  assert.equal(ids.resolve("new"), "old"); // a run queued after the switch belongs to it as well
  const reloaded = new WorkflowIds(storage); // F5: a new page, the tab restored with the new id
  assert.equal(reloaded.key("new", { changeTracker: { activeState: { id: "new" } } }), "old");
});

test("M1: mid-switch, the previous tab's graph is not taken for the new tab's", () => {
  const ids = new WorkflowIds(memoryStorage());
  const a = { changeTracker: { activeState: { id: "a" } } };
  const b = { changeTracker: { activeState: { id: "b" } } };
  assert.equal(ids.key("a", a), "a");
  assert.equal(ids.key("a", b), "a"); // tab b open, graph still a's: nothing recorded for b
  assert.equal(ids.key("b", b), "b");
  assert.equal(ids.resolve("b"), "b");
  assert.equal(ids.key("x", null), "x");
  assert.equal(new WorkflowIds({ getItem: () => "not json" }).resolve("x"), "x");
});
