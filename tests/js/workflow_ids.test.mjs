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

test("M1: a workflow opened from an API prompt (the nil id, keyed by its path) keeps its runs", () => {
  const storage = memoryStorage();
  const ids = new WorkflowIds(storage);
  const NIL = "00000000-0000-0000-0000-000000000000";
  const tab = { changeTracker: { activeState: { id: NIL } } };
  assert.equal(ids.key("path:workflows/a.json", tab, NIL), "path:workflows/a.json");
  ids.notePrompt("p1", "path:workflows/a.json"); // its run, queued with the nil id
  tab.changeTracker.activeState.id = "real"; // 1.49: a real id at the first switch
  assert.equal(ids.key("real", tab, "real"), "path:workflows/a.json");
  const reloaded = new WorkflowIds(storage);
  assert.equal(reloaded.key("real", { changeTracker: { activeState: { id: "real" } } }, "real"), "path:workflows/a.json");
  assert.equal(reloaded.promptKey("p1"), "path:workflows/a.json");
  assert.equal(reloaded.promptKey("p2"), null);
});
